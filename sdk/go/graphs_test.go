package jobengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// The graph calls against httptest servers: what SubmitGraph sends, and how WaitGraph polls and gives up.
// Against a real server: graph_server_test.go.

func TestSubmitGraphSendsTheAPIsJSONWithAfterAsEdges(t *testing.T) {
	var body map[string]any
	var key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/graphs" {
			t.Errorf("%s %s, want POST /api/v1/graphs", r.Method, r.URL.Path)
		}
		key = r.Header.Get("Idempotency-Key")
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		w.WriteHeader(201)
		fmt.Fprint(w, `{"id":"g1","tenant":"t","name":"etl","state":"pending","total":3,"done":0,"progress":0,
			"counts":{"queued":1,"blocked":2},"created_at":"2026-01-02T03:04:05Z","nodes":null}`)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	prio := 3
	g, err := c.SubmitGraph(context.Background(), NewGraph{Name: "etl", Nodes: []GraphNode{
		{Name: "a", Task: "extract", Payload: map[string]int{"day": 1}, Priority: &prio},
		{Name: "b", Task: "load", After: []string{"a"}, Policy: PolicyContinue, MaxAttempts: 2},
		{Name: "c", Task: "cleanup", Policy: PolicyAlways},
	}, Edges: [][2]string{{"b", "c"}}})
	if err != nil {
		t.Fatalf("SubmitGraph: %v", err)
	}
	if g.ID != "g1" || g.State != GraphPending || g.Ended() || g.Counts["blocked"] != 2 || g.CreatedAt == nil {
		t.Fatalf("graph %+v", g)
	}
	want := map[string]any{
		"name": "etl",
		"nodes": []any{
			map[string]any{"name": "a", "task": "extract", "payload": map[string]any{"day": 1.0}, "priority": 3.0},
			map[string]any{"name": "b", "task": "load", "payload": nil, "policy": "continue", "max_attempts": 2.0},
			map[string]any{"name": "c", "task": "cleanup", "payload": nil, "policy": "always"},
		},
		"edges": []any{[]any{"a", "b"}, []any{"b", "c"}},
	}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("sent %v\nwant %v", body, want)
	}
	if len(key) != 32 {
		t.Fatalf("Idempotency-Key %q, want a random one", key)
	}
}

func TestWaitGraphReadsUntilTheGraphEnds(t *testing.T) {
	var calls int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/graphs/g1" {
			t.Errorf("GET %s", r.URL.Path)
		}
		state := "running"
		if atomic.AddInt32(&calls, 1) == 3 {
			state = "succeeded"
		}
		fmt.Fprintf(w, `{"id":"g1","state":%q,"total":1,"done":1,"nodes":[{"name":"a","policy":"cancel",
			"parents":[],"job":{"id":"j1","state":"succeeded","result":{"n":1}}}]}`, state)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	g, err := c.WaitGraph(context.Background(), "g1", 30*time.Second)
	if err != nil {
		t.Fatalf("WaitGraph: %v", err)
	}
	if g.State != GraphSucceeded || atomic.LoadInt32(&calls) != 3 || string(g.Results()["a"]) != `{"n":1}` {
		t.Fatalf("graph %+v after %d reads", g, calls)
	}
}

func TestWaitGraphRunsOutWithTheGraphAsItIs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"g1","state":"running","total":2,"done":1}`)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	g, err := c.WaitGraph(context.Background(), "g1", 300*time.Millisecond)
	if !errors.Is(err, ErrGraphWaitTimeout) || g == nil || g.State != GraphRunning {
		t.Fatalf("WaitGraph: %+v, %v; want the running graph and ErrGraphWaitTimeout", g, err)
	}
	if _, err := c.WaitGraph(context.Background(), "g1", -time.Second); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
}

func TestParentResultsPastTheLimitFailTheJobForGood(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/worker/jobs/j1/parent-results" {
			t.Errorf("%s %s, want GET /api/v1/worker/jobs/j1/parent-results", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(409)
		fmt.Fprint(w, `{"type":"urn:jobengine:problem:results-too-large","status":409,"field":"results",
			"detail":"the parents' results are 5000000 bytes as JSON","size":5000000,"limit":4194304}`)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	graph := "g1"
	node := &Job{JobInfo: JobInfo{ID: "j1", GraphID: &graph}, Graph: &NodeRef{GraphID: graph, Node: "sum"}, client: c}
	_, err := node.ParentResults(context.Background())
	var perm *PermanentError
	var tooLarge *ResultsTooLargeError
	if !errors.As(err, &perm) || !errors.As(err, &tooLarge) || tooLarge.Err.StatusCode != 409 {
		t.Fatalf("ParentResults: %v, want a permanent *ResultsTooLargeError", err)
	}
	f := (&Worker{}).failure(node, err, false)
	if f.Retryable || f.Error.Type != "ResultsTooLarge" {
		t.Fatalf("the failure reported: %+v, want not retryable, of type ResultsTooLarge", f)
	}

	plain := &Job{JobInfo: JobInfo{ID: "j2"}, client: c}
	results, err := plain.ParentResults(context.Background())
	if err != nil || len(results) != 0 || calls.Load() != 1 {
		t.Fatalf("a job outside a graph: %v, %v after %d calls; want none, asked nothing", results, err, calls.Load())
	}
}
