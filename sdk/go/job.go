package jobengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Job is a claimed job while a handler runs it: what the API shows of it (JobInfo) plus its lease, and the
// means to report progress, phase results and checkpoints. Its methods are safe for concurrent use.
type Job struct {
	JobInfo
	// Token is the fencing token of this worker's lease; the SDK sends it with every report.
	Token string
	// Graph is set when the job is a graph node: its graph and its node name (see ParentResults).
	Graph *NodeRef

	client  *Client
	run     *run
	persist func(ctx context.Context, j *Job, event string) error

	mu      sync.Mutex
	phases  []PhaseRecord
	index   int
	results map[string]json.RawMessage
	dirty   bool
	added   []AddedNode // nodes this attempt adds to its graph (AddNode)
}

// TraceParent is the W3C traceparent the job was enqueued under, or "" when it has none (the server's
// tracing is off). The context the Worker gives the handler carries it (see WithTraceParent): the calls the
// handler makes with that context, and the worker's calls about this job, send it, so they join the job's
// trace; a handler that makes spans of its own can start them under it.
func (j *Job) TraceParent() string {
	if j.Trace == nil || !validTraceParent(*j.Trace) {
		return ""
	}
	return *j.Trace
}

// Decode unmarshals the job's payload into v.
func (j *Job) Decode(v any) error {
	payload := j.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	return nil
}

// ParentResults are the results of this graph node's parents that succeeded, by node name (empty for a job
// outside a graph), read from the server when called, so a retry sees them too. Past the size a node may
// receive, the error is a permanent *ResultsTooLargeError: return it and the job goes dead. Usage:
//
//	parents, err := job.ParentResults(ctx)
//	if err != nil {
//		return nil, err
//	}
//	sum := 0
//	for _, raw := range parents {
//		var n int
//		if err := json.Unmarshal(raw, &n); err != nil {
//			return nil, jobengine.Permanent(err)
//		}
//		sum += n
//	}
func (j *Job) ParentResults(ctx context.Context) (map[string]json.RawMessage, error) {
	if j.GraphID == nil && j.Graph == nil {
		return map[string]json.RawMessage{}, nil
	}
	if j.client == nil {
		return nil, errors.New("jobengine: ParentResults: the job was not claimed by a Worker")
	}
	out, err := j.client.ParentResults(ctx, j.ID)
	var tooLarge *ResultsTooLargeError
	if errors.As(err, &tooLarge) {
		return nil, Permanent(err)
	}
	if err != nil {
		return nil, err
	}
	return out.Results, nil
}

// Err says why the handler's context was cancelled: ErrLeaseLost, ErrCancelRequested, ErrShutdown or
// ErrTimeout; nil while the job may run on.
func (j *Job) Err() error {
	if j.run == nil {
		return nil
	}
	return j.run.reason()
}

// Phase is the name of the phase running now ("run" for a handler without phases).
func (j *Job) Phase() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.phases) == 0 {
		return "run"
	}
	return j.phases[j.index].Name
}

// Progress reports the progress of the current phase (clamped to 0..1) with an optional message. It is
// stored by the worker's next progress save (every Options.ProgressInterval), not at once.
func (j *Job) Progress(fraction float64, message string) {
	if fraction != fraction { // NaN
		fraction = 0
	}
	fraction = clamp(fraction)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ensurePhase()
	p := &j.phases[j.index]
	p.Progress = fraction
	p.Message = optional(truncate(message, 2000))
	j.dirty = true
}

// Checkpoint decodes the checkpoint the current phase saved in an earlier attempt into v; false when there
// is none.
func (j *Job) Checkpoint(v any) (bool, error) {
	j.mu.Lock()
	var raw json.RawMessage
	if len(j.phases) > 0 {
		raw = j.phases[j.index].Checkpoint
	}
	j.mu.Unlock()
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("checkpoint: %w", err)
	}
	return true, nil
}

// SaveCheckpoint stores v as the current phase's checkpoint now: if the process dies in this phase, the
// next attempt finds it with Checkpoint. It returns ErrLeaseLost when the job is no longer this worker's.
func (j *Job) SaveCheckpoint(ctx context.Context, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	j.mu.Lock()
	j.ensurePhase()
	j.phases[j.index].Checkpoint = raw
	j.mu.Unlock()
	return j.persist(ctx, j, "")
}

