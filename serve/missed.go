package serve

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
)

// Why a period's call of a schedule was not made: each miss is a history
// entry (a Call with Missed set) and counted in the stats.
const (
	// MissedServerDown: no process of the service started the period (it
	// was down, or electing a leader, when the period began).
	MissedServerDown = "server_down"
	// MissedFanOutLate: the period started, but its slot's fan-out came too
	// late to queue the call (the service was down or behind at its
	// place).
	MissedFanOutLate = "fan_out_late"
	// MissedLate: the call was queued but could only start less than half
	// a period before the next one, which covers it.
	MissedLate = "late"
	// MissedUpstreamPaused: its upstream's pause (a 429, or a 503 with
	// Retry-After) or rate limit held it past that time.
	MissedUpstreamPaused = "upstream_paused"
	// MissedUpstreamDown: its upstream's circuit breaker held it past that
	// time.
	MissedUpstreamDown = "upstream_down"
)

// missedReason is the reason of a riverslot skip.
func missedReason(skip string) string {
	switch skip {
	case riverslot.SkippedUpstreamThrottled:
		return MissedUpstreamPaused
	case riverslot.SkippedUpstreamDown:
		return MissedUpstreamDown
	}
	return MissedLate
}

// skipped is the tasks' OnSkip: a call riverslot skipped is a history
// entry with its reason.
func (s *Server) skipped(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs], reason string) {
	var due *time.Time
	for _, info := range s.tasks {
		if info.Name == job.Args.Task {
			d := info.Due(job.Args.CycleStart, id)
			due = &d
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := s.cfg.Pool.Exec(rctx, `INSERT INTO `+s.calls+` (schedule_id, tenant_id, period_ms, period_start, job_id, attempt, due_at, started_at, latency_ms, ok, missed)
SELECT id, tenant_id, period_ms, $2, $3, $4, $5, clock_timestamp(), 0, false, $6 FROM `+s.schedules+` WHERE id = $1`,
		id, job.Args.CycleStart, job.ID, job.Attempt, due, missedReason(reason))
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not record a missed call", slog.String("schedule", id.String()), slog.String("error", err.Error()))
	}
}

// missedBatch bounds the entries one sweep writes for one period: a
// server back from a long stop writes them over several sweeps.
const missedBatch = 10_000

// missedLookback is how many ended periods of each period a sweep looks
// at: a server back from a longer stop records the misses of the last
// ones only (and the ledger keeps 4 cycles + 1 h).
const missedLookback = 4

// RecordMissed writes a history entry for each call that a period which
// ended did not make, and had no entry for: a schedule that existed
// before its place's fan-out, not deleted before the period ended, not
// paused, without a call or a recorded skip. The reason is
// MissedServerDown when no process started the period (riverslot's
// ledger has no cycle for it), else MissedFanOutLate. A period is done
// half a period (the longest a call may be late) and 30 s (at most another
// half period) after its end;
// periods before the first one any process started are not looked at
// (nothing was promised then). It returns the entries written. Servers
// call it every few seconds (riverslot serve does); it is idempotent, and
// two servers running it at once write each entry once.
func (s *Server) RecordMissed(ctx context.Context) (int64, error) {
	return s.recordMissedAt(ctx, time.Now())
}

func (s *Server) recordMissedAt(ctx context.Context, now time.Time) (int64, error) {
	var total int64
	for period, info := range s.tasks {
		n, err := s.recordMissed(ctx, period, info, now)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (s *Server) recordMissed(ctx context.Context, period time.Duration, info riverslot.TaskInfo, now time.Time) (int64, error) {
	// The periods done, newest first.
	var done []time.Time
	for c := info.Schedule.Start(now); len(done) < missedLookback; {
		c = info.Schedule.Start(c.Add(-time.Nanosecond))
		end := info.Schedule.Next(c)
		if now.After(end.Add(end.Sub(c)/2 + min(30*time.Second, end.Sub(c)/2))) {
			done = append(done, c)
		}
	}
	s.missedMu.Lock()
	swept := s.missedSwept[info.Name]
	s.missedMu.Unlock()
	var todo []time.Time
	for _, c := range done {
		if c.After(swept) {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	cycles, err := s.scheduler.Cycles(ctx, info.Name, 2*missedLookback)
	if err != nil {
		return 0, fmt.Errorf("error reading the cycles of %s: %w", info.Name, err)
	}
	started := map[time.Time]bool{}
	var first time.Time
	for _, c := range cycles {
		started[c.CycleStart.UTC()] = true
		if first.IsZero() || c.CycleStart.Before(first) {
			first = c.CycleStart
		}
	}
	var total int64
	for _, c := range todo {
		if first.IsZero() || c.Before(first) {
			continue // before any process ran the task: nothing was promised
		}
		reason := MissedFanOutLate
		if !started[c.UTC()] {
			reason = MissedServerDown
		}
		n, full, err := s.recordMissedOf(ctx, period, info, c, reason)
		total += n
		if err != nil {
			return total, err
		}
		if full {
			return total, nil // the rest at the next sweep
		}
	}
	s.missedMu.Lock()
	if s.missedSwept == nil {
		s.missedSwept = map[string]time.Time{}
	}
	s.missedSwept[info.Name] = todo[0]
	s.missedMu.Unlock()
	return total, nil
}

// recordMissedOf writes the entries of the period starting at c; full
// reports that it wrote missedBatch (more may be left).
func (s *Server) recordMissedOf(ctx context.Context, period time.Duration, info riverslot.TaskInfo, c time.Time, reason string) (int64, bool, error) {
	end := info.Schedule.Next(c)
	tx, err := s.cfg.Pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// One sweep of a period at a time over the servers of the schema.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('riverslot serve missed ' || $1 || ' ' || $2))`, s.cfg.Schema, info.Name); err != nil {
		return 0, false, err
	}
	rows, err := tx.Query(ctx, `SELECT s.id, s.tenant_id, s.created_at FROM `+s.schedules+` s
WHERE s.period_ms = $1 AND s.created_at < $3 AND (s.deleted_at IS NULL OR s.deleted_at >= $3) AND NOT s.paused
AND NOT EXISTS (SELECT 1 FROM `+s.calls+` k WHERE k.schedule_id = s.id
	AND (k.period_start = $2 OR k.period_start IS NULL AND k.due_at >= $2 AND k.due_at < $3))
LIMIT $4`, period.Milliseconds(), c, end, missedBatch)
	if err != nil {
		return 0, false, fmt.Errorf("error finding the calls %s missed: %w", info.Name, err)
	}
	var (
		ids, tenants []uuid.UUID
		dues         []time.Time
		id, tenant   uuid.UUID
		created      time.Time
		seen         int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &tenant, &created}, func() error {
		seen++
		// Made after its place's fan-out ran: first called in the next
		// period, as promised.
		if !created.Before(info.SlotStartOf(c, id).Add(-info.Lead)) {
			return nil
		}
		ids, tenants, dues = append(ids, id), append(tenants, tenant), append(dues, info.Due(c, id))
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if len(ids) == 0 {
		return 0, seen == missedBatch, tx.Commit(ctx)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+s.calls+` (schedule_id, tenant_id, period_ms, period_start, attempt, due_at, started_at, latency_ms, ok, missed)
SELECT id, tenant, $3, $4, 0, due, due, 0, false, $5 FROM unnest($1::uuid[], $2::uuid[], $6::timestamptz[]) AS m(id, tenant, due)`,
		ids, tenants, period.Milliseconds(), c, reason, dues)
	if err != nil {
		return 0, false, fmt.Errorf("error recording the calls %s missed: %w", info.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, err
	}
	if tag.RowsAffected() > 0 {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: calls missed", slog.String("task", info.Name), slog.Time("period", c),
			slog.Int64("calls", tag.RowsAffected()), slog.String("reason", reason))
	}
	return tag.RowsAffected(), seen == missedBatch, nil
}
