package jobengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"
)

// Handler runs one attempt of a job. It returns the job's result (anything encoding/json can marshal) or an
// error: a plain error fails the attempt (retried with backoff while attempts remain), Permanent(err) sends
// the job to dead at once, RetryAfter(err, d) asks for the retry after d. A panic fails only its job.
//
// ctx is cancelled when the job must stop: Job.Err says why (ErrLeaseLost: the result would be refused, so
// nothing is reported; ErrCancelRequested: an error ends the job cancelled; ErrShutdown: the job is
// released; ErrTimeout: the attempt failed).
type Handler interface {
	Handle(ctx context.Context, job *Job) (any, error)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(ctx context.Context, job *Job) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) (any, error) { return f(ctx, job) }

// Options configure a Worker; zero fields take the defaults given.
type Options struct {
	// WorkerID names the worker in leases and error records (default host:pid:random).
	WorkerID string
	// Queues to claim from (default ["default"]).
	Queues []string
	// Concurrency is the most jobs run at once (default 10, at most 1000).
	Concurrency int
	// ClaimBatch caps the jobs one claim asks for (default: the free slots; at most 100).
	ClaimBatch int
	// Lease is the lease length asked for each claimed job (default 30 s, at least 1 s).
	Lease time.Duration
	// HeartbeatInterval is how often leases are extended (default Lease/3).
	HeartbeatInterval time.Duration
	// ProgressInterval is how often reported progress is stored (default 500 ms).
	ProgressInterval time.Duration
	// LongPoll is how long a claim waits at the server for a job when there is none (default 5 s).
	LongPoll time.Duration
	// GracePeriod is how long a shutdown lets jobs in flight finish before it cancels them and releases
	// them back to their queue (default 30 s).
	GracePeriod time.Duration
	// Logger receives the worker's log lines (default: standard error, prefix "jobengine: ").
	Logger *log.Logger
}

// Worker runs registered handlers for jobs claimed from a jobengine server. Register handlers, then Run.
type Worker struct {
	client   *Client
	opts     Options
	log      *log.Logger
	handlers map[string]Handler

	mu       sync.Mutex
	inflight map[string]*run
	started  bool
	slotFree chan struct{}
	wg       sync.WaitGroup
	rep      *reporter
}

// run is one job in flight.
type run struct {
	job    *Job
	cancel context.CancelFunc

	mu   sync.Mutex
	stop error // why the handler's context was cancelled (nil: it was not)
}

func (r *run) reason() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// halt cancels the handler's context for reason; a lost lease overrides any other reason.
func (r *run) halt(reason error) {
	r.mu.Lock()
	if r.stop == nil || reason == ErrLeaseLost {
		r.stop = reason
	}
	r.mu.Unlock()
	r.cancel()
}

// NewWorker returns a worker that reaches its server through client.
func NewWorker(client *Client, opts Options) *Worker {
	if opts.WorkerID == "" {
		host, _ := os.Hostname()
		opts.WorkerID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), newIdempotencyKey()[:6])
	}
	if len(opts.Queues) == 0 {
		opts.Queues = []string{"default"}
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 10
	}
	if opts.Concurrency > maxReport { // one heartbeat or progress call carries every lease held
		opts.Concurrency = maxReport
	}
	if opts.ClaimBatch <= 0 || opts.ClaimBatch > 100 {
		opts.ClaimBatch = 100
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Lease < time.Second {
		opts.Lease = time.Second
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = opts.Lease / 3
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = 500 * time.Millisecond
	}
	if opts.LongPoll <= 0 {
		opts.LongPoll = 5 * time.Second
	}
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = 30 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.New(os.Stderr, "jobengine: ", log.LstdFlags)
	}
	return &Worker{client: client, opts: opts, log: logger, handlers: map[string]Handler{},
		inflight: map[string]*run{}, slotFree: make(chan struct{}, 1)}
}

// ID is the worker's id, as leases and error records show it.
func (w *Worker) ID() string { return w.opts.WorkerID }

// Handle registers h for jobs of task. Register every handler before Run; the worker claims only the
// tasks it has handlers for.
func (w *Worker) Handle(task string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("jobengine: Handle called after Run")
	}
	w.handlers[task] = h
}

