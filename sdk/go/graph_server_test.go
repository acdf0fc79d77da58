package jobengine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jobengine "github.com/jobengine/jobengine/sdk/go"
)

// Graphs submitted through the Go SDK against a real server (the key needs graph:read and graph:write
// besides the worker scopes), their nodes run by a Go worker: success, failure policies and retry, cancel,
// and bad graphs refused naming the field.

const graphWait = 60 * time.Second

// ledger counts the runs of each node (by its payload's name) across a test's handlers.
type ledger struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *ledger) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.runs == nil {
		l.runs = map[string]int{}
	}
	l.runs[name]++
}

func (l *ledger) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[name]
}

type step struct {
	Name string `json:"name"`
}

// graphWorker starts a Go worker of queue q whose go_graph_step returns its payload's name, whose
// go_graph_flaky fails for good until fixed is set, and whose go_graph_block runs until its context ends.
func graphWorker(t *testing.T, c *jobengine.Client, q string, l *ledger, fixed *atomic.Bool,
	blocking chan<- string) {
	t.Helper()
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_graph_step", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in step
		if err := job.Decode(&in); err != nil {
			return nil, jobengine.Permanent(err)
		}
		l.add(in.Name)
		return "ran " + in.Name, nil
	})
	w.HandleFunc("go_graph_flaky", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in step
		_ = job.Decode(&in)
		l.add(in.Name)
		if fixed == nil || !fixed.Load() {
			return nil, jobengine.Permanent(errors.New("not fixed yet"))
		}
		return "fixed " + in.Name, nil
	})
	w.HandleFunc("go_graph_block", func(ctx context.Context, job *jobengine.Job) (any, error) {
		blocking <- job.ID
		<-ctx.Done()
		return nil, ctx.Err()
	})
	start(t, w)
}

func node(name, task, q string, after ...string) jobengine.GraphNode {
	return jobengine.GraphNode{Name: name, Task: task, Payload: step{Name: name}, Queue: q, After: after}
}

func waitGraph(t *testing.T, c *jobengine.Client, id string) *jobengine.GraphInfo {
	t.Helper()
	g, err := c.WaitGraph(context.Background(), id, graphWait)
	if err != nil {
		t.Fatalf("WaitGraph %s: %v", id, err)
	}
	return g
}

func states(g *jobengine.GraphInfo) map[string]string {
	out := map[string]string{}
	for _, n := range g.Nodes {
		out[n.Name] = n.Job.State
	}
	return out
}

func TestAGraphSubmittedFromGoRunsOnAGoWorker(t *testing.T) {
	c := server(t)
	q := queue(t)
	l := &ledger{}
	graphWorker(t, c, q, l, nil, nil)
	g, err := c.SubmitGraph(context.Background(), jobengine.NewGraph{Name: "diamond", Nodes: []jobengine.GraphNode{
		node("a", "go_graph_step", q), node("b", "go_graph_step", q, "a"), node("c", "go_graph_step", q, "a"),
		node("d", "go_graph_step", q, "b", "c"),
	}})
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	if g.Total != 4 || g.Name != "diamond" {
		t.Fatalf("submitted %+v", g)
	}
	done := waitGraph(t, c, g.ID[:13]) // a unique prefix names it
	if done.ID != g.ID || done.State != jobengine.GraphSucceeded || done.Done != 4 || done.CompletedAt == nil {
		t.Fatalf("graph ended %+v", done)
	}
	var result string
	decode(t, done.Results()["d"], &result)
	if result != "ran d" {
		t.Fatalf("d's result %q", result)
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if l.count(name) != 1 {
			t.Fatalf("node %s ran %d times", name, l.count(name))
		}
	}
	page, err := c.ListGraphs(context.Background(), 500, "")
	if err != nil {
		t.Fatalf("ListGraphs: %v", err)
	}
	found := false
	for _, item := range page.Items {
		found = found || item.ID == g.ID && item.State == jobengine.GraphSucceeded
	}
	if !found {
		t.Fatalf("graph %s not listed as succeeded in %+v", g.ID, page.Items)
	}
}

