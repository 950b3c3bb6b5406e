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

// callState returns how many calls job made (missed entries aside), and
// whether another call of schedule id is in flight ahead of it: a running
// job of the schedule's that River started before this one (by
// attempted_at, then id), recently enough that its call may not have
// ended (twice its timeout and a margin: a job whose process was killed
// holds no one back for long). For a call at its place (ofTrigger false)
// only a triggered or caught-up call can be in flight (a period's calls
// never overlap each other); for those (ofTrigger true), a call at its
// place too. One statement.
func (s *Server) callState(ctx context.Context, id uuid.UUID, jobID int64, attemptedAt *time.Time, timeout time.Duration, ofTrigger bool) (made int, ahead bool, err error) {
	at := time.Now()
	if attemptedAt != nil {
		at = *attemptedAt
	}
	args := []any{jobID, id, riverslot.SyncArgs{}.Kind(), TriggerArgs{}.Kind(), (2 * (timeout + holdMargin)).Milliseconds(), at}
	// A call at its place, on every call: the running trigger jobs only,
	// by River's index on kind (triggers are rare), a few rows. A
	// triggered call (rare) also reads the running jobs of calls at their
	// places, MATERIALIZED first by River's state-leading fetch index (by
	// the args' GIN index it would read the schedule's every retained
	// job: 1,440 a day at one a minute).
	// The kind is written in the statement (a constant of this package,
	// not a value from outside): as a parameter, a generic plan would take
	// it for a common kind and read every running job instead.
	q := `SELECT (SELECT count(*) FROM ` + s.calls + ` WHERE job_id = $1 AND missed IS NULL),
	EXISTS (SELECT 1 FROM ` + s.jobs + ` j WHERE j.kind = '` + TriggerArgs{}.Kind() + `' AND j.state = 'running' AND j.id <> $1 AND j.args->>'schedule' = $2::text
		AND j.attempted_at > clock_timestamp() - $5 * interval '1 millisecond'
		AND (j.attempted_at, j.id) < ($6::timestamptz, $1::bigint) AND $3::text IS NOT NULL AND $4::text IS NOT NULL)`
	if ofTrigger {
		q = `WITH running AS MATERIALIZED (
		SELECT id, kind, args, attempted_at FROM ` + s.jobs + ` WHERE state = 'running' AND kind IN ($3, $4))
	SELECT (SELECT count(*) FROM ` + s.calls + ` WHERE job_id = $1 AND missed IS NULL),
	EXISTS (SELECT 1 FROM running j WHERE j.id <> $1
		AND (j.kind = $3 AND j.args->>'account_id' = $2::text OR j.kind = $4 AND j.args->>'schedule' = $2::text)
		AND j.attempted_at > clock_timestamp() - $5 * interval '1 millisecond'
		AND (j.attempted_at, j.id) < ($6::timestamptz, $1::bigint))`
	}
	if err := s.cfg.Pool.QueryRow(ctx, q, args...).Scan(&made, &ahead); err != nil {
		return 0, false, fmt.Errorf("error reading schedule %s's calls in flight: %w", id, err)
	}
	return made, ahead, nil
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
