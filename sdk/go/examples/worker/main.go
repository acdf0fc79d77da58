// Command worker runs Go handlers for tasks of jobengine's bundled examples (src/jobengine/examples) against
// a jobengine server, over the worker protocol of its HTTP API:
//
//	jobengine serve --port 8080 &
//	go run ./examples/worker -url http://127.0.0.1:8080 -key "$JOBENGINE_API_KEY"
//	jobengine enqueue hello --payload '{"name": "Ada"}'
//
// Tasks: hello (a greeting), etl (three phases with progress and a checkpoint), flaky (fails at random,
// then retries) and crash (panics: the panic fails only its own job). SIGTERM or Ctrl-C stops it gracefully:
// it stops claiming, lets the jobs in flight finish (within -grace) and releases the rest.
//
// With LEDGER set to a file path, every attempt appends "start <job> <attempt> <pid>" when it begins and
// "done <job> <attempt> <pid>" when its handler returned successfully (one write each, O_APPEND): the
// cross-language tests check from it that no job ran to completion twice.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	jobengine "github.com/jobengine/jobengine/sdk/go"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	url := fs.String("url", env("JOBENGINE_URL", "http://127.0.0.1:8080"), "the jobengine server (env JOBENGINE_URL)")
	key := fs.String("key", os.Getenv("JOBENGINE_API_KEY"), "an API key with scope worker (env JOBENGINE_API_KEY)")
	queues := fs.String("queues", "default", "comma-separated queues to claim from")
	concurrency := fs.Int("concurrency", 10, "jobs run at once")
	lease := fs.Duration("lease", 30*time.Second, "lease length of each claimed job")
	grace := fs.Duration("grace", 30*time.Second, "how long a shutdown lets jobs in flight finish")
	longPoll := fs.Duration("long-poll", 5*time.Second, "how long a claim waits at the server for a job")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *key == "" {
		fmt.Fprintln(os.Stderr, "error: -key: an API key with scope worker is required (or set JOBENGINE_API_KEY)")
		return 2
	}
	if *concurrency < 1 {
		fmt.Fprintln(os.Stderr, "error: -concurrency: expected at least 1")
		return 2
	}
	client, err := jobengine.NewClient(*url, *key)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: -url: %v\n", err)
		return 2
	}
	w := jobengine.NewWorker(client, jobengine.Options{
		Queues: strings.Split(*queues, ","), Concurrency: *concurrency, Lease: *lease, GracePeriod: *grace,
		LongPoll: *longPoll,
	})
	ledger := ledgerOf(os.Getenv("LEDGER"))
	w.Handle("hello", ledger(jobengine.HandlerFunc(hello)))
	w.Handle("etl", ledger(jobengine.Phases(
		jobengine.Step{Name: "extract", Run: extract},
		jobengine.Step{Name: "transform", Run: transform},
		jobengine.Step{Name: "load", Run: load},
	)))
	w.Handle("flaky", ledger(jobengine.HandlerFunc(flaky)))
	w.Handle("crash", ledger(jobengine.HandlerFunc(crash)))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// object decodes the payload as a JSON object; anything else fails the job at once (retrying cannot fix it).
func object(job *jobengine.Job, v any) error {
	if err := job.Decode(v); err != nil {
		return jobengine.Permanent(fmt.Errorf("expected a JSON object: %w", err))
	}
	return nil
}

// hello: {"name": "Ada"} -> "hello Ada"; a scheduled segment {"items": ["Ada", "Grace"]} greets each.
func hello(ctx context.Context, job *jobengine.Job) (any, error) {
	var in struct {
		Name  any   `json:"name"`
		Items []any `json:"items"`
	}
	if err := object(job, &in); err != nil {
		return nil, err
	}
	names := []string{"world"}
	if len(in.Items) > 0 {
		names = names[:0]
		for _, item := range in.Items {
			names = append(names, fmt.Sprint(item))
		}
	} else if in.Name != nil {
		names = []string{fmt.Sprint(in.Name)}
	}
	if err := pause(ctx, 50*time.Millisecond); err != nil {
		return nil, err
	}
	return "hello " + strings.Join(names, ", "), nil
}

// extract, phase 1 of etl: "reads" rows in batches of 5, reporting progress.
func extract(ctx context.Context, job *jobengine.Job) (any, error) {
	in := struct {
		Rows int `json:"rows"`
	}{Rows: 20}
	if err := object(job, &in); err != nil {
		return nil, err
	}
	if in.Rows < 1 || in.Rows > 1_000_000 {
		return nil, jobengine.Permanent(fmt.Errorf("payload.rows: expected a number from 1 to 1000000, got %d", in.Rows))
	}
	for done := 0; done < in.Rows; done += 5 {
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
		read := min(in.Rows, done+5)
		job.Progress(float64(read)/float64(in.Rows), fmt.Sprintf("read %d rows", read))
	}
	return map[string]int{"rows": in.Rows}, nil
}

