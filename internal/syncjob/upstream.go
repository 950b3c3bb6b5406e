package syncjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
)

// Reasons a sync completes without calling Sync because of its upstream
// (Task.Limits): it could not start before its NotAfter.
const (
	// SkippedUpstreamDown: the upstream's breaker stayed open (or its probe
	// ran) past the sync's NotAfter.
	SkippedUpstreamDown = upstream.SkippedDown
	// SkippedUpstreamThrottled: the upstream's rate limit, or a pause it
	// asked for, had no room for the sync before its NotAfter.
	SkippedUpstreamThrottled = upstream.SkippedThrottled
)

// holdMargin is added to a task's SyncTimeout for a concurrency lease: a
// lease of a node killed mid-sync frees its place that long after.
const holdMargin = 5 * time.Second

// ThrottledError is the error Throttled returns.
type ThrottledError struct {
	// RetryAfter is how long the upstream asked to wait.
	RetryAfter time.Duration
	Err        error
}

func (e *ThrottledError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("upstream throttled the sync: retry after %s", e.RetryAfter)
	}
	return fmt.Sprintf("upstream throttled the sync (retry after %s): %v", e.RetryAfter, e.Err)
}

func (e *ThrottledError) Unwrap() error { return e.Err }

// Throttled returns the error a SyncFunc returns when the upstream asked
// it to slow down (an HTTP 429 with Retry-After): the sync is tried again
// after retryAfter (1 s when not positive) without using one of its
// attempts, and, for a task with Upstream or Limits, every sync of the
// same upstream waits as long, on every node.
func Throttled(retryAfter time.Duration, err error) error {
	if retryAfter <= 0 {
		retryAfter = time.Second
	}
	return &ThrottledError{RetryAfter: retryAfter, Err: err}
}

// staleByUpstream records a stale sync of a task with upstream limits with
// its upstream, and returns why its upstream held it ("" when it did not):
// upstream_down when the breaker had deferred it, upstream_throttled when
// it waited in the rate limiter's line.
func (w *Worker) staleByUpstream(ctx context.Context, spec *taskspec.Spec, job *river.Job[Args]) (string, error) {
	if !spec.UsesUpstreamLimiter() {
		return "", nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return "", err
	}
	deferred, throttled, err := upstream.New(client.Schema()).Stale(ctx, w.pool, upstream.Request{Task: spec.Name, Key: job.Args.Upstream, JobID: job.ID})
	switch {
	case err != nil:
		return "", err
	case deferred:
		return SkippedUpstreamDown, nil
	case throttled:
		return SkippedUpstreamThrottled, nil
	}
	return "", nil
}

// forget drops the job's place with its upstream when it ends without
// asking again (account gone), for a task with limits.
func (w *Worker) forget(ctx context.Context, spec *taskspec.Spec, job *river.Job[Args]) error {
	if !spec.UsesUpstreamLimiter() {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	return upstream.New(client.Schema()).Forget(ctx, w.pool, upstream.Request{Task: spec.Name, Key: job.Args.Upstream, JobID: job.ID})
}

// notUpstreamError is the error NotUpstream returns.
type notUpstreamError struct{ err error }

func (e *notUpstreamError) Error() string { return e.err.Error() }
func (e *notUpstreamError) Unwrap() error { return e.err }

// NotUpstream marks an error of a SyncFunc that is not its upstream's
// fault (the app's own database, a bug): River retries the job as for any
// error, but the upstream's breaker does not count it. Without it, every
// error a SyncFunc returns counts as a failure of the account's upstream.
func NotUpstream(err error) error {
	if err == nil {
		return nil
	}
	return &notUpstreamError{err: err}
}

// concurrencyRetry is the first in-process wait for a lease of an upstream
// at its in-flight limit; it doubles up to concurrencyRetryMax, and the
// waits add up to at most upstream.MaxDelay.
const (
	concurrencyRetry    = 20 * time.Millisecond
	concurrencyRetryMax = 200 * time.Millisecond
)

// InProcessPerUpstream is how many syncs of one upstream may wait in
// process on a node at once, for their start under the rate
// (upstream.Decision.Delay) or for a lease under the in-flight limit, each
// at most upstream.MaxDelay and holding a worker meanwhile; the others
// snooze (a place in line, or a retry after River's next fetch).
const InProcessPerUpstream = 4

// holdInProcess takes one of the node's in-process places of the task's
// upstream key, reporting false when all are taken; release gives it back.
func (w *Worker) holdInProcess(task, key string) (release func(), ok bool) {
	k := [2]string{task, key}
	w.inProcessMu.Lock()
	defer w.inProcessMu.Unlock()
	if w.inProcess[k] >= InProcessPerUpstream {
		return nil, false
	}
	if w.inProcess == nil {
		w.inProcess = map[[2]string]int{}
	}
	w.inProcess[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.inProcessMu.Lock()
			defer w.inProcessMu.Unlock()
			if w.inProcess[k]--; w.inProcess[k] <= 0 {
				delete(w.inProcess, k)
			}
		})
	}, true
}