// Results are the results of the phases that already succeeded (in this attempt or an earlier one).
func (j *Job) Results() map[string]json.RawMessage {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]json.RawMessage, len(j.results))
	for k, v := range j.results {
		out[k] = v
	}
	return out
}

func (j *Job) ensurePhase() {
	if len(j.phases) == 0 { // a plain handler: its implicit phase is made on first use
		j.phases = append(j.phases, PhaseRecord{Name: "run", State: PhaseRunning})
	}
}

// snapshot copies the phase records under the lock (for an update to send).
func (j *Job) snapshot() ([]PhaseRecord, map[string]any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]PhaseRecord, len(j.phases))
	copy(out, j.phases)
	j.dirty = false
	name := "run"
	if len(out) > 0 {
		name = out[j.index].Name
	}
	return out, map[string]any{"phase": name, "index": j.index, "job_progress": overallProgress(out)}
}

// -- phases -------------------------------------------------------------------------------------------

// Step is one phase of a phased handler: a name and the function that runs it.
type Step struct {
	Name string
	Run  HandlerFunc
}

// Phases makes a handler that runs steps in order, each as a phase of the job: its record is stored when
// it starts, succeeds or fails (with a job.phase event), its result is kept, and a later attempt skips the
// phases that already succeeded (their results are in Job.Results) and resumes the one that failed, which
// finds its last checkpoint with Job.Checkpoint. The job's result is an object of every phase's result.
func Phases(steps ...Step) Handler { return phased(steps) }

type phased []Step

func (steps phased) Handle(ctx context.Context, job *Job) (any, error) {
	job.mu.Lock()
	stored := make(map[string]PhaseRecord, len(job.phases))
	for _, p := range job.phases {
		stored[p.Name] = p
	}
	job.phases = make([]PhaseRecord, len(steps))
	for i, s := range steps {
		if p, ok := stored[s.Name]; ok {
			job.phases[i] = p
		} else {
			job.phases[i] = PhaseRecord{Name: s.Name, State: PhasePending}
		}
	}
	job.mu.Unlock()
	for i, s := range steps {
		job.mu.Lock()
		rec := &job.phases[i]
		if rec.State == PhaseSucceeded {
			job.results[s.Name] = rec.Result
			job.mu.Unlock()
			continue
		}
		started := time.Now().UTC()
		job.index = i
		rec.State, rec.StartedAt, rec.FinishedAt, rec.Message = PhaseRunning, &started, nil, nil
		job.mu.Unlock()
		if err := job.persist(ctx, job, "phase.started"); err != nil {
			return nil, err
		}
		out, err := callSafely(ctx, s.Run, job)
		var raw json.RawMessage
		if err == nil {
			if raw, err = json.Marshal(out); err != nil {
				err = Permanent(fmt.Errorf("phase %s: its result is not JSON: %w", s.Name, err))
			}
		}
		finished := time.Now().UTC() // a new variable: a snapshot being sent may point at started
		job.mu.Lock()
		rec = &job.phases[i]
		if err != nil {
			rec.State, rec.FinishedAt, rec.Message = PhaseFailed, &finished, optional(truncate(err.Error(), 500))
			job.mu.Unlock()
			if job.Err() == nil {
				_ = job.persist(ctx, job, "phase.failed")
			}
			return nil, err
		}
		rec.State, rec.Result, rec.Progress, rec.FinishedAt, rec.Message = PhaseSucceeded, raw, 1, &finished, nil
		job.results[s.Name] = raw
		job.mu.Unlock()
		if err := job.persist(ctx, job, "phase.succeeded"); err != nil {
			return nil, err
		}
	}
	return job.Results(), nil
}

func overallProgress(phases []PhaseRecord) float64 {
	if len(phases) == 0 {
		return 0
	}
	total := 0.0
	for _, p := range phases {
		if p.State == PhaseSucceeded {
			total++
		} else {
			total += clamp(p.Progress)
		}
	}
	return total / float64(len(phases))
}

func clamp(f float64) float64 {
	if f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
