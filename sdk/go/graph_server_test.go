package jobengine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

type number struct {
	N int `json:"n"`
}

type summed struct {
	Sum     int `json:"sum"`
	Parents int `json:"parents"`
}

// fanInWorker starts a Go worker of queue q whose go_graph_number returns its payload's n and whose
// go_graph_sum sums its parents' results, recording the node each sum job was claimed as.
func fanInWorker(t *testing.T, c *jobengine.Client, q string, mu *sync.Mutex, nodes map[string]*jobengine.NodeRef) {
	t.Helper()
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_graph_number", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in number
		if err := job.Decode(&in); err != nil {
			return nil, jobengine.Permanent(err)
		}
		return in.N, nil
	})
	w.HandleFunc("go_graph_sum", func(ctx context.Context, job *jobengine.Job) (any, error) {
		parents, err := job.ParentResults(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		nodes[job.ID] = job.Graph
		mu.Unlock()
		out := summed{Parents: len(parents)}
		for name, raw := range parents {
			var n int
			if err := json.Unmarshal(raw, &n); err != nil {
				return nil, jobengine.Permanent(fmt.Errorf("parent %s: %w", name, err))
			}
			out.Sum += n
		}
		return out, nil
	})
	start(t, w)
}

func TestAGoFanInNodeSumsItsParentsResults(t *testing.T) {
	c := server(t)
	q := queue(t)
	var mu sync.Mutex
	claimedAs := map[string]*jobengine.NodeRef{}
	fanInWorker(t, c, q, &mu, claimedAs)
	var nodes []jobengine.GraphNode
	var after []string
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("n%d", i)
		nodes = append(nodes, jobengine.GraphNode{Name: name, Task: "go_graph_number", Payload: number{N: 10 * i},
			Queue: q})
		after = append(after, name)
	}
	nodes = append(nodes, jobengine.GraphNode{Name: "sum", Task: "go_graph_sum", Queue: q, After: after})
	g, err := c.SubmitGraph(context.Background(), jobengine.NewGraph{Name: "fan-in", Nodes: nodes})
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	plain := enqueue(t, c, jobengine.NewJob{Task: "go_graph_sum", Queue: q})

	done := waitGraph(t, c, g.ID)
	if done.State != jobengine.GraphSucceeded {
		t.Fatalf("graph %s with nodes %v, want succeeded", done.State, states(done))
	}
	var total summed
	decode(t, done.Results()["sum"], &total)
	if total != (summed{Sum: 100, Parents: 4}) {
		t.Fatalf("the fan-in node returned %+v, want the sum of its 4 parents, 100", total)
	}
	ended, err := c.Wait(context.Background(), plain.ID, graphWait)
	if err != nil || ended.State != "succeeded" {
		t.Fatalf("the plain job: %+v, %v", ended, err)
	}
	var none summed
	decode(t, ended.Result, &none)
	if none != (summed{}) {
		t.Fatalf("a job outside a graph got parents' results: %+v", none)
	}

	var sumID string
	for _, n := range done.Nodes {
		if n.Name == "sum" {
			sumID = n.Job.ID
			if n.Job.GraphID == nil || *n.Job.GraphID != g.ID {
				t.Fatalf("the node's job names graph %v, want %s", n.Job.GraphID, g.ID)
			}
		}
	}
	mu.Lock()
	ref, plainRef := claimedAs[sumID], claimedAs[plain.ID]
	mu.Unlock()
	if ref == nil || *ref != (jobengine.NodeRef{GraphID: g.ID, Node: "sum"}) || plainRef != nil {
		t.Fatalf("claimed as %+v (plain job: %+v), want graph %s node sum", ref, plainRef, g.ID)
	}
	read, err := c.ParentResults(context.Background(), sumID)
	if err != nil {
		t.Fatalf("ParentResults: %v", err)
	}
	if read.Node == nil || *read.Node != "sum" || read.GraphID == nil || *read.GraphID != g.ID ||
		len(read.Results) != 4 || string(read.Results["n3"]) != "30" {
		t.Fatalf("ParentResults answered %+v", read)
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

type part struct {
	N int `json:"n"`
}

// fanOutWorker starts a Go worker of queue q whose go_fan_split adds one go_fan_work node per n of its
// payload's Parts before the node "join" (or, with Clash, one named Clash and before no node), whose
// go_fan_work returns its payload's n and whose go_fan_join sums its parents' results.
func fanOutWorker(t *testing.T, c *jobengine.Client, q string) {
	t.Helper()
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_fan_split", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in struct {
			Parts []int  `json:"parts"`
			Clash string `json:"clash"`
		}
		if err := job.Decode(&in); err != nil {
			return nil, jobengine.Permanent(err)
		}
		for i, n := range in.Parts {
			node := jobengine.GraphNode{Name: fmt.Sprintf("work-%d", i), Task: "go_fan_work", Payload: part{N: n},
				Queue: q, Before: []string{"join"}}
			if in.Clash != "" {
				node.Name, node.Before = in.Clash, nil
			}
			if _, err := job.AddNode(node); err != nil {
				return nil, err
			}
		}
		return len(in.Parts), nil
	})
	w.HandleFunc("go_fan_work", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in part
		if err := job.Decode(&in); err != nil {
			return nil, jobengine.Permanent(err)
		}
		return in.N, nil
	})
	w.HandleFunc("go_fan_join", func(ctx context.Context, job *jobengine.Job) (any, error) {
		parents, err := job.ParentResults(ctx)
		if err != nil {
			return nil, err
		}
		out := summed{}
		for name, raw := range parents {
			if !strings.HasPrefix(name, "work-") {
				continue
			}
			var n int
			if err := json.Unmarshal(raw, &n); err != nil {
				return nil, jobengine.Permanent(fmt.Errorf("parent %s: %w", name, err))
			}
			out.Sum += n
			out.Parents++
		}
		return out, nil
	})
	start(t, w)
}

