package jobengine

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Reasons a handler's context is cancelled; Job.Err returns the one that applies.
var (
	// ErrLeaseLost: the server no longer holds this worker's lease of the job (it expired and the job was
	// rescued or claimed by another worker). The handler must stop; nothing is reported about the job.
	ErrLeaseLost = errors.New("jobengine: the lease of the job is lost")
	// ErrCancelRequested: someone asked the job to cancel; a handler that returns an error now ends the job
	// cancelled.
	ErrCancelRequested = errors.New("jobengine: the job was asked to cancel")
	// ErrShutdown: the worker is shutting down and the grace period is over; the job is released back to the
	// queue without spending its attempt.
	ErrShutdown = errors.New("jobengine: the worker is shutting down")
	// ErrTimeout: the job ran longer than its timeout; the attempt fails (and is retried if attempts remain).
	ErrTimeout = errors.New("jobengine: the job timed out")
)

// leaseLostType is the problem type of a 409 the server answers for a fenced-out report.
const leaseLostType = "urn:jobengine:problem:lease-lost"

// FieldError is one entry of a problem's errors list: the request field at fault and why.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an error body of the API (RFC 9457, application/problem+json).
type Problem struct {
	Type   string       `json:"type,omitempty"`
	Title  string       `json:"title,omitempty"`
	Status int          `json:"status,omitempty"`
	Detail string       `json:"detail,omitempty"`
	Field  string       `json:"field,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
}

// APIError is a response the server refused the call with (an error status that is not retried, or one that
// still failed when the retry budget ran out).
type APIError struct {
	StatusCode int
	Method     string
	Path       string
	Problem    Problem
	// RetryAfter is what the server's Retry-After header asked for (0 if none).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	detail := e.Problem.Detail
	if detail == "" {
		detail = e.Problem.Title
	}
	if e.Problem.Field != "" {
		detail = e.Problem.Field + ": " + detail
	}
	return fmt.Sprintf("jobengine: %s %s: HTTP %d: %s", e.Method, e.Path, e.StatusCode, detail)
}

// Is makes errors.Is(err, ErrLeaseLost) true for the server's 409 lease-lost answer.
func (e *APIError) Is(target error) bool {
	return target == ErrLeaseLost && e.StatusCode == 409 && e.Problem.Type == leaseLostType
}

// Temporary reports whether the call may succeed if repeated later (the server was busy or unavailable).
func (e *APIError) Temporary() bool { return retryableStatus(e.StatusCode) }

// PermanentError marks a handler error that retrying cannot fix: the job goes straight to dead, whatever
// attempts remain. Make one with Permanent.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the job fails without a retry. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// RetryError asks for the retry of a failed attempt after Delay instead of the server's backoff.
type RetryError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the job is retried after delay (if attempts remain). RetryAfter(nil, d) is nil.
func RetryAfter(err error, delay time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, Delay: delay}
}

// PanicError is the error of a handler that panicked: the attempt fails with the panic's value as its
// message and the goroutine's stack as its traceback; the worker goes on with its other jobs.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// ErrorTyper lets a handler error name its type in the job's error record (default: its Go type).
type ErrorTyper interface{ ErrorType() string }

// errorType is the name recorded as the type of a failed attempt's error.
func errorType(err error) string {
	var typer ErrorTyper
	if errors.As(err, &typer) {
		return typer.ErrorType()
	}
	var p *PanicError
	if errors.As(err, &p) {
		return "panic"
	}
	switch {
	case errors.Is(err, ErrTimeout):
		return "TaskTimeout"
	case errors.Is(err, ErrCancelRequested):
		return "Cancelled"
	}
	for {
		var inner error
		switch e := err.(type) {
		case *PermanentError:
			inner = e.Err
		case *RetryError:
			inner = e.Err
		}
		if inner == nil {
			break
		}
		err = inner
	}
	name := strings.TrimLeft(reflect.TypeOf(err).String(), "*")
	switch name {
	case "errors.errorString", "fmt.wrapError", "fmt.wrapErrors":
		return "error"
	}
	return name
}
