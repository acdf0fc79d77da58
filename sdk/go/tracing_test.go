package jobengine_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	jobengine "github.com/jobengine/jobengine/sdk/go"
)

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestWithTraceParentSendsTheHeaderAndIgnoresAnInvalidOne(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id": "j1", "state": "queued"}`))
	}))
	defer srv.Close()
	c, err := jobengine.NewClient(srv.URL, "key")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	zero := "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
	for _, tp := range []string{testTraceParent, "", "not a traceparent", zero, "01" + testTraceParent[2:]} {
		traced := jobengine.WithTraceParent(ctx, tp)
		if _, err := c.GetJob(traced, "j1"); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{testTraceParent, "", "", "", ""}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("requests: %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("request %d sent traceparent %q, expected %q (all: %q)", i, got[i], want[i], got)
		}
	}
	if jobengine.TraceParent(jobengine.WithTraceParent(ctx, testTraceParent)) != testTraceParent {
		t.Fatal("TraceParent does not read back what WithTraceParent stored")
	}
}

// Needs the server's tracing on (JOBENGINE_TRACING=1): with no tracer provider set up there, a job stores the
// traceparent of the request that enqueued it as it came.
func TestAJobCarriesItsTraceToTheHandlerAndTheHandlersCallsSendIt(t *testing.T) {
	c := server(t)
	q := queue(t)
	type seen struct{ job, ctx, child string }
	got := make(chan seen, 1)
	w := jobengine.NewWorker(c, options(q, nil))
	w.HandleFunc("go_traced", func(ctx context.Context, job *jobengine.Job) (any, error) {
		// A job the handler enqueues with its context joins the job's trace.
		child, err := c.Enqueue(ctx, jobengine.NewJob{Task: "go_untraced_child", Queue: q + "-children"})
		if err != nil {
			return nil, err
		}
		s := seen{job: job.TraceParent(), ctx: jobengine.TraceParent(ctx)}
		if child.Trace != nil {
			s.child = *child.Trace
		}
		got <- s
		return nil, nil
	})
	start(t, w)
	traced := jobengine.WithTraceParent(context.Background(), testTraceParent)
	job, err := c.Enqueue(traced, jobengine.NewJob{Task: "go_traced", Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if job.Trace == nil || *job.Trace != testTraceParent {
		t.Fatalf("the job's trace is %v, expected %s (is the server's tracing on?)", job.Trace, testTraceParent)
	}
	await(t, c, job.ID, "succeeded")
	s := <-got
	if s.job != testTraceParent || s.ctx != testTraceParent || s.child != testTraceParent {
		t.Fatalf("the handler saw %+v, expected %s everywhere", s, testTraceParent)
	}
	untraced := enqueue(t, c, jobengine.NewJob{Task: "go_traced", Queue: q + "-children"})
	if untraced.Trace != nil {
		t.Fatalf("a job enqueued without a trace has trace %s", *untraced.Trace)
	}
}