// acquire is Limiter.Acquire, asked again in process while the upstream's
// in-flight limit alone holds the sync, for at most upstream.MaxDelay: a
// call in flight usually ends within it, and a snoozed sync would wait for
// River's next fetch (a poll interval, 1 s by default), which made a
// concurrency limit cost most of its upstream's throughput when calls are
// short. It waits so only with one of the node's in-process places of the
// upstream (inProcess); without, the sync may not wait in process for its
// start either (Request.NoDelay). Every Wait decision is counted in the
// metrics (spec's), the ones waited in process too: the limiter counts
// the sync as throttled by the first of them, whatever comes after.
func (w *Worker) acquire(ctx context.Context, spec *taskspec.Spec, lim *upstream.Limiter, req upstream.Request, inProcess bool) (upstream.Decision, error) {
	req.NoDelay = !inProcess
	step, waited := concurrencyRetry, time.Duration(0)
	for {
		d, err := w.batch.Acquire(ctx, lim, w.pool, req)
		if err == nil && d.Verdict == upstream.Wait {
			spec.Metrics.UpstreamWait(ctx, spec.Name, d.Reason)
		}
		if err != nil || !inProcess || d.Verdict != upstream.Wait || d.Reason != upstream.WaitConcurrency || waited+step > upstream.MaxDelay {
			return d, err
		}
		select {
		case <-time.After(step):
		case <-ctx.Done():
			return d, nil // snoozed as decided
		}
		waited += step
		step = min(2*step, concurrencyRetryMax)
	}
}

