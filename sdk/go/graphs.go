package jobengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Graphs of jobs (/api/v1/graphs, scopes graph:read and graph:write): a DAG of named nodes, each an
// ordinary job, submitted as one unit. A node runs once its parents succeeded; its failure policy says what
// its own failure does to the nodes after it.

// Failure policies of a graph node.
const (
	// PolicyCancel (the default): the node's failure cancels the nodes after it.
	PolicyCancel = "cancel"
	// PolicyContinue: the nodes after it run as if it had succeeded.
	PolicyContinue = "continue"
	// PolicyAlways: the node runs once its parents ended, whatever they ended as (a cleanup step).
	PolicyAlways = "always"
)

// Graph states: pending (no node started), running, then succeeded (every node succeeded), failed (every
// node ended, one did not succeed) or cancelled.
const (
	GraphPending   = "pending"
	GraphRunning   = "running"
	GraphSucceeded = "succeeded"
	GraphFailed    = "failed"
	GraphCancelled = "cancelled"
)

// GraphNode is a node to submit (SubmitGraph) or to add from a running node (Job.AddNode): its name in the
// graph, its task and payload, the nodes it runs After (edges [parent, this]) and Before (edges [this,
// child]), its options (zero: the task's default on the server) and its failure Policy (empty:
// PolicyCancel).
type GraphNode struct {
	Name        string   `json:"name"`
	Task        string   `json:"task"`
	Payload     any      `json:"payload"`
	Queue       string   `json:"queue,omitempty"`
	Priority    *int     `json:"priority,omitempty"`
	MaxAttempts int      `json:"max_attempts,omitempty"`
	Timeout     float64  `json:"timeout,omitempty"`
	Policy      string   `json:"policy,omitempty"`
	After       []string `json:"-"`
	Before      []string `json:"-"`
}

// NewGraph is a graph to submit: its Name (empty: "graph"), its Nodes, and Edges [parent, child] by node
// name beside the nodes' After.
type NewGraph struct {
	Name  string      `json:"name,omitempty"`
	Nodes []GraphNode `json:"nodes"`
	Edges [][2]string `json:"edges"`
}

// GraphInfo is a graph as the API shows it: its State, Done of Total nodes ended, Progress (0..1), node
// Counts by job state and, when read alone (GetGraph, WaitGraph), its Nodes with their jobs.
type GraphInfo struct {
	ID          string          `json:"id"`
	Tenant      string          `json:"tenant"`
	Name        string          `json:"name"`
	State       string          `json:"state"`
	Total       int             `json:"total"`
	Done        int             `json:"done"`
	Progress    float64         `json:"progress"`
	Counts      map[string]int  `json:"counts"`
	CreatedAt   *time.Time      `json:"created_at"`
	UpdatedAt   *time.Time      `json:"updated_at"`
	StartedAt   *time.Time      `json:"started_at"`
	CompletedAt *time.Time      `json:"completed_at"`
	Nodes       []GraphNodeInfo `json:"nodes"`
}

// GraphNodeInfo is a stored node: its name, policy, parents' names and its job as it is now.
type GraphNodeInfo struct {
	Name    string   `json:"name"`
	Policy  string   `json:"policy"`
	Parents []string `json:"parents"`
	Job     JobInfo  `json:"job"`
}

