package jobengine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"
)

const workerPrefix = "/api/v1/worker"

// Claim leases up to req.Limit jobs (scope worker), long-polling up to req.Wait seconds when none is
// runnable. A try of the call may take the long-poll plus the client's request timeout.
func (c *Client) Claim(ctx context.Context, req ClaimRequest) ([]ClaimedJob, error) {
	if req.Queues == nil {
		req.Queues = []string{"default"}
	}
	var out struct {
		Jobs []ClaimedJob `json:"jobs"`
	}
	opt := callOptions{timeout: c.timeout + time.Duration(req.Wait*float64(time.Second))}
	if err := c.do(ctx, http.MethodPost, workerPrefix+"/claim", req, &out, opt); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Heartbeat extends the given leases by leaseSeconds. maxElapsed bounds its retries (0: the policy's): a
// heartbeat that cannot get through within a third of the lease is of no use any more.
func (c *Client) Heartbeat(ctx context.Context, leases []LeaseRef, leaseSeconds float64,
	maxElapsed time.Duration) (*HeartbeatResult, error) {
	var out HeartbeatResult
	body := map[string]any{"leases": leases, "lease_seconds": leaseSeconds}
	if err := c.do(ctx, http.MethodPost, workerPrefix+"/heartbeat", body, &out, callOptions{maxElapsed: maxElapsed}); err != nil {
		return nil, err
	}
	return &out, nil
}

// SavePhases stores phase records, progress and checkpoints of running jobs, fenced by their tokens.
func (c *Client) SavePhases(ctx context.Context, updates []PhaseUpdate) (*HeldResult, error) {
	var out HeldResult
	if err := c.Do(ctx, http.MethodPost, workerPrefix+"/phases", map[string]any{"updates": updates}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Report sends completions, failures and releases in one call.
func (c *Client) Report(ctx context.Context, r Report) (*ReportResult, error) {
	if r.Completions == nil {
		r.Completions = []Completion{}
	}
	if r.Failures == nil {
		r.Failures = []Failure{}
	}
	if r.Releases == nil {
		r.Releases = []LeaseRef{}
	}
	var out ReportResult
	if err := c.Do(ctx, http.MethodPost, workerPrefix+"/report", r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// resultsTooLargeType is the problem type of a node whose parents' results are past what it may receive.
const resultsTooLargeType = "urn:jobengine:problem:results-too-large"

// ResultsTooLargeError: a graph node's parents' results are past the size a node may receive (4 MiB of
// JSON on the server). Retrying cannot help, as another attempt reads the same results: Job.ParentResults
// returns it wrapped in Permanent, so a handler that returns it sends its job to dead.
type ResultsTooLargeError struct{ Err *APIError }

func (e *ResultsTooLargeError) Error() string { return e.Err.Problem.Detail }
func (e *ResultsTooLargeError) Unwrap() error { return e.Err }

// ErrorType names it in the job's error record as the Python workers do.
func (e *ResultsTooLargeError) ErrorType() string { return "ResultsTooLarge" }

// ParentResults reads what graph node jobID receives from its parents (scope worker): the results of those
// that succeeded, by node name; empty for a job outside a graph. A *ResultsTooLargeError past the size a
// node may receive.
func (c *Client) ParentResults(ctx context.Context, jobID string) (*ParentResults, error) {
	var out ParentResults
	err := c.Do(ctx, http.MethodGet, workerPrefix+"/jobs/"+url.PathEscape(jobID)+"/parent-results", nil, &out)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict && apiErr.Problem.Type == resultsTooLargeType {
		return nil, &ResultsTooLargeError{Err: apiErr}
	}
	if err != nil {
		return nil, err
	}
	if out.Results == nil {
		out.Results = map[string]json.RawMessage{}
	}
	return &out, nil
}
