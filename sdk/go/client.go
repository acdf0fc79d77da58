package jobengine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RetryPolicy says how a Client repeats a call that could not reach the server (connection refused or
// reset, a timeout) or got 429 / 502 / 503 / 504: after a delay drawn uniformly from
// [0, min(Cap, Base*2^(n-1))) (full jitter), or after the server's Retry-After when that is longer, until
// MaxElapsed has passed since the first try; then the last error is returned.
type RetryPolicy struct {
	Base       time.Duration
	Cap        time.Duration
	MaxElapsed time.Duration
}

// DefaultRetryPolicy is the policy of a Client made without one: base 100 ms, cap 5 s, 60 s in all.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: 100 * time.Millisecond, Cap: 5 * time.Second, MaxElapsed: 60 * time.Second}
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests with hc (default: a new http.Client).
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.http = hc } }

// WithRetryPolicy sets the retry policy (default DefaultRetryPolicy()); a zero Base or Cap takes the
// default's, a zero MaxElapsed means one try and no retries.
func WithRetryPolicy(p RetryPolicy) ClientOption { return func(c *Client) { c.retry = p } }

// WithRequestTimeout bounds each try of a request (default 30 s; a claim adds its long-poll to it).
func WithRequestTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// Client calls the jobengine HTTP API with an API key. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	key     string
	http    *http.Client
	retry   RetryPolicy
	timeout time.Duration

	mu      sync.Mutex
	rnd     *mathrand.Rand
	retries int
}

// NewClient returns a Client of the server at baseURL (e.g. "http://127.0.0.1:8080") using the API key key.
func NewClient(baseURL, key string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("jobengine: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("jobengine: base URL: expected http(s)://host[:port], got %q", baseURL)
	}
	c := &Client{
		base: u, key: key, http: &http.Client{}, retry: DefaultRetryPolicy(), timeout: 30 * time.Second,
		rnd: mathrand.New(mathrand.NewSource(time.Now().UnixNano())),
	}
	for _, opt := range opts {
		opt(c)
	}
	def := DefaultRetryPolicy()
	if c.retry.Base <= 0 {
		c.retry.Base = def.Base
	}
	if c.retry.Cap <= 0 {
		c.retry.Cap = def.Cap
	}
	if c.retry.MaxElapsed < 0 {
		c.retry.MaxElapsed = 0 // one try, no retries
	}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	return c, nil
}

// Retries is the number of tries repeated so far by this client (for logs and tests).
func (c *Client) Retries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retries
}

// callOptions are per-call variations of the client's defaults.
type callOptions struct {
	headers    map[string]string
	timeout    time.Duration // per try; 0: the client's
	maxElapsed time.Duration // 0: the policy's
	query      url.Values
}

// Do sends method path with body (marshalled to JSON unless nil) and decodes the answer into out (unless
// nil), retrying as RetryPolicy says. An error status that is not retried returns an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, body, out, callOptions{})
}

func (c *Client) do(ctx context.Context, method, path string, body, out any, opt callOptions) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("jobengine: %s %s: encoding the body: %w", method, path, err)
		}
	}
	target := c.base.String() + path
	if len(opt.query) > 0 {
		target += "?" + opt.query.Encode()
	}
	maxElapsed := c.retry.MaxElapsed
	if opt.maxElapsed > 0 {
		maxElapsed = opt.maxElapsed
	}
	timeout := c.timeout
	if opt.timeout > 0 {
		timeout = opt.timeout
	}
	deadline := time.Now().Add(maxElapsed)
	for attempt := 1; ; attempt++ {
		status, wait, err := c.try(ctx, method, path, target, payload, out, opt.headers, timeout)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryableStatus(status) && status != 0 || !time.Now().Before(deadline) {
			return err
		}
		delay := c.backoff(attempt)
		if wait > delay {
			delay = wait
		}
		if left := time.Until(deadline); delay > left {
			delay = left
		}
		c.mu.Lock()
		c.retries++
		c.mu.Unlock()
		if err := sleep(ctx, delay); err != nil {
			return err
		}
	}
}