// syncThrough calls the task's Sync for job, through its upstream's limits
// and breaker when the task has any.
func (w *Worker) syncThrough(ctx context.Context, t workerTask, job *river.Job[Args], notAfter time.Time, e *ending) error {
	spec := t.spec
	if !spec.UsesUpstreamLimiter() {
		err := t.sync(ctx, job.Args.AccountID, job)
		var throttled *ThrottledError
		if errors.As(err, &throttled) {
			return river.JobSnooze(throttled.RetryAfter)
		}
		return err
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	lim := upstream.New(client.Schema())
	req := upstream.Request{Task: spec.Name, Key: job.Args.Upstream, JobID: job.ID, Limits: spec.Limits, NotAfter: notAfter, Hold: spec.SyncTimeout + holdMargin,
		Cycle: spec.CycleLen(job.Args.CycleStart)}
	release, inProcess := w.holdInProcess(spec.Name, job.Args.Upstream)
	if inProcess {
		defer release()
	}
	d, err := w.acquire(ctx, spec, lim, req, inProcess)
	if inProcess && (err != nil || d.Verdict != upstream.Run || d.Delay <= 0) {
		release() // waits no more in process
	}
	if err != nil {
		if taskspec.Unreachable(err) {
			return river.JobSnooze(w.waits.Next(job.ID))
		}
		return fmt.Errorf("error deciding the sync of account %s with its upstream %q: %w", job.Args.AccountID, job.Args.Upstream, err)
	}
	switch d.Verdict {
	case upstream.Wait: // counted by acquire
		return river.JobSnooze(d.Wait)
	case upstream.Skip:
		msg := "riverslot: sync jobs completed without calling Sync: their upstream's rate limit, or a pause it asked for, had no room for them before their NotAfter; the next cycle covers them"
		if d.Reason == upstream.SkippedDown {
			msg = "riverslot: sync jobs completed without calling Sync: their upstream's circuit breaker stayed open past their NotAfter (the upstream is down); the next cycle covers them"
		}
		e.skipped = d.Reason
		return w.skip(ctx, spec, job, d.Reason, msg, "upstream", job.Args.Upstream)
	}
	if d.Probe {
		w.logger.InfoContext(ctx, "riverslot: probing an upstream whose circuit breaker is open",
			slog.String("task", spec.Name), slog.String("upstream", job.Args.Upstream), slog.Int64("job_id", job.ID))
	}
	// The outcome is recorded even when the sync's own context ended (its
	// timeout) or Sync panicked (River recovers it and retries the job).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	released := false
	defer func() {
		if !released {
			_, _ = lim.Release(rctx, w.pool, req, upstream.Failed, 0)
		}
	}()
	if d.Delay > 0 {
		// Its start under the rate is a moment away: wait for it here.
		select {
		case <-time.After(d.Delay):
		case <-ctx.Done():
			released = true
			_, _ = lim.Release(rctx, w.pool, req, upstream.Neutral, 0)
			return ctx.Err()
		}
		if inProcess {
			release()
		}
	}

	syncErr := t.sync(ctx, job.Args.AccountID, job)
	outcome, retryAfter := upstream.Succeeded, time.Duration(0)
	var (
		throttled *ThrottledError
		cancelled *rivertype.JobCancelError
		snoozed   *rivertype.JobSnoozeError
	)
	switch {
	case errors.As(syncErr, &throttled):
		outcome, retryAfter = upstream.Throttled, throttled.RetryAfter
	case errors.As(syncErr, &cancelled), errors.As(syncErr, &snoozed), errors.As(syncErr, new(*notUpstreamError)),
		errors.Is(syncErr, context.Canceled) && ctx.Err() != nil:
		// The app cancelled or snoozed the job, said the error is not the
		// upstream's, or this node is shutting down: nothing learnt
		// about the upstream.
		outcome = upstream.Neutral
	case syncErr != nil:
		outcome = upstream.Failed
	}
	spec.Metrics.UpstreamCall(ctx, spec.Name, outcome.String())
	rel, err := w.batch.Release(rctx, lim, w.pool, req, outcome, retryAfter)
	released = true
	if err != nil {
		w.logger.WarnContext(ctx, "riverslot: could not record a sync's outcome for its upstream; its concurrency lease expires by itself",
			slog.String("task", spec.Name), slog.String("upstream", job.Args.Upstream), slog.Int64("job_id", job.ID),
			slog.Duration("lease_expires_in", req.Hold), slog.String("error", err.Error()))
	}
	if throttled != nil {
		return river.JobSnooze(retryAfter)
	}
	if wait := rel.DeferFor(); outcome == upstream.Failed && wait > 0 {
		// The upstream is down (this failure may have opened its
		// breaker): the sync waits for it with the others, without
		// burning one of its attempts on River's backoff, which could
		// bring it back after its NotAfter.
		if err := lim.MarkDeferred(rctx, w.pool, req); err != nil {
			return err
		}
		spec.Metrics.UpstreamWait(ctx, spec.Name, "open")
		w.warnOnce(ctx, spec, job, "breaker-open:"+job.Args.Upstream, "riverslot: an upstream's circuit breaker is open: its syncs are deferred (snoozed, no attempt used) until a probe finds it back",
			slog.String("upstream", job.Args.Upstream), slog.Duration("cooldown", spec.Limits.Cooldown), slog.String("error", syncErr.Error()))
		return river.JobSnooze(wait)
	}
	return syncErr
}
