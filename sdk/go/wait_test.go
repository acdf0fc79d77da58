package jobengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	jobengine "github.com/jobengine/jobengine/sdk/go"
)

// Wait against a real server: it returns the job once a worker finished it, and, for a job no worker
// runs, the job as it is with ErrWaitTimeout once its time is up.

func TestWaitReturnsTheJobOnceItEnds(t *testing.T) {
	c := server(t)
	q := queue(t)
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_slow", func(ctx context.Context, job *jobengine.Job) (any, error) {
		time.Sleep(300 * time.Millisecond) // the wait starts before the job ends
		return "done", nil
	})
	start(t, w)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_slow", Queue: q})
	done, err := c.Wait(context.Background(), job.ID, 60*time.Second)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if done.State != "succeeded" || !done.Ended() {
		t.Fatalf("Wait returned %s, want succeeded", done.State)
	}
	var result string
	decode(t, done.Result, &result)
	if result != "done" {
		t.Fatalf("result %q, want done", result)
	}
}

func TestWaitRunsOutWithTheJobAsItIs(t *testing.T) {
	c := server(t)
	job := enqueue(t, c, jobengine.NewJob{Task: "go_nobody_runs_this", Queue: queue(t)})
	got, err := c.Wait(context.Background(), job.ID, 500*time.Millisecond)
	if !errors.Is(err, jobengine.ErrWaitTimeout) {
		t.Fatalf("Wait: %v, want ErrWaitTimeout", err)
	}
	if got == nil || got.ID != job.ID || got.Ended() {
		t.Fatalf("Wait returned %+v, want the job still waiting", got)
	}
}

func TestWaitForAnUnknownJobIsNotFound(t *testing.T) {
	c := server(t)
	_, err := c.Wait(context.Background(), "no-such-job", time.Second)
	var apiErr *jobengine.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Wait: %v, want a 404 APIError", err)
	}
}