// HandleFunc registers f for jobs of task.
func (w *Worker) HandleFunc(task string, f func(ctx context.Context, job *Job) (any, error)) {
	w.Handle(task, HandlerFunc(f))
}

// InFlight is the number of jobs running now.
func (w *Worker) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inflight)
}

// Run claims and runs jobs until ctx is done, then shuts down gracefully: it stops claiming, lets the jobs
// in flight finish within Options.GracePeriod (their leases still heartbeated), cancels the rest with
// ErrShutdown and releases them back to their queue without spending an attempt, sends every report left
// and returns nil. It returns an error early only when the server refuses the claims themselves (a bad key
// or scope, an invalid option). Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("jobengine: Run called twice")
	}
	w.started = true
	tasks := make([]string, 0, len(w.handlers))
	for t := range w.handlers {
		tasks = append(tasks, t)
	}
	w.mu.Unlock()
	if len(tasks) == 0 {
		return errors.New("jobengine: no handlers registered")
	}
	sort.Strings(tasks)

	// The helpers outlive ctx: heartbeats and reports go on while the jobs in flight drain.
	bg, stopHelpers := context.WithCancel(context.Background())
	defer stopHelpers()
	var helpers sync.WaitGroup
	w.rep = newReporter(w.client, w.log)
	helpers.Add(2)
	go func() { defer helpers.Done(); w.loop(bg, w.opts.HeartbeatInterval, w.heartbeat) }()
	go func() { defer helpers.Done(); w.loop(bg, w.opts.ProgressInterval, w.saveProgress) }()
	reported := make(chan struct{})
	go func() { defer close(reported); w.rep.loop() }()

	w.log.Printf("worker %s started on queues %s (tasks %s)", w.opts.WorkerID, strings.Join(w.opts.Queues, ","),
		strings.Join(tasks, ","))
	err := w.claimLoop(ctx, tasks)
	w.drain()
	w.rep.close()
	<-reported
	stopHelpers()
	helpers.Wait()
	w.log.Printf("worker %s stopped", w.opts.WorkerID)
	return err
}

func (w *Worker) claimLoop(ctx context.Context, tasks []string) error {
	failures := 0
	for ctx.Err() == nil {
		free := w.opts.Concurrency - w.InFlight()
		if free <= 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-w.slotFree:
			}
			continue
		}
		if free > w.opts.ClaimBatch {
			free = w.opts.ClaimBatch
		}
		claimed, err := w.client.Claim(ctx, ClaimRequest{
			WorkerID: w.opts.WorkerID, Queues: w.opts.Queues, Tasks: tasks, Limit: free,
			LeaseSeconds: w.opts.Lease.Seconds(), Wait: w.opts.LongPoll.Seconds(),
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var apiErr *APIError
			if errors.As(err, &apiErr) && !apiErr.Temporary() && apiErr.StatusCode != 409 {
				return fmt.Errorf("jobengine: the server refuses this worker's claims: %w", err)
			}
			failures++
			w.log.Printf("claiming jobs failed (will retry): %v", err)
			_ = sleep(ctx, jitter(100*time.Millisecond, 5*time.Second, failures, w.client.random))
			continue
		}
		failures = 0
		for i := range claimed {
			w.start(claimed[i])
		}
		if len(claimed) == 0 {
			// The claim long-polled already; a short pause keeps a server that answers at once (no
			// long-poll) from being asked in a tight loop.
			_ = sleep(ctx, 50*time.Millisecond)
		}
	}
	return nil
}

func (w *Worker) start(c ClaimedJob) {
	job := &Job{JobInfo: c.Job, Token: c.Lease.Token, Graph: c.Graph, client: w.client, persist: w.persist, phases: append([]PhaseRecord(nil),
		c.Job.Phases...), results: map[string]json.RawMessage{}}
	// The handler's context carries the job's trace: what it sends with it joins the job's trace.
	ctx, cancel := context.WithCancel(WithTraceParent(context.Background(), job.TraceParent()))
	r := &run{job: job, cancel: cancel}
	job.run = r
	w.mu.Lock()
	w.inflight[job.ID] = r
	w.mu.Unlock()
	w.wg.Add(1)
	go w.execute(ctx, r)
}