func TestGraphFailurePoliciesThenRetry(t *testing.T) {
	c := server(t)
	q := queue(t)
	l := &ledger{}
	var fixed atomic.Bool
	graphWorker(t, c, q, l, &fixed, nil)
	soft := node("soft", "go_graph_flaky", q)
	soft.Policy = jobengine.PolicyContinue
	cleanup := node("cleanup", "go_graph_step", q, "hard", "soft")
	cleanup.Policy = jobengine.PolicyAlways
	g, err := c.SubmitGraph(context.Background(), jobengine.NewGraph{Nodes: []jobengine.GraphNode{
		node("hard", "go_graph_flaky", q), node("cancelled", "go_graph_step", q, "hard"),
		soft, node("anyway", "go_graph_step", q, "soft"), cleanup,
	}})
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	failed := waitGraph(t, c, g.ID)
	want := map[string]string{"hard": "dead", "cancelled": "cancelled", "soft": "dead", "anyway": "succeeded",
		"cleanup": "succeeded"}
	if failed.State != jobengine.GraphFailed || !equal(states(failed), want) {
		t.Fatalf("graph %s with nodes %v, want failed with %v", failed.State, states(failed), want)
	}
	if l.count("cancelled") != 0 {
		t.Fatal("a node after a failed cancel-policy node ran")
	}

	fixed.Store(true)
	if _, err := c.RetryGraph(context.Background(), g.ID); err != nil {
		t.Fatalf("RetryGraph: %v", err)
	}
	done := waitGraph(t, c, g.ID)
	if done.State != jobengine.GraphSucceeded || done.Counts["succeeded"] != 5 {
		t.Fatalf("after the retry: %s %v", done.State, states(done))
	}
	// Only what failed or was cancelled ran again.
	runs := map[string]int{"hard": 2, "soft": 2, "cancelled": 1, "anyway": 1, "cleanup": 1}
	for name, n := range runs {
		if l.count(name) != n {
			t.Fatalf("node %s ran %d times, want %d", name, l.count(name), n)
		}
	}
	_, err = c.RetryGraph(context.Background(), g.ID)
	var apiErr *jobengine.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 {
		t.Fatalf("retrying a succeeded graph: %v, want a 409 APIError", err)
	}
}

func TestCancelAGraphStopsItsRunningNode(t *testing.T) {
	c := server(t)
	q := queue(t)
	l := &ledger{}
	blocking := make(chan string, 1)
	graphWorker(t, c, q, l, nil, blocking)
	g, err := c.SubmitGraph(context.Background(), jobengine.NewGraph{Nodes: []jobengine.GraphNode{
		node("block", "go_graph_block", q), node("after", "go_graph_step", q, "block"),
	}})
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	select {
	case <-blocking:
	case <-time.After(graphWait):
		t.Fatal("the blocking node never started")
	}
	if _, err := c.CancelGraph(context.Background(), g.ID); err != nil {
		t.Fatalf("CancelGraph: %v", err)
	}
	done := waitGraph(t, c, g.ID)
	if done.State != jobengine.GraphCancelled || done.Counts["cancelled"] != 2 || l.count("after") != 0 {
		t.Fatalf("graph %s with nodes %v, want cancelled", done.State, states(done))
	}
	_, err = c.CancelGraph(context.Background(), g.ID)
	var apiErr *jobengine.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 {
		t.Fatalf("cancelling an ended graph: %v, want a 409 APIError", err)
	}
}

func TestABadGraphIsRefusedNamingTheField(t *testing.T) {
	c := server(t)
	q := queue(t)
	_, err := c.SubmitGraph(context.Background(), jobengine.NewGraph{Nodes: []jobengine.GraphNode{
		node("a", "go_graph_step", q, "b"), node("b", "go_graph_step", q, "a"),
	}})
	var apiErr *jobengine.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 422 || apiErr.Problem.Field != "edges" {
		t.Fatalf("a cycle: %v, want a 422 naming edges", err)
	}
	_, err = c.GetGraph(context.Background(), "no-such-graph")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("an unknown graph: %v, want a 404", err)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
