package jobengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run the client against real HTTP servers (httptest) that answer as a busy or failing
// jobengine server would; the worker's tests against a real `jobengine serve` are in worker_test.go.

func fastPolicy(maxElapsed time.Duration) ClientOption {
	return WithRetryPolicy(RetryPolicy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxElapsed: maxElapsed})
}

func TestRetriesA503AndHonoursRetryAfter(t *testing.T) {
	var calls int32
	var gap time.Duration
	var first time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if atomic.AddInt32(&calls, 1) == 1 {
			first = time.Now()
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(503)
			fmt.Fprint(w, `{"status":503,"title":"Service Unavailable","detail":"the store is unavailable"}`)
			return
		}
		gap = time.Since(first)
		fmt.Fprint(w, `{"id":"j1","state":"queued"}`)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, "k", fastPolicy(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.GetJob(context.Background(), "j1")
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if job.ID != "j1" || atomic.LoadInt32(&calls) != 2 || c.Retries() != 1 {
		t.Fatalf("job %+v after %d calls, %d retries", job, calls, c.Retries())
	}
	// The backoff alone would have waited at most 10 ms: the second try waited for Retry-After.
	if gap < 900*time.Millisecond {
		t.Fatalf("retried after %s, before the Retry-After of 1 s", gap)
	}
}

func TestRetriesConnectionErrorsUntilMaxElapsed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every try is refused
	c, _ := NewClient("http://"+addr, "k", fastPolicy(200*time.Millisecond))
	_, err = c.GetJob(context.Background(), "j1")
	var apiErr *APIError
	if err == nil || errors.As(err, &apiErr) {
		t.Fatalf("expected a connection error, got %v", err)
	}
	if c.Retries() < 2 {
		t.Fatalf("expected the call to be retried, it was retried %d times", c.Retries())
	}
}

func TestAnInvalidRequestIsNotRetriedAndNamesTheField(t *testing.T) {
	var calls int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&calls, 1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(422)
		fmt.Fprint(w, `{"type":"urn:jobengine:problem:validation","status":422,"title":"Unprocessable Content",`+
			`"detail":"Input should be greater than or equal to 1","field":"limit",`+
			`"errors":[{"field":"limit","message":"Input should be greater than or equal to 1"}]}`)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	_, err := c.Claim(context.Background(), ClaimRequest{WorkerID: "w", Limit: 0})
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("expected an *APIError, got %v", err)
	}
	if apiErr.StatusCode != 422 || apiErr.Problem.Field != "limit" || len(apiErr.Problem.Errors) != 1 ||
		apiErr.Temporary() || calls != 1 {
		t.Fatalf("got %+v after %d calls", apiErr, calls)
	}
	if !strings.Contains(err.Error(), "limit: Input should be") {
		t.Fatalf("the message does not name the field: %v", err)
	}
}

func TestALostLeaseIsErrLeaseLost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(409)
		fmt.Fprint(w, `{"type":"urn:jobengine:problem:lease-lost","status":409,"detail":"not held","field":"token"}`)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k", fastPolicy(time.Second))
	err := c.Do(context.Background(), http.MethodPost, "/api/v1/worker/jobs/j1/complete", map[string]string{"token": "t"}, nil)
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("expected ErrLeaseLost, got %v", err)
	}
	other := &APIError{StatusCode: 409, Problem: Problem{Type: "about:blank"}}
	if errors.Is(other, ErrLeaseLost) {
		t.Fatal("a 409 of another kind is not a lost lease")
	}
}

func TestACancelledContextStopsTheRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.GetJob(ctx, "j1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expected the context's error, got %v", err)
	}
}

func TestJitterStaysUnderTheExponentialCeiling(t *testing.T) {
	base, limit := 100*time.Millisecond, 5*time.Second
	for attempt := 1; attempt <= 70; attempt++ {
		ceiling := limit
		if attempt < 7 {
			ceiling = base << uint(attempt-1)
		}
		if top := jitter(base, limit, attempt, func() float64 { return 0.999999 }); top > ceiling || top < ceiling*99/100 {
			t.Fatalf("attempt %d: top of the range %s, ceiling %s", attempt, top, ceiling)
		}
		if low := jitter(base, limit, attempt, func() float64 { return 0 }); low != 0 {
			t.Fatalf("attempt %d: bottom of the range %s, want 0 (full jitter)", attempt, low)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"3": 3 * time.Second, "0.5": 500 * time.Millisecond, "": 0, "soon": 0, "-1": 0,
		"Wed, 01 May 2024 12:00:10 GMT": 10 * time.Second, "Wed, 01 May 2024 11:00:00 GMT": 0,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

type quotaError struct{}

func (quotaError) Error() string     { return "quota exceeded" }
func (quotaError) ErrorType() string { return "QuotaExceeded" }

func TestErrorTypes(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{errors.New("x"), "error"},
		{fmt.Errorf("wrapped: %w", errors.New("x")), "error"},
		{Permanent(errors.New("x")), "error"},
		{Permanent(&net.OpError{Op: "dial", Err: errors.New("refused")}), "net.OpError"},
		{RetryAfter(quotaError{}, time.Second), "QuotaExceeded"},
		{&PanicError{Value: "boom"}, "panic"},
		{fmt.Errorf("%w after 1s", ErrTimeout), "TaskTimeout"},
	}
	for _, c := range cases {
		if got := errorType(c.err); got != c.want {
			t.Errorf("errorType(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if Permanent(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Fatal("wrapping nil must give nil")
	}
}

func TestNewClientRefusesABadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://"} {
		if _, err := NewClient(u, "k"); err == nil || !strings.Contains(err.Error(), "base URL") {
			t.Errorf("NewClient(%q): expected a base URL error, got %v", u, err)
		}
	}
}

func TestCleanDropsNULAndCountsRunes(t *testing.T) {
	if got := clean("a\x00béc", 3); got != "a\uFFFDb" {
		t.Fatalf("clean: got %q", got)
	}
}
