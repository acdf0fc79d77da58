package jobengine

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"
)

// maxReport is the most entries of each kind one report call may carry.
const maxReport = 1000

// reporter batches the outcomes of attempts into report calls: whatever finished while the previous call
// was on the wire goes in the next one.
type reporter struct {
	client *Client
	log    *log.Logger

	mu      sync.Mutex
	pending Report
	closed  bool
	wake    chan struct{}
}

func newReporter(c *Client, l *log.Logger) *reporter {
	return &reporter{client: c, log: l, wake: make(chan struct{}, 1)}
}

func (r *reporter) complete(c Completion) {
	r.add(func(p *Report) { p.Completions = append(p.Completions, c) })
}
func (r *reporter) fail(f Failure)     { r.add(func(p *Report) { p.Failures = append(p.Failures, f) }) }
func (r *reporter) release(l LeaseRef) { r.add(func(p *Report) { p.Releases = append(p.Releases, l) }) }

func (r *reporter) add(fn func(*Report)) {
	r.mu.Lock()
	fn(&r.pending)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// close makes loop send what is pending and return.
func (r *reporter) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reporter) take() (Report, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out Report
	out.Completions, r.pending.Completions = split(r.pending.Completions)
	out.Failures, r.pending.Failures = split(r.pending.Failures)
	out.Releases, r.pending.Releases = split(r.pending.Releases)
	return out, r.closed
}

func split[T any](items []T) (head, rest []T) {
	if len(items) <= maxReport {
		return items, nil
	}
	return items[:maxReport], items[maxReport:]
}

func (r *reporter) loop() {
	failures := 0
	for {
		batch, closed := r.take()
		if size(batch) == 0 {
			if closed {
				return
			}
			<-r.wake
			continue
		}
		if err := r.send(batch); err != nil {
			// The server is unreachable or busy beyond the retry budget: keep the outcomes and try again
			// (while their leases last, a late report is still applied); on shutdown, give up.
			if closed {
				r.log.Printf("dropping %d reports at shutdown: %v", size(batch), err)
				continue
			}
			failures++
			r.log.Printf("reporting %d outcomes failed (will retry): %v", size(batch), err)
			r.mu.Lock()
			r.pending.Completions = append(batch.Completions, r.pending.Completions...)
			r.pending.Failures = append(batch.Failures, r.pending.Failures...)
			r.pending.Releases = append(batch.Releases, r.pending.Releases...)
			r.mu.Unlock()
			time.Sleep(jitter(100*time.Millisecond, 5*time.Second, failures, r.client.random))
			continue
		}
		failures = 0
	}
}

// send reports batch; a batch the server refuses as invalid (422) is sent again one entry at a time, so a
// single bad entry (say, a result the server cannot store) fails only its own job.
func (r *reporter) send(batch Report) error {
	out, err := r.client.Report(context.Background(), batch)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == 422 {
		if size(batch) == 1 {
			return r.invalid(batch, apiErr)
		}
		for _, c := range batch.Completions {
			r.logErr(r.send(Report{Completions: []Completion{c}}))
		}
		for _, f := range batch.Failures {
			r.logErr(r.send(Report{Failures: []Failure{f}}))
		}
		for _, l := range batch.Releases {
			r.logErr(r.send(Report{Releases: []LeaseRef{l}}))
		}
		return nil
	}
	if err != nil {
		if apiErr != nil && !apiErr.Temporary() {
			r.log.Printf("the server refused %d reports: %v", size(batch), err)
			return nil
		}
		return err
	}
	for _, id := range out.Refused {
		r.log.Printf("job %s: report refused (the lease was lost: another attempt owns the job)", id)
	}
	failed := set(out.Failed)
	for _, c := range batch.Completions {
		if failed[c.JobID] {
			r.log.Printf("job %s: its graph refused the nodes it adds; the job ended dead", c.JobID)
		}
	}
	return nil
}

// invalid handles one entry the server refused as invalid: a completion becomes a failure that names the
// problem (retrying cannot fix the result or the nodes it adds), a failure is sent again without its
// traceback.
func (r *reporter) invalid(one Report, apiErr *APIError) error {
	switch {
	case len(one.Completions) == 1:
		c := one.Completions[0]
		what, kind := "the result", "InvalidResult"
		if len(c.Nodes) > 0 {
			what, kind = "the result or the nodes it adds", "InvalidJob"
		}
		return r.send(Report{Failures: []Failure{{JobID: c.JobID, Token: c.Token, Error: ErrorInfo{
			Type: kind, Message: clean(fmt.Sprintf("the server refused %s: %v", what, apiErr), 2000),
		}}}})
	case len(one.Failures) == 1 && one.Failures[0].Error.Traceback != nil:
		f := one.Failures[0]
		f.Error.Traceback = nil
		return r.send(Report{Failures: []Failure{f}})
	}
	r.log.Printf("the server refused a report: %v", apiErr)
	return nil
}

func (r *reporter) logErr(err error) {
	if err != nil {
		r.log.Printf("reporting failed: %v", err)
	}
}

func size(b Report) int { return len(b.Completions) + len(b.Failures) + len(b.Releases) }
