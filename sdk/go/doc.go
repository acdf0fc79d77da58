// Package jobengine is the Go worker SDK of jobengine: it runs Go handlers for jobs of a jobengine server
// over the worker protocol of its HTTP API (/api/v1/worker/*), with the same leases and fencing as the
// engine's own Python workers.
//
// A Worker claims jobs in batches with a long-poll, runs each in its own goroutine with a context.Context,
// heartbeats the leases at a third of their length and cancels a handler's context when the server says
// its lease is lost (or the job was asked to cancel), stores progress and phase results, and reports each
// attempt as completed, failed (retryable or not) or released. Every HTTP call is retried with exponential
// backoff and full jitter on connection errors and 429 / 502 / 503 / 504, honouring Retry-After.
//
//	client, err := jobengine.NewClient("http://127.0.0.1:8080", os.Getenv("JOBENGINE_API_KEY"))
//	w := jobengine.NewWorker(client, jobengine.Options{Queues: []string{"default"}})
//	w.HandleFunc("hello", func(ctx context.Context, job *jobengine.Job) (any, error) {
//		var in struct{ Name string `json:"name"` }
//		if err := job.Decode(&in); err != nil {
//			return nil, jobengine.Permanent(err) // retrying cannot fix a bad payload
//		}
//		return "hello " + in.Name, nil
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err = w.Run(ctx) // returns after a graceful shutdown once ctx is done
//
// There is no global state: a Client and a Worker hold everything they use.
package jobengine
