package jobengine

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Job.AddNode without a server: what it checks at once, and what the completion carries. Against a real
// server: graph_server_test.go.

func graphJob() *Job {
	id := "g1"
	return &Job{JobInfo: JobInfo{ID: "j1", GraphID: &id}, Graph: &NodeRef{GraphID: id, Node: "split"}}
}

func TestAddNodeRefusesWhatItCanCheckNamingTheField(t *testing.T) {
	w := NewWorker(nil, Options{})
	cases := []struct {
		job   *Job
		node  GraphNode
		field string
	}{
		{&Job{JobInfo: JobInfo{ID: "plain"}}, GraphNode{Name: "a", Task: "t"}, "nodes"},
		{graphJob(), GraphNode{Name: "a", Task: "t", Policy: "sometimes"}, "nodes.policy"},
		{graphJob(), GraphNode{Name: "a"}, "nodes.task"},
		{graphJob(), GraphNode{Name: "a", Task: "t", Payload: make(chan int)}, "payload"},
	}
	for _, tc := range cases {
		_, err := tc.job.AddNode(tc.node)
		var invalid *InvalidNodeError
		var perm *PermanentError
		if !errors.As(err, &invalid) || !errors.As(err, &perm) || invalid.Field != tc.field {
			t.Fatalf("AddNode(%+v): %v, want a permanent InvalidNodeError naming %s", tc.node, err, tc.field)
		}
		f := w.failure(tc.job, err, false)
		if f.Retryable || f.Error.Type != "InvalidJob" || !strings.Contains(f.Error.Message, tc.field) {
			t.Fatalf("reported as %+v, want a non-retryable InvalidJob naming %s", f, tc.field)
		}
		if len(tc.job.addedNodes()) != 0 {
			t.Fatalf("a refused node was kept: %+v", tc.job.addedNodes())
		}
	}
}

func TestAddNodeNamesNodesOnceAndCapsTheirNumber(t *testing.T) {
	job := graphJob()
	name, err := job.AddNode(GraphNode{Task: "work"})
	if err != nil || name != "work-1" {
		t.Fatalf("an unnamed node: %q, %v; want work-1", name, err)
	}
	if _, err := job.AddNode(GraphNode{Name: "work-1", Task: "work"}); err == nil {
		t.Fatal("a name used twice in one attempt was accepted")
	}
	for i := len(job.addedNodes()); i < MaxAddedNodes; i++ {
		if _, err := job.AddNode(GraphNode{Task: "work"}); err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
	}
	var invalid *InvalidNodeError
	if _, err := job.AddNode(GraphNode{Task: "work"}); !errors.As(err, &invalid) || invalid.Field != "nodes" {
		t.Fatalf("node %d: %v, want an InvalidNodeError", MaxAddedNodes+1, err)
	}
	if n := len(job.addedNodes()); n != MaxAddedNodes {
		t.Fatalf("%d nodes kept, want %d", n, MaxAddedNodes)
	}
}

func TestACompletionCarriesTheAddedNodesInTheProtocolsShape(t *testing.T) {
	job := graphJob()
	prio := 2
	after := []string{"work-0"}
	payload := map[string]int{"n": 1}
	if _, err := job.AddNode(GraphNode{Name: "work-0", Task: "work", Payload: map[string]int{"n": 0},
		Before: []string{"join"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := job.AddNode(GraphNode{Name: "tail", Task: "work", Payload: payload, After: after,
		Policy: PolicyContinue, Queue: "q", Priority: &prio, MaxAttempts: 3, Timeout: 1.5}); err != nil {
		t.Fatal(err)
	}
	// What the handler passed may change after the call: the nodes keep what they were given.
	after[0], payload["n"], prio = "changed", 99, 9
	raw, err := json.Marshal(Completion{JobID: job.ID, Token: "tok", Result: json.RawMessage("2"),
		Nodes: job.addedNodes()})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"job_id": "j1", "token": "tok", "result": 2.0, "nodes": []any{
		map[string]any{"name": "work-0", "task": "work", "payload": map[string]any{"n": 0.0}, "after": []any{},
			"before": []any{"join"}},
		map[string]any{"name": "tail", "task": "work", "payload": map[string]any{"n": 1.0},
			"after": []any{"work-0"}, "before": []any{}, "policy": "continue", "queue": "q", "priority": 2.0,
			"max_attempts": 3.0, "timeout": 1.5},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sent %v\nwant %v", got, want)
	}
	raw, _ = json.Marshal(Completion{JobID: "plain", Token: "tok"})
	if strings.Contains(string(raw), "nodes") {
		t.Fatalf("a completion without nodes sends %s", raw)
	}
}

func TestSubmitGraphTurnsBeforeIntoEdges(t *testing.T) {
	g := NewGraph{Nodes: []GraphNode{
		{Name: "a", Task: "t", Before: []string{"c"}}, {Name: "b", Task: "t", After: []string{"a"}},
		{Name: "c", Task: "t"},
	}}.body()
	want := [][2]string{{"a", "c"}, {"a", "b"}}
	if !reflect.DeepEqual(g.Edges, want) {
		t.Fatalf("edges %v, want %v", g.Edges, want)
	}
}
