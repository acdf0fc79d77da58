package jobengine

import (
	"context"
	"regexp"
)

// traceParentKey is the context key of the W3C traceparent a Client sends.
type traceParentKey struct{}

// The W3C traceparent of version 00: trace id, parent span id and flags in lower-case hex.
var traceParentPattern = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// WithTraceParent returns a copy of ctx that carries the W3C traceparent tp: every request a Client makes
// with it sends tp as its traceparent header, so the server's span for the call, and a job the call
// enqueues, join that trace (with the server's tracing on). A tp that is not a valid traceparent (an
// all-zero trace or span id, or another version) is ignored and ctx is returned as it is.
//
//	ctx = jobengine.WithTraceParent(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
//	job, err := client.Enqueue(ctx, jobengine.NewJob{Task: "resize"})
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if !validTraceParent(tp) {
		return ctx
	}
	return context.WithValue(ctx, traceParentKey{}, tp)
}

// TraceParent returns the traceparent ctx carries (see WithTraceParent), or "" when it carries none. The
// context a Worker gives a handler carries the job's (Job.TraceParent).
func TraceParent(ctx context.Context) string {
	tp, _ := ctx.Value(traceParentKey{}).(string)
	return tp
}

func validTraceParent(tp string) bool {
	return traceParentPattern.MatchString(tp) && tp[3:35] != "00000000000000000000000000000000" &&
		tp[36:52] != "0000000000000000"
}