func (w *Worker) execute(ctx context.Context, r *run) {
	defer w.wg.Done()
	defer r.cancel()
	job := r.job
	var stopTimer func() bool
	if job.Timeout != nil && *job.Timeout > 0 {
		timeout := time.Duration(*job.Timeout * float64(time.Second))
		stopTimer = time.AfterFunc(timeout, func() { r.halt(ErrTimeout) }).Stop
	}
	w.mu.Lock()
	h := w.handlers[job.Task]
	w.mu.Unlock()
	var result any
	var err error
	if h == nil {
		err = Permanent(fmt.Errorf("no handler for task %q", job.Task))
	} else {
		job.mu.Lock()
		// The implicit phase of a plain handler, from an earlier attempt that reported progress or saved a
		// checkpoint, runs again (a phased handler sets its phases' states itself, keeping succeeded ones).
		if len(job.phases) == 1 && job.phases[0].Name == "run" && job.phases[0].State != PhaseSucceeded {
			job.phases[0].State = PhaseRunning
		}
		job.mu.Unlock()
		result, err = callSafely(ctx, h.Handle, job)
	}
	if stopTimer != nil {
		stopTimer()
	}
	reason := r.reason()
	w.mu.Lock()
	mine := w.inflight[job.ID] == r
	if mine {
		delete(w.inflight, job.ID)
	}
	w.mu.Unlock()
	select {
	case w.slotFree <- struct{}{}:
	default:
	}
	if !mine { // the shutdown released it already
		return
	}
	lease := LeaseRef{JobID: job.ID, Token: job.Token}
	switch {
	case reason == ErrLeaseLost:
		w.log.Printf("job %s: lease lost; stopped it, reporting nothing", job.ID)
	case err == nil:
		raw, merr := json.Marshal(result)
		if merr != nil {
			w.rep.fail(w.failure(job, Permanent(fmt.Errorf("the result is not JSON: %w", merr)), false))
			return
		}
		w.rep.complete(Completion{JobID: job.ID, Token: job.Token, Result: raw, Nodes: job.addedNodes()})
	case reason == ErrShutdown:
		w.rep.release(lease)
	case reason == ErrCancelRequested:
		w.rep.fail(w.failure(job, err, true))
	case reason == ErrTimeout:
		w.rep.fail(w.failure(job, fmt.Errorf("%w after %gs: %v", ErrTimeout, *job.Timeout, err), false))
	default:
		var p *PanicError
		if errors.As(err, &p) {
			w.log.Printf("job %s (%s): handler panicked: %v", job.ID, job.Task, p.Value)
		}
		w.rep.fail(w.failure(job, err, false))
	}
}

// callSafely runs h, turning a panic into a *PanicError.
func callSafely(ctx context.Context, h HandlerFunc, job *Job) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = nil, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, job)
}

func (w *Worker) failure(job *Job, err error, cancelled bool) Failure {
	f := Failure{JobID: job.ID, Token: job.Token, Retryable: true, Cancelled: cancelled,
		Error: ErrorInfo{Type: clean(errorType(err), 200), Message: clean(err.Error(), 2000)}}
	if f.Error.Type == "" {
		f.Error.Type = "error"
	}
	var p *PanicError
	if errors.As(err, &p) {
		tb := clean(fmt.Sprintf("panic: %v\n\n%s", p.Value, p.Stack), 20000)
		f.Error.Traceback = &tb
	}
	var perm *PermanentError
	if errors.As(err, &perm) {
		f.Retryable = false
	}
	var retry *RetryError
	if errors.As(err, &retry) && f.Retryable {
		d := retry.Delay.Seconds()
		if d < 0 {
			d = 0
		}
		f.RetryDelay = &d
	}
	return f
}