// try sends one request. status is 0 when no answer came (a transport error, to retry).
func (c *Client) try(ctx context.Context, method, path, target string, payload []byte, out any,
	headers map[string]string, timeout time.Duration) (status int, wait time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reader io.Reader
	if payload != nil {
		reader = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return -1, 0, fmt.Errorf("jobengine: %s %s: %w", method, path, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if tp := TraceParent(ctx); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("jobengine: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, 0, fmt.Errorf("jobengine: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		apiErr := &APIError{StatusCode: resp.StatusCode, Method: method, Path: path,
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		if json.Unmarshal(data, &apiErr.Problem) != nil || apiErr.Problem.Status == 0 && apiErr.Problem.Detail == "" {
			apiErr.Problem = Problem{Status: resp.StatusCode, Detail: truncate(strings.TrimSpace(string(data)), 500)}
		}
		return resp.StatusCode, apiErr.RetryAfter, apiErr
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return -1, 0, fmt.Errorf("jobengine: %s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, 0, nil
}

func (c *Client) backoff(attempt int) time.Duration {
	return jitter(c.retry.Base, c.retry.Cap, attempt, c.random)
}

func (c *Client) random() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64()
}

// jitter is full jitter: uniform in [0, min(cap, base*2^(attempt-1))).
func jitter(base, cap time.Duration, attempt int, random func() float64) time.Duration {
	ceiling := cap
	if attempt < 40 {
		if d := base << uint(attempt-1); d > 0 && d < cap {
			ceiling = d
		}
	}
	return time.Duration(random() * float64(ceiling))
}

func retryableStatus(status int) bool {
	return status == 429 || status == 502 || status == 503 || status == 504
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date; 0 when absent or unreadable.
func parseRetryAfter(value string, now time.Time) time.Duration {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(value, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if when, err := http.ParseTime(value); err == nil && when.After(now) {
		return when.Sub(now)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// truncate cuts s to at most n characters (runes), as the server counts them.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

func newIdempotencyKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	return hex.EncodeToString(b)
}

// -- jobs ---------------------------------------------------------------------------------------------

// NewJob is a job to enqueue; zero fields take the server's (or the task's) defaults.
type NewJob struct {
	Task           string     `json:"task"`
	Payload        any        `json:"payload"`
	Queue          string     `json:"queue,omitempty"`
	Priority       *int       `json:"priority,omitempty"`
	RunAt          *time.Time `json:"run_at,omitempty"`
	Delay          float64    `json:"delay,omitempty"`
	MaxAttempts    int        `json:"max_attempts,omitempty"`
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	DependsOn      []string   `json:"depends_on,omitempty"`
	Timeout        float64    `json:"timeout,omitempty"`
}

// Enqueue adds one job (scope jobs:write) and returns it. It always sends an Idempotency-Key header, so a
// call retried after a lost answer cannot enqueue twice.
func (c *Client) Enqueue(ctx context.Context, job NewJob) (*JobInfo, error) {
	var out JobInfo
	opt := callOptions{headers: map[string]string{"Idempotency-Key": newIdempotencyKey()}}
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs", job, &out, opt); err != nil {
		return nil, err
	}
	return &out, nil
}

// EnqueueBatch adds up to 1000 jobs in one transaction: all of them or none.
func (c *Client) EnqueueBatch(ctx context.Context, jobs []NewJob) ([]JobInfo, error) {
	var out struct {
		Jobs []JobInfo `json:"jobs"`
	}
	opt := callOptions{headers: map[string]string{"Idempotency-Key": newIdempotencyKey()}}
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/batch", map[string]any{"jobs": jobs}, &out, opt); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// GetJob returns the job with id id (scope jobs:read).
func (c *Client) GetJob(ctx context.Context, id string) (*JobInfo, error) {
	var out JobInfo
	if err := c.Do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MaxWait is the longest wait of one long poll (GET /api/v1/jobs/{id}?wait=); Wait loops over them.
const MaxWait = 60 * time.Second

// ErrWaitTimeout: Wait ran out of time before the job ended; the job is returned as it was last seen.
var ErrWaitTimeout = errors.New("jobengine: the job has not ended yet")

// Ended reports whether a job's state is terminal: succeeded, dead, cancelled or stale.
func (j *JobInfo) Ended() bool {
	switch j.State {
	case "succeeded", "dead", "cancelled", "stale":
		return true
	}
	return false
}

// Wait returns the job once it has ended (scope jobs:read), by long polls of GET /api/v1/jobs/{id}?wait=
// (each at most MaxWait, so a proxy's idle timeout never cuts one), woken by the server when the job ends.
// After timeout it returns the job as it is with an error wrapping ErrWaitTimeout; an unknown job is an
// *APIError (404); ctx cancels the wait. Usage:
//
//	job, err := client.Enqueue(ctx, jobengine.NewJob{Task: "greet", Payload: map[string]any{"name": "Ada"}})
//	...
//	done, err := client.Wait(ctx, job.ID, 2*time.Minute)
//	if err == nil && done.State == "succeeded" { ... done.Result ... }
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (*JobInfo, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("jobengine: Wait: timeout must not be negative, got %v", timeout)
	}
	deadline := time.Now().Add(timeout)
	path := "/api/v1/jobs/" + url.PathEscape(id)
	for {
		wait := time.Until(deadline)
		if wait < 0 {
			wait = 0
		}
		if wait > MaxWait {
			wait = MaxWait
		}
		var out JobInfo
		// Each try outlasts the server's wait, which answers by itself when it runs out.
		opt := callOptions{
			query:   url.Values{"wait": {strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)}},
			timeout: wait + 30*time.Second,
		}
		if err := c.do(ctx, http.MethodGet, path, nil, &out, opt); err != nil {
			return nil, err
		}
		if out.Ended() {
			return &out, nil
		}
		if !time.Now().Before(deadline) {
			return &out, fmt.Errorf("%w: %s is %s after %v", ErrWaitTimeout, id, out.State, timeout)
		}
	}
}

// CancelJob asks the job to cancel (scope jobs:write): a queued job ends cancelled at once, a running one
// when its worker sees the request at its next heartbeat.
func (c *Client) CancelJob(ctx context.Context, id, reason string) (*JobInfo, error) {
	var out JobInfo
	body := map[string]string{}
	if reason != "" {
		body["reason"] = reason
	}
	if err := c.Do(ctx, http.MethodPost, "/api/v1/jobs/"+url.PathEscape(id)+"/cancel", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