// transform, phase 2 of etl: sums the rows in chunks, saving a checkpoint after each chunk, so an attempt that
// died half-way resumes from the last chunk instead of starting over.
func transform(ctx context.Context, job *jobengine.Job) (any, error) {
	var extracted struct {
		Rows int `json:"rows"`
	}
	if err := jsonField(job.Results(), "extract", &extracted); err != nil {
		return nil, err
	}
	var saved struct {
		Position int `json:"position"`
		Total    int `json:"total"`
	}
	if _, err := job.Checkpoint(&saved); err != nil {
		return nil, err
	}
	resumedFrom := saved.Position
	for saved.Position < extracted.Rows {
		end := min(extracted.Rows, saved.Position+5)
		for i := saved.Position; i < end; i++ {
			saved.Total += i
		}
		saved.Position = end
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
		if err := job.SaveCheckpoint(ctx, saved); err != nil {
			return nil, err
		}
		job.Progress(float64(saved.Position)/float64(extracted.Rows), fmt.Sprintf("transformed %d/%d rows",
			saved.Position, extracted.Rows))
	}
	return map[string]int{"total": saved.Total, "resumed_from": resumedFrom}, nil
}

// load, phase 3 of etl: "writes" the transformed result.
func load(ctx context.Context, job *jobengine.Job) (any, error) {
	var extracted struct {
		Rows int `json:"rows"`
	}
	var transformed struct {
		Total int `json:"total"`
	}
	results := job.Results()
	if err := jsonField(results, "extract", &extracted); err != nil {
		return nil, err
	}
	if err := jsonField(results, "transform", &transformed); err != nil {
		return nil, err
	}
	for step := 1; step <= 3; step++ {
		if err := pause(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
		job.Progress(float64(step)/3, "")
	}
	return map[string]int{"loaded": extracted.Rows, "total": transformed.Total}, nil
}

// flaky fails at random to show retries with backoff: {"fail_rate": 0.5, "max_failures": 2}.
func flaky(ctx context.Context, job *jobengine.Job) (any, error) {
	in := struct {
		FailRate    float64 `json:"fail_rate"`
		MaxFailures *int    `json:"max_failures"`
	}{FailRate: 0.5}
	if err := object(job, &in); err != nil {
		return nil, err
	}
	if err := pause(ctx, 50*time.Millisecond); err != nil {
		return nil, err
	}
	mayFail := in.MaxFailures == nil || job.Attempt <= *in.MaxFailures
	if mayFail && rand.Float64() < in.FailRate {
		return nil, upstreamError{attempt: job.Attempt}
	}
	return map[string]any{"ok": true, "attempts": job.Attempt}, nil
}

// upstreamError names its type in the job's error record as the Python example's does (ConnectionError).
type upstreamError struct{ attempt int }

func (e upstreamError) Error() string {
	return fmt.Sprintf("upstream unavailable (attempt %d)", e.attempt)
}
func (e upstreamError) ErrorType() string { return "ConnectionError" }

// crash panics with {"message": "..."}: the panic fails this job only (its message is the job's error).
func crash(ctx context.Context, job *jobengine.Job) (any, error) {
	in := struct {
		Message string `json:"message"`
	}{Message: "crash requested"}
	if err := object(job, &in); err != nil {
		return nil, err
	}
	panic(in.Message)
}

func jsonField(results map[string]json.RawMessage, name string, v any) error {
	raw, ok := results[name]
	if !ok {
		return fmt.Errorf("the result of phase %s is missing", name)
	}
	return json.Unmarshal(raw, v)
}

// ledgerOf wraps handlers to append start / done lines to path (nothing when path is empty).
func ledgerOf(path string) func(jobengine.Handler) jobengine.Handler {
	return func(h jobengine.Handler) jobengine.Handler {
		if path == "" {
			return h
		}
		return jobengine.HandlerFunc(func(ctx context.Context, job *jobengine.Job) (any, error) {
			if err := appendLine(path, "start", job.ID, job.Attempt, os.Getpid()); err != nil {
				return nil, err
			}
			out, err := h.Handle(ctx, job)
			if err == nil {
				err = appendLine(path, "done", job.ID, job.Attempt, os.Getpid())
			}
			return out, err
		})
	}
}

func appendLine(path string, parts ...any) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.TrimSuffix(fmt.Sprintln(parts...), "\n") + "\n"); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
