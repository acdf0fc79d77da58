package jobengine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	jobengine "github.com/jobengine/jobengine/sdk/go"
)

// These tests run workers against a real `jobengine serve`: JOBENGINE_TEST_URL is its address and
// JOBENGINE_TEST_KEY a key with the scopes worker, jobs:read, jobs:write, graph:read and graph:write (the
// Python test tests/integration/test_go_sdk.py starts one on SQLite and sets both). Without them the tests skip. The
// server's rescuer should run often (JOBENGINE_RESCUE_INTERVAL=0.25) for the lease-loss test. Every test
// uses a queue of its own.

func server(t *testing.T) *jobengine.Client {
	t.Helper()
	url, key := os.Getenv("JOBENGINE_TEST_URL"), os.Getenv("JOBENGINE_TEST_KEY")
	if url == "" || key == "" {
		t.Skip("JOBENGINE_TEST_URL / JOBENGINE_TEST_KEY not set: no jobengine server to test against")
	}
	c, err := jobengine.NewClient(url, key, jobengine.WithRetryPolicy(jobengine.RetryPolicy{
		Base: 20 * time.Millisecond, Cap: time.Second, MaxElapsed: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func queue(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", strings.ToLower(t.Name()), time.Now().UnixNano()%1_000_000_000)
}

// running is a worker running in the background of a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, w *jobengine.Worker) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop shuts the worker down gracefully and returns Run's error (nil twice if stopped twice).
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30 s")
		return nil
	}
}

func options(q string, mod func(*jobengine.Options)) jobengine.Options {
	opts := jobengine.Options{Queues: []string{q}, Concurrency: 4, Lease: 5 * time.Second,
		LongPoll: 500 * time.Millisecond, ProgressInterval: 50 * time.Millisecond,
		Logger: log.New(io.Discard, "", 0)}
	if testing.Verbose() {
		opts.Logger = log.New(os.Stderr, "worker: ", log.Lmicroseconds)
	}
	if mod != nil {
		mod(&opts)
	}
	return opts
}

func enqueue(t *testing.T, c *jobengine.Client, job jobengine.NewJob) *jobengine.JobInfo {
	t.Helper()
	out, err := c.Enqueue(context.Background(), job)
	if err != nil {
		t.Fatalf("enqueue %s: %v", job.Task, err)
	}
	return out
}

// await polls the job until it is in one of states (or fails the test after 20 s).
func await(t *testing.T, c *jobengine.Client, id string, states ...string) *jobengine.JobInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		job, err := c.GetJob(context.Background(), id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		for _, s := range states {
			if job.State == s {
				return job
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s stayed %s (attempt %d, errors %+v), expected %v", id, job.State, job.Attempt,
				job.Errors, states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func decode(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
}

func TestPhasesProgressAndResults(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	w.Handle("go_phased", jobengine.Phases(
		jobengine.Step{Name: "count", Run: func(ctx context.Context, job *jobengine.Job) (any, error) {
			var in struct{ N int }
			if err := job.Decode(&in); err != nil {
				return nil, jobengine.Permanent(err)
			}
			if err := job.SaveCheckpoint(ctx, map[string]int{"seen": in.N}); err != nil {
				return nil, err
			}
			job.Progress(0.5, "half way")
			time.Sleep(120 * time.Millisecond) // lets a progress save happen mid-phase
			return in.N * 2, nil
		}},
		jobengine.Step{Name: "sum", Run: func(ctx context.Context, job *jobengine.Job) (any, error) {
			var doubled int
			if err := json.Unmarshal(job.Results()["count"], &doubled); err != nil {
				return nil, err
			}
			return map[string]any{"total": doubled + 1, "phase": job.Phase()}, nil
		}},
	))
	start(t, w)
	ids := []string{}
	for n := 1; n <= 3; n++ {
		ids = append(ids, enqueue(t, c, jobengine.NewJob{Task: "go_phased", Queue: q, Payload: map[string]int{"n": n}}).ID)
	}
	for i, id := range ids {
		job := await(t, c, id, "succeeded")
		var result struct {
			Count int `json:"count"`
			Sum   struct {
				Total int    `json:"total"`
				Phase string `json:"phase"`
			} `json:"sum"`
		}
		decode(t, job.Result, &result)
		if n := i + 1; result.Count != 2*n || result.Sum.Total != 2*n+1 || result.Sum.Phase != "sum" {
			t.Fatalf("job %d: result %s", n, job.Result)
		}
		if len(job.Phases) != 2 || job.Phases[0].Name != "count" || job.Phases[1].Name != "sum" {
			t.Fatalf("phases %+v", job.Phases)
		}
		for _, p := range job.Phases {
			if p.State != jobengine.PhaseSucceeded || p.Progress != 1 || p.StartedAt == nil || p.FinishedAt == nil {
				t.Fatalf("phase %+v", p)
			}
		}
		// "count" sleeps 120 ms: its record spans that (start and finish are two times, not one).
		if took := job.Phases[0].FinishedAt.Sub(*job.Phases[0].StartedAt); took < 100*time.Millisecond {
			t.Fatalf("phase count ran from %s to %s", job.Phases[0].StartedAt, job.Phases[0].FinishedAt)
		}
		var checkpoint map[string]int
		decode(t, job.Phases[0].Checkpoint, &checkpoint)
		if checkpoint["seen"] != i+1 || job.Progress != 1 {
			t.Fatalf("checkpoint %v, progress %v", checkpoint, job.Progress)
		}
	}
}

func TestALaterAttemptSkipsSucceededPhasesAndResumesFromTheCheckpoint(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	var firstRuns int32
	var mu sync.Mutex
	w.Handle("go_resume", jobengine.Phases(
		jobengine.Step{Name: "one", Run: func(ctx context.Context, job *jobengine.Job) (any, error) {
			mu.Lock()
			firstRuns++
			mu.Unlock()
			return "one done", nil
		}},
		jobengine.Step{Name: "two", Run: func(ctx context.Context, job *jobengine.Job) (any, error) {
			var at int
			found, err := job.Checkpoint(&at)
			if err != nil {
				return nil, err
			}
			if job.Attempt == 1 {
				if err := job.SaveCheckpoint(ctx, 3); err != nil {
					return nil, err
				}
				return nil, jobengine.RetryAfter(errors.New("died half-way"), 0)
			}
			var one string
			if err := json.Unmarshal(job.Results()["one"], &one); err != nil {
				return nil, err
			}
			return map[string]any{"resumed_at": at, "found": found, "one": one}, nil
		}},
	))
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_resume", Queue: q, MaxAttempts: 3})
	final := await(t, c, job.ID, "succeeded", "dead")
	var result struct {
		One string `json:"one"`
		Two struct {
			ResumedAt int    `json:"resumed_at"`
			Found     bool   `json:"found"`
			One       string `json:"one"`
		} `json:"two"`
	}
	decode(t, final.Result, &result)
	mu.Lock()
	defer mu.Unlock()
	if final.State != "succeeded" || final.Attempt != 2 || firstRuns != 1 || result.One != "one done" ||
		result.Two.ResumedAt != 3 || !result.Two.Found || result.Two.One != "one done" {
		t.Fatalf("%s after %d attempts, phase one ran %d times, result %s", final.State, final.Attempt, firstRuns,
			final.Result)
	}
}

func TestAPlainHandlerResumesFromItsCheckpoint(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_plain_resume", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var position int
		if _, err := job.Checkpoint(&position); err != nil {
			return nil, err
		}
		if job.Attempt == 1 {
			job.Progress(0.25, "a quarter")
			if err := job.SaveCheckpoint(ctx, 25); err != nil {
				return nil, err
			}
			return nil, jobengine.RetryAfter(errors.New("died a quarter of the way"), 0)
		}
		return map[string]any{"resumed_at": position, "phase": job.Phase()}, nil
	})
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_plain_resume", Queue: q, MaxAttempts: 3})
	final := await(t, c, job.ID, "succeeded", "dead")
	if final.State != "succeeded" || final.Attempt != 2 || string(final.Result) != `{"phase":"run","resumed_at":25}` {
		t.Fatalf("%s after %d attempts, result %s", final.State, final.Attempt, final.Result)
	}
	if len(final.Phases) != 1 || final.Phases[0].Name != "run" || string(final.Phases[0].Checkpoint) != "25" {
		t.Fatalf("phases %+v", final.Phases)
	}
}

func TestRetryableAndPermanentErrors(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_errors", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in struct{ Mode string }
		_ = job.Decode(&in)
		switch {
		case in.Mode == "permanent":
			return nil, jobengine.Permanent(errors.New("bad input"))
		case in.Mode == "once" && job.Attempt == 1:
			return nil, jobengine.RetryAfter(fmt.Errorf("flaky upstream (attempt %d)", job.Attempt), 0)
		case in.Mode == "unmarshalable":
			return func() {}, nil
		}
		return map[string]int{"attempt": job.Attempt}, nil
	})
	start(t, w)
	permanent := enqueue(t, c, jobengine.NewJob{Task: "go_errors", Queue: q, MaxAttempts: 5,
		Payload: map[string]string{"mode": "permanent"}})
	once := enqueue(t, c, jobengine.NewJob{Task: "go_errors", Queue: q, MaxAttempts: 5,
		Payload: map[string]string{"mode": "once"}})
	bad := enqueue(t, c, jobengine.NewJob{Task: "go_errors", Queue: q, MaxAttempts: 5,
		Payload: map[string]string{"mode": "unmarshalable"}})

	dead := await(t, c, permanent.ID, "dead", "succeeded")
	if dead.State != "dead" || dead.Attempt != 1 || len(dead.Errors) != 1 || dead.Errors[0].Message != "bad input" {
		t.Fatalf("a permanent error: %s after %d attempts, errors %+v", dead.State, dead.Attempt, dead.Errors)
	}
	retried := await(t, c, once.ID, "succeeded", "dead")
	if retried.State != "succeeded" || retried.Attempt != 2 || len(retried.Errors) != 1 ||
		retried.Errors[0].Message != "flaky upstream (attempt 1)" || retried.Errors[0].Type != "error" {
		t.Fatalf("a retryable error: %s after %d attempts, errors %+v", retried.State, retried.Attempt, retried.Errors)
	}
	invalid := await(t, c, bad.ID, "dead", "succeeded")
	if invalid.State != "dead" || !strings.Contains(invalid.Errors[0].Message, "the result is not JSON") {
		t.Fatalf("a result that is not JSON: %s, errors %+v", invalid.State, invalid.Errors)
	}
}

func TestAPanicFailsOnlyItsJobAndTheWorkerKeepsGoing(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, func(o *jobengine.Options) { o.Concurrency = 1 }))
	w.HandleFunc("go_maybe_panic", func(ctx context.Context, job *jobengine.Job) (any, error) {
		var in struct{ Panic string }
		_ = job.Decode(&in)
		if in.Panic != "" {
			panic(in.Panic)
		}
		return "fine", nil
	})
	start(t, w)
	before := enqueue(t, c, jobengine.NewJob{Task: "go_maybe_panic", Queue: q, Payload: map[string]any{}})
	boom := enqueue(t, c, jobengine.NewJob{Task: "go_maybe_panic", Queue: q, MaxAttempts: 1,
		Payload: map[string]string{"panic": "boom: the index is out of range"}})
	dead := await(t, c, boom.ID, "dead", "succeeded")
	if dead.State != "dead" || len(dead.Errors) != 1 {
		t.Fatalf("the panicking job: %s, errors %+v", dead.State, dead.Errors)
	}
	e := dead.Errors[0]
	if e.Type != "panic" || e.Message != "panic: boom: the index is out of range" || e.Traceback == nil ||
		!strings.Contains(*e.Traceback, "goroutine") || e.Worker == nil || *e.Worker != w.ID() {
		t.Fatalf("the panic's error record: %+v", e)
	}
	// The worker (one slot) goes on: the job before and jobs after the panic all succeed.
	after := []string{before.ID}
	for i := 0; i < 3; i++ {
		after = append(after, enqueue(t, c, jobengine.NewJob{Task: "go_maybe_panic", Queue: q, Payload: i}).ID)
	}
	for _, id := range after {
		if job := await(t, c, id, "succeeded", "dead"); job.State != "succeeded" || string(job.Result) != `"fine"` {
			t.Fatalf("job %s after the panic: %s %s", id, job.State, job.Result)
		}
	}
}

