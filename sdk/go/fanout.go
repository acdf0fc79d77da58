package jobengine

import (
	"encoding/json"
	"fmt"
)

// Dynamic fan-out: a running graph node adds nodes to its own graph with Job.AddNode. They ride on its
// completion and the server stores them in the transaction that completes it, so a node that fails, or
// whose worker dies before reporting, adds nothing.

// MaxAddedNodes is the most nodes one completion may add (the server's limit).
const MaxAddedNodes = 1000

// AddedNode is a node as a completion carries it (an entry of the worker protocol's "nodes"): the fields of
// a node of POST /api/v1/graphs plus After (nodes it runs after: the completing node when empty, or nodes
// added with it) and Before (nodes of the graph waiting on the completing node that wait on this one too).
type AddedNode struct {
	Name        string          `json:"name"`
	Task        string          `json:"task"`
	Payload     json.RawMessage `json:"payload"`
	After       []string        `json:"after"`
	Before      []string        `json:"before"`
	Policy      string          `json:"policy,omitempty"`
	Queue       string          `json:"queue,omitempty"`
	Priority    *int            `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     float64         `json:"timeout,omitempty"`
}

// InvalidNodeError: a node a graph node adds is refused; Field names what is wrong. Job.AddNode returns it
// (wrapped in Permanent) for what it checks at once. Its type in the job's error record is InvalidJob, as
// the server and the Python workers name it.
type InvalidNodeError struct {
	Field   string
	Message string
}

func (e *InvalidNodeError) Error() string {
	return fmt.Sprintf("jobengine: %s: %s", e.Field, e.Message)
}

// ErrorType names it in the job's error record.
func (e *InvalidNodeError) ErrorType() string { return "InvalidJob" }

func invalidNode(field, format string, args ...any) error {
	return Permanent(&InvalidNodeError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// AddNode adds node to this job's graph when the handler succeeds: it is sent with the job's completion
// and stored with it, and it returns the node's name (node.Name, else the task's name and a number).
// node.After names the nodes it runs after: this one (when empty) or nodes added before it in this
// attempt, so added nodes can chain. node.Before names nodes of the graph that list this job among their
// parents and must wait for the added node too: a join declared in advance then receives the added
// nodes' results by name in its ParentResults.
//
// What can be checked here fails at once with a permanent *InvalidNodeError naming the field (a job
// outside a graph, a name used twice in this attempt, a policy, a payload that is not JSON, more than
// MaxAddedNodes): return it and the job goes dead. The rest (an After or Before name, a name the graph
// already has, an unknown task, the graph's size) the server checks when the completion arrives: if it
// refuses, nothing is added and the job ends dead with the server's error (type InvalidJob), as a retry
// would add the same nodes. Each attempt starts with no nodes, and a handler that returns an error adds
// none; a phase of Phases that succeeded in an earlier attempt is skipped, so add nodes in the last one.
// Usage:
//
//	w.HandleFunc("split", func(ctx context.Context, job *jobengine.Job) (any, error) {
//		for i, part := range parts {
//			if _, err := job.AddNode(jobengine.GraphNode{Name: fmt.Sprintf("work-%d", i), Task: "work",
//				Payload: part, Before: []string{"join"}}); err != nil {
//				return nil, err
//			}
//		}
//		return len(parts), nil
//	})
func (j *Job) AddNode(node GraphNode) (string, error) {
	if j.GraphID == nil && j.Graph == nil {
		return "", invalidNode("nodes", "only a node of a graph can add nodes to it")
	}
	switch node.Policy {
	case "", PolicyCancel, PolicyContinue, PolicyAlways:
	default:
		return "", invalidNode("nodes.policy", "must be cancel, continue or always (got %q)", node.Policy)
	}
	if node.Task == "" {
		return "", invalidNode("nodes.task", "the task is missing")
	}
	payload, err := json.Marshal(node.Payload)
	if err != nil {
		return "", invalidNode("payload", "not JSON: %v", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.added) >= MaxAddedNodes {
		return "", invalidNode("nodes", "a node adds at most %d nodes at once", MaxAddedNodes)
	}
	name := node.Name
	if name == "" {
		name = fmt.Sprintf("%s-%d", node.Task, len(j.added)+1)
	}
	for _, n := range j.added {
		if n.Name == name {
			return "", invalidNode("nodes", "node %q is named twice", name)
		}
	}
	// Copies: the handler may change what it passed after the call; the completion is sent later.
	var priority *int
	if node.Priority != nil {
		p := *node.Priority
		priority = &p
	}
	j.added = append(j.added, AddedNode{Name: name, Task: node.Task, Payload: payload,
		After: append([]string{}, node.After...), Before: append([]string{}, node.Before...), Policy: node.Policy,
		Queue: node.Queue, Priority: priority, MaxAttempts: node.MaxAttempts, Timeout: node.Timeout})
	return name, nil
}

// addedNodes are the nodes this attempt added, for its completion.
func (j *Job) addedNodes() []AddedNode {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]AddedNode(nil), j.added...)
}