// GraphPage is a page of graphs, newest first; NextCursor (nil at the end) asks for the next one.
type GraphPage struct {
	Items      []GraphInfo `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

// Ended reports whether the graph succeeded, failed or was cancelled: its outcome is written, no node runs.
func (g *GraphInfo) Ended() bool {
	switch g.State {
	case GraphSucceeded, GraphFailed, GraphCancelled:
		return true
	}
	return false
}

// Results are the results of the nodes that succeeded, by node name (empty unless read with its nodes).
func (g *GraphInfo) Results() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, n := range g.Nodes {
		if n.Job.State == "succeeded" {
			out[n.Name] = n.Job.Result
		}
	}
	return out
}

// body is the JSON of POST /api/v1/graphs: the nodes' After and Before become edges.
func (g NewGraph) body() NewGraph {
	edges := make([][2]string, 0, len(g.Edges))
	for _, n := range g.Nodes {
		for _, parent := range n.After {
			edges = append(edges, [2]string{parent, n.Name})
		}
		for _, child := range n.Before {
			edges = append(edges, [2]string{n.Name, child})
		}
	}
	g.Edges = append(edges, g.Edges...)
	return g
}

// SubmitGraph stores the graph and every node job at once, all or nothing (scope graph:write); nodes
// without parents are queued. A bad graph (a cycle, an edge naming an unknown node, two nodes of one name)
// is an *APIError 422 whose Problem.Field names the field. It always sends an Idempotency-Key header, so a
// call retried after a lost answer cannot submit twice. Usage:
//
//	g, err := client.SubmitGraph(ctx, jobengine.NewGraph{Name: "nightly", Nodes: []jobengine.GraphNode{
//		{Name: "extract", Task: "extract", Payload: map[string]string{"day": "2024-05-01"}},
//		{Name: "load", Task: "load", After: []string{"extract"}, Policy: jobengine.PolicyContinue},
//		{Name: "cleanup", Task: "cleanup", After: []string{"extract", "load"}, Policy: jobengine.PolicyAlways},
//	}})
//	...
//	done, err := client.WaitGraph(ctx, g.ID, 10*time.Minute)
func (c *Client) SubmitGraph(ctx context.Context, graph NewGraph) (*GraphInfo, error) {
	var out GraphInfo
	opt := callOptions{headers: map[string]string{"Idempotency-Key": newIdempotencyKey()}}
	if err := c.do(ctx, http.MethodPost, "/api/v1/graphs", graph.body(), &out, opt); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetGraph returns the graph (by its id or a unique prefix of it) with its nodes and their jobs (scope
// graph:read); an unknown graph is an *APIError 404.
func (c *Client) GetGraph(ctx context.Context, id string) (*GraphInfo, error) {
	return c.graphCall(ctx, http.MethodGet, "/api/v1/graphs/"+url.PathEscape(id))
}

// ListGraphs returns a page of the key's tenant's graphs, newest first, without their nodes (scope
// graph:read). limit 0 takes the server's default (50); cursor "" starts at the newest.
func (c *Client) ListGraphs(ctx context.Context, limit int, cursor string) (*GraphPage, error) {
	query := url.Values{}
	if limit > 0 {
		query.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		query.Set("cursor", cursor)
	}
	var out GraphPage
	if err := c.do(ctx, http.MethodGet, "/api/v1/graphs", nil, &out, callOptions{query: query}); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelGraph cancels the nodes that have not run and asks running ones to stop (scope graph:write); the
// graph ends cancelled once they all ended. A graph that already ended is an *APIError 409.
func (c *Client) CancelGraph(ctx context.Context, id string) (*GraphInfo, error) {
	return c.graphCall(ctx, http.MethodPost, "/api/v1/graphs/"+url.PathEscape(id)+"/cancel")
}

// RetryGraph runs again the dead and cancelled nodes of a failed or cancelled graph, each once its parents
// succeeded; what succeeded keeps its result (scope graph:write). Any other graph is an *APIError 409.
func (c *Client) RetryGraph(ctx context.Context, id string) (*GraphInfo, error) {
	return c.graphCall(ctx, http.MethodPost, "/api/v1/graphs/"+url.PathEscape(id)+"/retry")
}

func (c *Client) graphCall(ctx context.Context, method, path string) (*GraphInfo, error) {
	var out GraphInfo
	if err := c.Do(ctx, method, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ErrGraphWaitTimeout: WaitGraph ran out of time before the graph ended; the graph is returned as it was
// last seen.
var ErrGraphWaitTimeout = errors.New("jobengine: the graph has not ended yet")

// Gaps between reads of WaitGraph: the first, doubling up to the last.
const (
	firstGraphPoll = 100 * time.Millisecond
	maxGraphPoll   = 2 * time.Second
)

// WaitGraph returns the graph, with its nodes, once it ended (scope graph:read), reading it at gaps that
// grow from 100 ms to 2 s. After timeout it returns the graph as it is with an error wrapping
// ErrGraphWaitTimeout (the graph goes on); an unknown graph is an *APIError 404; ctx cancels the wait.
func (c *Client) WaitGraph(ctx context.Context, id string, timeout time.Duration) (*GraphInfo, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("jobengine: WaitGraph: timeout must not be negative, got %v", timeout)
	}
	deadline := time.Now().Add(timeout)
	gap := firstGraphPoll
	for {
		graph, err := c.GetGraph(ctx, id)
		if err != nil {
			return nil, err
		}
		if graph.Ended() {
			return graph, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return graph, fmt.Errorf("%w: %s is %s after %v", ErrGraphWaitTimeout, id, graph.State, timeout)
		}
		if gap > left {
			gap = left
		}
		if err := sleep(ctx, gap); err != nil {
			return nil, err
		}
		if gap *= 2; gap > maxGraphPoll {
			gap = maxGraphPoll
		}
	}
}
