package jobengine

import (
	"encoding/json"
	"time"
)

// Phase states.
const (
	PhasePending   = "pending"
	PhaseRunning   = "running"
	PhaseSucceeded = "succeeded"
	PhaseFailed    = "failed"
)

// JobInfo is a job as the API shows it (the shape of GET /api/v1/jobs/{id}).
type JobInfo struct {
	ID              string          `json:"id"`
	Tenant          string          `json:"tenant"`
	Queue           string          `json:"queue"`
	Task            string          `json:"task"`
	State           string          `json:"state"`
	Outcome         *string         `json:"outcome"`
	Payload         json.RawMessage `json:"payload"`
	Priority        int             `json:"priority"`
	RunAt           *time.Time      `json:"run_at"`
	Attempt         int             `json:"attempt"`
	MaxAttempts     int             `json:"max_attempts"`
	IdempotencyKey  *string         `json:"idempotency_key"`
	DependsOn       []string        `json:"depends_on"`
	Timeout         *float64        `json:"timeout"`
	Lease           *LeaseInfo      `json:"lease"`
	CancelRequested bool            `json:"cancel_requested"`
	Reason          *string         `json:"reason"`
	Progress        float64         `json:"progress"`
	Phases          []PhaseRecord   `json:"phases"`
	Result          json.RawMessage `json:"result"`
	Errors          []AttemptError  `json:"errors"`
	CreatedAt       *time.Time      `json:"created_at"`
	UpdatedAt       *time.Time      `json:"updated_at"`
	StartedAt       *time.Time      `json:"started_at"`
	FinishedAt      *time.Time      `json:"finished_at"`
	RunID           *string         `json:"run_id"`
	ScheduleID      *string         `json:"schedule_id"`
	// GraphID is the graph this job is a node of (nil for any other job).
	GraphID *string `json:"graph_id"`
	// Trace is the W3C traceparent the job was enqueued under (nil when the server's tracing is off).
	Trace *string `json:"trace"`
}

// LeaseInfo is who holds a running job, as the API shows it (never the token).
type LeaseInfo struct {
	Worker    string     `json:"worker"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// PhaseRecord is the stored record of one phase of a job: its state, progress, result and checkpoint.
type PhaseRecord struct {
	Name       string          `json:"name"`
	State      string          `json:"state"`
	Progress   float64         `json:"progress"`
	Message    *string         `json:"message"`
	Result     json.RawMessage `json:"result"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	StartedAt  *time.Time      `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

// AttemptError is what went wrong in one attempt of a job.
type AttemptError struct {
	Attempt   int        `json:"attempt"`
	At        *time.Time `json:"at"`
	Type      string     `json:"type"`
	Message   string     `json:"message"`
	Traceback *string    `json:"traceback"`
	Worker    *string    `json:"worker"`
}

// -- the worker protocol (/api/v1/worker) -----------------------------------------------------------------

// ClaimRequest asks for up to Limit runnable jobs of Queues (and only of Tasks, when given), each leased for
// LeaseSeconds, waiting up to Wait seconds for one when there is none (capped by the server).
type ClaimRequest struct {
	WorkerID     string   `json:"worker_id"`
	Queues       []string `json:"queues"`
	Tasks        []string `json:"tasks,omitempty"`
	Limit        int      `json:"limit"`
	LeaseSeconds float64  `json:"lease_seconds"`
	Wait         float64  `json:"wait"`
}

// ClaimedJob is a job leased to the caller, with its lease (the fencing token goes with every report).
type ClaimedJob struct {
	Job   JobInfo `json:"job"`
	Lease Lease   `json:"lease"`
	// Graph is set for a graph node only: its graph and its node name.
	Graph *NodeRef `json:"graph"`
}

// NodeRef names a claimed graph node: the graph's ID and the node's name in it.
type NodeRef struct {
	GraphID string `json:"id"`
	Node    string `json:"node"`
}

// ParentResults is what a graph node receives from its parents (GET
// /api/v1/worker/jobs/{id}/parent-results): the results of those that succeeded, by node name. GraphID
// and Node are nil, and Results empty, for a job outside a graph.
type ParentResults struct {
	GraphID *string                    `json:"graph_id"`
	Node    *string                    `json:"node"`
	Results map[string]json.RawMessage `json:"results"`
}

// Lease is a claimed job's lease as the claim returns it.
type Lease struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// LeaseRef names a held lease: the job and the token of its lease.
type LeaseRef struct {
	JobID string `json:"job_id"`
	Token string `json:"token"`
}

// HeartbeatResult says which leases were extended, which are lost (stop those jobs, report nothing) and
// which held jobs were asked to cancel.
type HeartbeatResult struct {
	Held            []string `json:"held"`
	Lost            []string `json:"lost"`
	CancelRequested []string `json:"cancel_requested"`
}

// PhaseUpdate replaces the stored phase records of a running job (fenced by its token); Event, when set
// ("phase.started", "phase.succeeded", "phase.failed", "phase.progress"), is recorded as a job.phase event.
type PhaseUpdate struct {
	JobID     string         `json:"job_id"`
	Token     string         `json:"token"`
	Phases    []PhaseRecord  `json:"phases"`
	Event     string         `json:"event,omitempty"`
	EventData map[string]any `json:"event_data,omitempty"`
}

// HeldResult says which of the updated jobs are still held by the caller.
type HeldResult struct {
	Held []string `json:"held"`
	Lost []string `json:"lost"`
}

// ErrorInfo is the error of a failed attempt as it is reported.
type ErrorInfo struct {
	Type      string  `json:"type"`
	Message   string  `json:"message"`
	Traceback *string `json:"traceback,omitempty"`
}

// Completion reports a successful attempt with its result (raw JSON; nil is null) and, for a graph node,
// the Nodes it adds to its graph (stored with the completion; see Job.AddNode).
type Completion struct {
	JobID  string          `json:"job_id"`
	Token  string          `json:"token"`
	Result json.RawMessage `json:"result"`
	Nodes  []AddedNode     `json:"nodes,omitempty"`
}

// Failure reports a failed attempt: retried (after RetryDelay seconds, or the server's backoff) while
// Retryable and attempts remain, else dead; Cancelled ends it cancelled.
type Failure struct {
	JobID      string    `json:"job_id"`
	Token      string    `json:"token"`
	Error      ErrorInfo `json:"error"`
	Retryable  bool      `json:"retryable"`
	Cancelled  bool      `json:"cancelled"`
	RetryDelay *float64  `json:"retry_delay,omitempty"`
}

// Report ends attempts: completions, failures and releases (given back, the attempt not spent) in one call.
type Report struct {
	Completions []Completion `json:"completions"`
	Failures    []Failure    `json:"failures"`
	Releases    []LeaseRef   `json:"releases"`
}

// ReportResult lists the jobs each kind of report applied to; Refused ones were fenced out (lease lost). A
// completion whose added nodes the graph refused is listed in Failed: its job ended dead instead.
type ReportResult struct {
	Completed []string `json:"completed"`
	Failed    []string `json:"failed"`
	Released  []string `json:"released"`
	Refused   []string `json:"refused"`
}