func TestALostLeaseCancelsTheHandlerAndNothingIsReported(t *testing.T) {
	c := server(t)
	q := queue(t)
	// The heartbeat comes later than the lease lasts, so the lease expires under the running handler.
	w := jobengine.NewWorker(c, options(q, func(o *jobengine.Options) {
		o.Concurrency, o.Lease, o.HeartbeatInterval = 1, time.Second, 2500*time.Millisecond
	}))
	started := make(chan struct{})
	stopped := make(chan error, 1)
	var once sync.Once
	w.HandleFunc("go_stuck", func(ctx context.Context, job *jobengine.Job) (any, error) {
		once.Do(func() { close(started) })
		<-ctx.Done()
		stopped <- job.Err()
		return "the first worker's result", nil // must not be reported: the lease is lost
	})
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_stuck", Queue: q, MaxAttempts: 5})
	<-started
	// Another worker takes the job once the server's rescuer returned it, and completes it.
	var stolen []jobengine.ClaimedJob
	deadline := time.Now().Add(15 * time.Second)
	for len(stolen) == 0 && time.Now().Before(deadline) {
		var err error
		stolen, err = c.Claim(context.Background(), jobengine.ClaimRequest{WorkerID: "thief", Queues: []string{q},
			Limit: 1, LeaseSeconds: 30, Wait: 2})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(stolen) != 1 || stolen[0].Job.ID != job.ID || stolen[0].Job.Attempt != 2 {
		t.Fatalf("the thief claimed %+v", stolen)
	}
	select {
	case reason := <-stopped:
		if !errors.Is(reason, jobengine.ErrLeaseLost) {
			t.Fatalf("the handler was stopped for %v, expected ErrLeaseLost", reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not stopped after its lease was lost")
	}
	out, err := c.Report(context.Background(), jobengine.Report{Completions: []jobengine.Completion{
		{JobID: job.ID, Token: stolen[0].Lease.Token, Result: json.RawMessage(`"the thief's result"`)}}})
	if err != nil || len(out.Completed) != 1 {
		t.Fatalf("the thief's completion: %+v, %v", out, err)
	}
	final := await(t, c, job.ID, "succeeded")
	if string(final.Result) != `"the thief's result"` || final.Attempt != 2 || final.Errors[0].Type != "LeaseExpired" {
		t.Fatalf("final job: result %s, attempt %d, errors %+v", final.Result, final.Attempt, final.Errors)
	}
}

func TestACancelRequestStopsTheHandler(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, func(o *jobengine.Options) { o.HeartbeatInterval = 100 * time.Millisecond }))
	started := make(chan struct{})
	reasons := make(chan error, 1)
	w.HandleFunc("go_cancellable", func(ctx context.Context, job *jobengine.Job) (any, error) {
		close(started)
		<-ctx.Done()
		reasons <- job.Err()
		return nil, ctx.Err()
	})
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_cancellable", Queue: q})
	<-started
	if _, err := c.CancelJob(context.Background(), job.ID, "not needed any more"); err != nil {
		t.Fatal(err)
	}
	if reason := <-reasons; !errors.Is(reason, jobengine.ErrCancelRequested) {
		t.Fatalf("stopped for %v", reason)
	}
	if final := await(t, c, job.ID, "cancelled", "dead", "succeeded", "queued"); final.State != "cancelled" {
		t.Fatalf("the job ended %s", final.State)
	}
}

func TestAJobTimeoutFailsTheAttempt(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_slow", func(ctx context.Context, job *jobengine.Job) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_slow", Queue: q, MaxAttempts: 1, Timeout: 0.2})
	final := await(t, c, job.ID, "dead", "succeeded")
	if final.State != "dead" || final.Errors[0].Type != "TaskTimeout" || !strings.Contains(final.Errors[0].Message, "after 0.2s") {
		t.Fatalf("a timed-out job: %s, errors %+v", final.State, final.Errors)
	}
}

