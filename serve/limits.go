package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/upstream"
)

// QuotaTask is the upstream limiter's task of the tenants' calls-per-second
// quotas (riverslot_upstream): one key per tenant with a
// max_calls_per_second, its id, limited to that rate with a burst of one
// second's calls. Every call a tenant's schedules make (at their places,
// retried, triggered, caught up) takes a start under it, as a call takes
// one under its upstream's key; `riverslot upstream list --task
// serve-tenant-quota` shows each tenant's calls and waits.
const QuotaTask = "serve-tenant-quota"

// holdMargin is added to a call's timeout for a limiter lease: a lease of
// a process killed mid-call frees its place that long after.
const holdMargin = 5 * time.Second

// noWait is a NotAfter in the past: the limiter answers Run or Skip, never
// Wait (a decision that would wait is skipped, and takes no place).
var noWait = time.Unix(1, 0)

// quotaRequest is the limiter's request of a call of tenant's, whose quota
// is maxCPS calls a second (0: none, and no request).
func quotaRequest(tenant uuid.UUID, maxCPS float64, jobID int64, notAfter time.Time) (upstream.Request, bool) {
	if maxCPS <= 0 {
		return upstream.Request{}, false
	}
	return upstream.Request{Task: QuotaTask, Key: tenant.String(), JobID: jobID,
		Limits:   upstream.Limits{Rate: maxCPS, Burst: max(1, int(math.Ceil(maxCPS)))}.WithDefaults(),
		NotAfter: notAfter, Hold: holdMargin}, true
}

// hostRequest is the limiter's request of a call of schedule l made by job
// jobID outside riverslot's sync (triggered, caught up): the same task,
// key and limits as the schedule's calls at their places, so that its
// upstream's rate, concurrency, pauses and breaker hold it too.
func (s *Server) hostRequest(l loaded, jobID int64, notAfter time.Time) upstream.Request {
	period := time.Duration(l.periodMS) * time.Millisecond
	if l.periodMS < 0 {
		period = Monthly
	}
	lim := s.cfg.HostLimits
	r := upstream.Request{Task: TaskName(period), Key: upstream.CutKey(l.upstream), JobID: jobID,
		Limits: upstream.Limits{Rate: lim.Rate, Burst: lim.Burst, Concurrency: lim.Concurrency,
			FailureThreshold: lim.FailureThreshold, Cooldown: lim.Cooldown}.WithDefaults(),
		NotAfter: notAfter, Hold: l.timeout + holdMargin}
	if period > 0 {
		r.Cycle = period
	}
	return r
}

// admit asks the limiter for r and, on a Run, waits out its Delay (at most
// upstream.MaxDelay). It returns the decision; on a Run the caller owes a
// release (upstream.Limiter.Release) whatever happens next.
func (s *Server) admit(ctx context.Context, r upstream.Request) (upstream.Decision, error) {
	d, err := s.limiter.Acquire(ctx, s.cfg.Pool, r)
	if err != nil || d.Verdict != upstream.Run || d.Delay <= 0 {
		return d, err
	}
	select {
	case <-time.After(d.Delay):
		return d, nil
	case <-ctx.Done():
		s.release(ctx, r, upstream.Neutral, 0)
		return upstream.Decision{}, ctx.Err()
	}
}

// release records how a call admitted under r went, its lease given back.
func (s *Server) release(ctx context.Context, r upstream.Request, outcome upstream.Outcome, retryAfter time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.limiter.Release(rctx, s.cfg.Pool, r, outcome, retryAfter); err != nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not record a call's outcome with the limiter; its lease expires by itself",
			slog.String("task", r.Task), slog.String("key", r.Key), slog.Int64("job_id", r.JobID), slog.String("error", err.Error()))
	}
}

// quotaRoomIn is the Retry-After of a trigger refused by tenant's quota of
// maxCPS calls a second: when its next start is free, after the calls
// already waiting in its line (the limiter's line_tat and start_tat), in
// whole seconds, at least one interval.
func (s *Server) quotaRoomIn(ctx context.Context, tenant uuid.UUID, maxCPS float64) (time.Duration, error) {
	var ahead float64
	err := s.cfg.Pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM greatest(line_tat, start_tat) - clock_timestamp()), 0)::float8
FROM `+s.upstreamTable+` WHERE task = $1 AND key = $2`, QuotaTask, tenant.String()).Scan(&ahead)
	if errors.Is(err, pgx.ErrNoRows) {
		ahead = 0
	} else if err != nil {
		return 0, fmt.Errorf("error reading tenant %s's quota line: %w", tenant, err)
	}
	interval := 1 / maxCPS
	return time.Duration(math.Ceil(max(1, interval, ahead))) * time.Second, nil
}

// claimCall returns how many calls job made (missed entries aside), and
// whether job holds its schedule's call now: a call of a schedule (at
// its place, retried, triggered, caught up) starts only while it holds
// the schedule's claim (call_job, call_until on the schedule's row), so
// that two never overlap. The claim is taken when no other job holds it
// or the holder's hold has passed (a process killed mid-call holds no
// one back for longer than its call could last), and given back by
// releaseCall. One statement, on rows the call reads anyway: a look at
// River's running jobs on every call (its state-leading index churns
// with every job's start and end) cost 5-6 ms a call at 333 calls a
// second, most of two cores, and made BenchmarkServeFleet's calls late.
func (s *Server) claimCall(ctx context.Context, id uuid.UUID, jobID int64, hold time.Duration) (made int, claimed bool, err error) {
	err = s.cfg.Pool.QueryRow(ctx, `WITH c AS (
	UPDATE `+s.schedules+` SET call_job = $2, call_until = clock_timestamp() + $3 * interval '1 millisecond'
	WHERE id = $1 AND (call_job IS NULL OR call_job = $2 OR call_until < clock_timestamp())
	RETURNING 1)
SELECT (SELECT count(*) FROM `+s.calls+` WHERE job_id = $2 AND missed IS NULL), EXISTS (SELECT 1 FROM c)`,
		id, jobID, (hold+holdMargin+2*upstream.MaxDelay).Milliseconds()).Scan(&made, &claimed)
	if err != nil {
		return 0, false, fmt.Errorf("error claiming schedule %s's call: %w", id, err)
	}
	return made, claimed, nil
}

// releaseCall gives back the claim job took with claimCall (if it still
// holds it).
func (s *Server) releaseCall(ctx context.Context, id uuid.UUID, jobID int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Pool.Exec(rctx, `UPDATE `+s.schedules+` SET call_job = NULL, call_until = NULL WHERE id = $1 AND call_job = $2`, id, jobID); err != nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not give back a schedule's call; it frees itself after the call's timeout",
			slog.String("schedule", id.String()), slog.Int64("job_id", jobID), slog.String("error", err.Error()))
	}
}

// nextPlace returns the schedule id's next place after now in the task
// info.
func nextPlace(info riverslot.TaskInfo, id uuid.UUID, now time.Time) time.Time {
	next := info.Due(info.Schedule.Start(now), id)
	if !next.After(now) {
		next = info.Due(info.Schedule.Next(info.Schedule.Start(now)), id)
	}
	return next
}