func fanOutGraph(q string, split any) jobengine.NewGraph {
	return jobengine.NewGraph{Name: "fan-out", Nodes: []jobengine.GraphNode{
		{Name: "split", Task: "go_fan_split", Payload: split, Queue: q},
		{Name: "join", Task: "go_fan_join", Queue: q, After: []string{"split"}},
	}}
}

func TestAGoSplitNodeAddsNodesThatAJoinDeclaredInAdvanceSums(t *testing.T) {
	c := server(t)
	q := queue(t)
	fanOutWorker(t, c, q)
	parts := []int{}
	want := summed{}
	for i := 1; i <= 6; i++ {
		parts = append(parts, 7*i)
		want.Sum += 7 * i
		want.Parents++
	}
	g, err := c.SubmitGraph(context.Background(), fanOutGraph(q, map[string]any{"parts": parts}))
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	if g.Total != 2 {
		t.Fatalf("submitted %d nodes, want 2", g.Total)
	}
	done := waitGraph(t, c, g.ID)
	if done.State != jobengine.GraphSucceeded || done.Total != 2+len(parts) || done.Done != done.Total {
		t.Fatalf("graph %s, %d of %d done, nodes %v: want succeeded with %d nodes", done.State, done.Done,
			done.Total, states(done), 2+len(parts))
	}
	var total summed
	decode(t, done.Results()["join"], &total)
	if total != want {
		t.Fatalf("the join returned %+v, want %+v", total, want)
	}
	var count int
	decode(t, done.Results()["split"], &count)
	if count != len(parts) {
		t.Fatalf("split returned %d, want %d", count, len(parts))
	}
	for _, n := range done.Nodes {
		switch {
		case n.Name == "join":
			if len(n.Parents) != 1+len(parts) {
				t.Fatalf("the join's parents are %v, want split and every work node", n.Parents)
			}
		case strings.HasPrefix(n.Name, "work-"):
			if len(n.Parents) != 1 || n.Parents[0] != "split" || n.Job.State != "succeeded" {
				t.Fatalf("added node %s: parents %v, state %s", n.Name, n.Parents, n.Job.State)
			}
		}
	}
}

func TestAnAddTheGraphRefusesEndsTheNodeDead(t *testing.T) {
	c := server(t)
	q := queue(t)
	fanOutWorker(t, c, q)
	// A name the graph has is refused when the completion is stored; a name with a space by the request's
	// schema (the whole report is a 422): only the server can tell either.
	for clash, says := range map[string]string{"join": "'join' is already in the graph", "not a name": "name"} {
		split := map[string]any{"parts": []int{1}, "clash": clash}
		g, err := c.SubmitGraph(context.Background(), fanOutGraph(q, split))
		if err != nil {
			t.Fatalf("SubmitGraph: %v", err)
		}
		done := waitGraph(t, c, g.ID)
		want := map[string]string{"split": "dead", "join": "cancelled"}
		if done.State != jobengine.GraphFailed || done.Total != 2 || !equal(states(done), want) {
			t.Fatalf("adding %q: graph %s of %d nodes %v, want failed with %v (nothing added)", clash,
				done.State, done.Total, states(done), want)
		}
		for _, n := range done.Nodes {
			if n.Name != "split" {
				continue
			}
			if n.Job.Attempt != 1 || len(n.Job.Errors) != 1 || n.Job.Errors[0].Type != "InvalidJob" ||
				!strings.Contains(n.Job.Errors[0].Message, says) {
				t.Fatalf("adding %q: split ended after attempt %d with errors %+v, want one InvalidJob "+
					"saying %q", clash, n.Job.Attempt, n.Job.Errors, says)
			}
			t.Logf("adding %q: %s", clash, n.Job.Errors[0].Message)
		}
	}
}