func TestGracefulShutdownFinishesQuickJobsAndReleasesTheRest(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, func(o *jobengine.Options) { o.GracePeriod = 300 * time.Millisecond }))
	var started sync.WaitGroup
	started.Add(2)
	w.HandleFunc("go_quick", func(ctx context.Context, job *jobengine.Job) (any, error) {
		started.Done()
		time.Sleep(150 * time.Millisecond) // ends within the grace period
		return "finished during the shutdown", nil
	})
	w.HandleFunc("go_endless", func(ctx context.Context, job *jobengine.Job) (any, error) {
		started.Done()
		<-ctx.Done()
		if !errors.Is(job.Err(), jobengine.ErrShutdown) {
			return nil, fmt.Errorf("stopped for %v", job.Err())
		}
		return nil, ctx.Err()
	})
	r := start(t, w)
	quick := enqueue(t, c, jobengine.NewJob{Task: "go_quick", Queue: q})
	endless := enqueue(t, c, jobengine.NewJob{Task: "go_endless", Queue: q, MaxAttempts: 1})
	started.Wait()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if job := await(t, c, quick.ID, "succeeded"); string(job.Result) != `"finished during the shutdown"` {
		t.Fatalf("the quick job: %s", job.Result)
	}
	// Released: queued again, its only attempt not spent, so another worker can still run it.
	released := await(t, c, endless.ID, "queued", "dead")
	if released.State != "queued" || len(released.Errors) != 0 {
		t.Fatalf("the endless job: %s, errors %+v", released.State, released.Errors)
	}
	later := enqueue(t, c, jobengine.NewJob{Task: "go_quick", Queue: q})
	time.Sleep(300 * time.Millisecond)
	if job, _ := c.GetJob(context.Background(), later.ID); job.State != "queued" {
		t.Fatalf("a stopped worker claimed a job: %s", job.State)
	}
}

func TestRunReturnsAnErrorWhenTheKeyIsRefused(t *testing.T) {
	c := server(t)
	bad, err := jobengine.NewClient(os.Getenv("JOBENGINE_TEST_URL"), "je_000000000000_not-a-key")
	if err != nil {
		t.Fatal(err)
	}
	w := jobengine.NewWorker(bad, options(queue(t), nil))
	w.HandleFunc("go_any", func(ctx context.Context, job *jobengine.Job) (any, error) { return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = w.Run(ctx)
	var apiErr *jobengine.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("expected a 401 *APIError, got %v", err)
	}
	if err := jobengine.NewWorker(c, options("q", nil)).Run(ctx); err == nil || !strings.Contains(err.Error(), "no handlers") {
		t.Fatalf("a worker without handlers: %v", err)
	}
}