// persist stores a job's phase records now, fenced by its lease: ErrLeaseLost when it is not held.
func (w *Worker) persist(ctx context.Context, j *Job, event string) error {
	phases, data := j.snapshot()
	u := PhaseUpdate{JobID: j.ID, Token: j.Token, Phases: phases}
	if event != "" {
		u.Event, u.EventData = event, data
	}
	out, err := w.client.SavePhases(ctx, []PhaseUpdate{u})
	if err != nil {
		return err
	}
	if len(out.Held) == 0 {
		if j.run != nil {
			j.run.halt(ErrLeaseLost)
		}
		return ErrLeaseLost
	}
	return nil
}

func (w *Worker) loop(ctx context.Context, every time.Duration, fn func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

func (w *Worker) running() []*run {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*run, 0, len(w.inflight))
	for _, r := range w.inflight {
		out = append(out, r)
	}
	return out
}

func (w *Worker) heartbeat(ctx context.Context) {
	runs := w.running()
	if len(runs) == 0 {
		return
	}
	leases := make([]LeaseRef, len(runs))
	for i, r := range runs {
		leases[i] = LeaseRef{JobID: r.job.ID, Token: r.job.Token}
	}
	out, err := w.client.Heartbeat(ctx, leases, w.opts.Lease.Seconds(), w.opts.HeartbeatInterval)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Printf("heartbeat failed (will retry): %v", err)
		}
		return
	}
	lost, cancel := set(out.Lost), set(out.CancelRequested)
	for _, r := range runs {
		switch {
		case lost[r.job.ID]:
			w.log.Printf("job %s: the lease is lost; stopping it", r.job.ID)
			r.halt(ErrLeaseLost)
		case cancel[r.job.ID] && r.reason() == nil:
			r.halt(ErrCancelRequested)
		}
	}
}

func (w *Worker) saveProgress(ctx context.Context) {
	var updates []PhaseUpdate
	byID := map[string]*run{}
	for _, r := range w.running() {
		j := r.job
		j.mu.Lock()
		dirty := j.dirty && len(j.phases) > 0
		j.mu.Unlock()
		if !dirty {
			continue
		}
		phases, data := j.snapshot()
		cur := phases[data["index"].(int)]
		data["progress"], data["message"] = cur.Progress, cur.Message
		updates = append(updates, PhaseUpdate{JobID: j.ID, Token: j.Token, Phases: phases,
			Event: "phase.progress", EventData: data})
		byID[j.ID] = r
	}
	if len(updates) == 0 {
		return
	}
	out, err := w.client.SavePhases(ctx, updates)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Printf("saving progress failed (will retry): %v", err)
		}
		for _, r := range byID {
			r.job.mu.Lock()
			r.job.dirty = true
			r.job.mu.Unlock()
		}
		return
	}
	for _, id := range out.Lost {
		if r := byID[id]; r != nil {
			r.halt(ErrLeaseLost)
		}
	}
}

// drain waits up to the grace period for the jobs in flight, then cancels the rest with ErrShutdown; a
// handler that ignores its context for 5 s more is abandoned and its job released anyway.
func (w *Worker) drain() {
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	if n := w.InFlight(); n > 0 {
		w.log.Printf("stopping: waiting up to %s for %d jobs in flight", w.opts.GracePeriod, n)
	}
	grace := time.NewTimer(w.opts.GracePeriod)
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	runs := w.running()
	w.log.Printf("grace period over: releasing %d jobs", len(runs))
	for _, r := range runs {
		r.halt(ErrShutdown)
	}
	late := time.NewTimer(5 * time.Second)
	defer late.Stop()
	select {
	case <-done:
		return
	case <-late.C:
	}
	w.mu.Lock()
	abandoned := w.inflight
	w.inflight = map[string]*run{}
	w.mu.Unlock()
	for id, r := range abandoned {
		w.log.Printf("job %s: its handler ignores its cancelled context; releasing the job anyway", id)
		w.rep.release(LeaseRef{JobID: id, Token: r.job.Token})
	}
}

func set(ids []string) map[string]bool {
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

// clean makes s acceptable to the server: no NUL characters (PostgreSQL cannot store them), at most n runes.
func clean(s string, n int) string {
	return truncate(strings.ReplaceAll(s, "\x00", "\uFFFD"), n)
}
