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
	// MissedServerDown: the service was not there at the call's place: no
	// process started the period (it was down, or electing a leader, when
	// the period began), or the period started and the call could start
	// only well after its place (Config.CatchUpAfter) while its schedule's
	// catch_up is CatchUpSkip, or only less than half a period before the
	// next call, which covers it.
	MissedServerDown = "server_down"
	// MissedFanOutLate: the period started, but its slot's fan-out came too
	// late to queue the call (the service was down or behind at its
	// place).
	MissedFanOutLate = "fan_out_late"
	// MissedLate: the call was queued but could only start less than half
	// a period before the next one, which covers it.
	MissedLate = "late"
	// MissedUpstreamPaused: its upstream's pause (a 429, or a 503 with
	// Retry-After) or rate limit held it past that time; a retry held by
	// the pause its own call's answer asked for too.
	MissedUpstreamPaused = "upstream_paused"
	// MissedUpstreamDown: its upstream's circuit breaker held it past that
	// time.
	MissedUpstreamDown = "upstream_down"
	// MissedQuota: its tenant's max_calls_per_second had no room for it
	// before that time (the tenant's other calls, retries and triggered
	// calls took the quota).
	MissedQuota = "tenant_quota"
)

// A schedule's catch_up: what a call the service was not there to make
// at its place brings, whether no process started its period or the
// service came back mid-period (the call could start only more than
// Config.CatchUpAfter after its place).
const (
	// CatchUpSkip (the default): no call, a history entry
	// MissedServerDown; the next call comes at its place.
	CatchUpSkip = "skip"
	// CatchUpOne: one call as soon as the service is back, with the
	// period's webhook-id, then the places as usual. Back mid-period, the
	// late call is made as the service is back (riverslot's late policy
	// spreads a late fan-out's calls over the time its slot is late), not
	// when it could start only less than half a period before the next
	// call (then an entry MissedServerDown). For a period no process
	// started, the call comes when the service knows (RecordMissed:
	// within a sweep of the period's end, at the latest); none when the
	// schedule's next place is nearer than its timeout and a second, so
	// that the two never overlap.
	CatchUpOne = "one"
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
// entry with its reason. A retry skipped as stale after its call got a
// 429 (or a 503 with Retry-After) is MissedUpstreamPaused: the pause it
// asked for held it past the time it could be made. A call skipped as stale (it could start only
// less than half a period before the next) because the service was not
// there at its place (absentAtPlace) is MissedServerDown, whatever its
// catch_up: the next call covers it.
func (s *Server) skipped(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs], reason string) {
	missed := missedReason(reason)
	if reason == riverslot.SkippedStale {
		// A retry of a call its upstream asked to slow down (429, or 503
		// with Retry-After): the pause it asked for held it.
		var throttled bool
		if err := s.cfg.Pool.QueryRow(ctx, `SELECT coalesce((SELECT status IN (429, 503) FROM `+s.calls+`
	WHERE job_id = $1 AND missed IS NULL ORDER BY started_at DESC LIMIT 1), false)`, job.ID).Scan(&throttled); err != nil {
			s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not read a skipped call's last answer; its entry says late", slog.String("schedule", id.String()), slog.String("error", err.Error()))
		}
		if throttled {
			s.recordMiss(ctx, id, job, MissedUpstreamPaused)
			return
		}
		l, err := s.load(ctx, id)
		info, ok := s.tasks[time.Duration(l.periodMS)*time.Millisecond]
		if err == nil && ok && info.Name == job.Args.Task {
			length := info.Schedule.Next(job.Args.CycleStart).Sub(job.Args.CycleStart)
			if s.absentAtPlace(job, l, info.Due(job.Args.CycleStart, id), length) {
				missed = MissedServerDown
			}
		}
	}
	s.recordMiss(ctx, id, job, missed)
}

// recordMiss writes the history entry of job's call of schedule id, not
// made for reason (a Missed... constant).
func (s *Server) recordMiss(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs], reason string) {
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
		id, job.Args.CycleStart, job.ID, job.Attempt, due, reason)
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
// ended did not make, and had no entry for: a schedule that existed, and
// was last changed, before its place's fan-out, not deleted before the
// period ended, not paused, without a call or a recorded skip. A period no process started
// (riverslot's ledger has no cycle for it) is MissedServerDown, known at
// its end (no bootstrap comes for an ended period): its schedules with
// catch_up "one" are each called once at once (CatchUpOne). A period
// started is MissedFanOutLate for the calls it did not make, once half a
// period (the longest a call may be late) and 30 s (at most another half
// period) are past its end. It looks at the last 4 ended periods, not at
// periods before the first one any process started (nothing was promised
// then). It returns the entries written. Servers call it every few
// seconds (riverslot serve does); it is idempotent, and two servers
// running it at once write each entry, and queue each catch-up, once.
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
	// The periods ended, newest first: one no process started is known
	// missed at its end (no bootstrap comes for an ended period); one
	// started is done once its late calls could still come no more.
	var done []time.Time
	for c := info.Schedule.Start(now); len(done) < missedLookback; {
		c = info.Schedule.Start(c.Add(-time.Nanosecond))
		if end := info.Schedule.Next(c); now.After(end.Add(time.Second)) {
			done = append(done, c)
		}
	}
	s.missedMu.Lock()
	var todo []time.Time
	for _, c := range done {
		if !s.missedDone[info.Name][c] {
			todo = append(todo, c)
		}
	}
	s.missedMu.Unlock()
	if len(todo) == 0 {
		return 0, nil
	}
	markDone := func(c time.Time) {
		s.missedMu.Lock()
		defer s.missedMu.Unlock()
		if s.missedDone == nil {
			s.missedDone = map[string]map[time.Time]bool{}
		}
		m := s.missedDone[info.Name]
		if m == nil {
			m = map[time.Time]bool{}
			s.missedDone[info.Name] = m
		}
		m[c] = true
		for k := range m {
			if k.Before(done[len(done)-1]) {
				delete(m, k) // older than the sweep looks
			}
		}
	}
	// The task's latest cycles up to the newest period looked at: more
	// than the periods looked at, so the oldest read is before them unless
	// the ledger holds no earlier one.
	cycles, err := s.ledger.Cycles(ctx, s.cfg.Pool, info.Name, time.Time{}, todo[0].Add(time.Millisecond), 4*missedLookback)
	if err != nil {
		return 0, fmt.Errorf("error reading the cycles of %s: %w", info.Name, err)
	}
	started := map[time.Time]bool{}
	var first time.Time
	for _, c := range cycles {
		started[c.Start.UTC()] = true
		if first.IsZero() || c.Start.Before(first) {
			first = c.Start
		}
	}
	var (
		total  int64
		caught = map[uuid.UUID]bool{} // schedules caught up by this sweep
	)
	for _, c := range todo {
		if first.IsZero() || c.Before(first) {
			markDone(c) // before any process ran the task: nothing was promised
			continue
		}
		reason := MissedServerDown
		if started[c.UTC()] {
			reason = MissedFanOutLate
			if end := info.Schedule.Next(c); !now.After(end.Add(end.Sub(c)/2 + min(30*time.Second, end.Sub(c)/2))) {
				continue // started: its late calls may still come; looked at again later
			}
		}
		n, full, err := s.recordMissedOf(ctx, period, info, c, reason, now, caught)
		total += n
		if err != nil {
			return total, err
		}
		if full {
			return total, nil // the rest at the next sweep
		}
		markDone(c)
	}
	return total, nil
}

// recordMissedOf writes the entries of the period starting at c and, for
// MissedServerDown, queues the catch-up calls (one per schedule a sweep,
// caught holding those queued); full reports that it wrote missedBatch
// (more may be left).
func (s *Server) recordMissedOf(ctx context.Context, period time.Duration, info riverslot.TaskInfo, c time.Time, reason string, now time.Time, caught map[uuid.UUID]bool) (int64, bool, error) {
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
	rows, err := tx.Query(ctx, `SELECT s.id, s.tenant_id, s.created_at, s.updated_at, s.catch_up, s.timeout_ms, s.retries FROM `+s.schedules+` s
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
		catchUps     []river.InsertManyParams
		id, tenant   uuid.UUID
		created      time.Time
		updated      time.Time
		catchUp      string
		timeoutMS    int64
		retries      int
		seen         int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &tenant, &created, &updated, &catchUp, &timeoutMS, &retries}, func() error {
		seen++
		// Made after its place's fan-out ran: first called in the next
		// period, as promised. Changed since (paused and resumed, moved
		// to this period): what it was at its place is not known, and no
		// miss is claimed.
		if fanOut := info.SlotStartOf(c, id).Add(-info.Lead); !created.Before(fanOut) || !updated.Before(fanOut) {
			return nil
		}
		ids, tenants, dues = append(ids, id), append(tenants, tenant), append(dues, info.Due(c, id))
		if reason == MissedServerDown && catchUp == CatchUpOne && !caught[id] {
			caught[id] = true
			// Not when its next place is nearer than a call takes: the two
			// would overlap, and the place's call covers the period.
			if next := nextPlace(info, id, now); next.Sub(now) > time.Duration(timeoutMS)*time.Millisecond+time.Second {
				catchUps = append(catchUps, river.InsertManyParams{Args: TriggerArgs{Schedule: id, At: now.UTC(), Period: c.UTC()},
					InsertOpts: &river.InsertOpts{Queue: callsQueue, MaxAttempts: retries + 1, UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: triggerEvery}}})
			}
		}
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
	if len(catchUps) > 0 {
		if _, err := s.inserter.InsertManyTx(ctx, tx, catchUps); err != nil {
			return 0, false, fmt.Errorf("error queuing the catch-up calls of %s: %w", info.Name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, err
	}
	if tag.RowsAffected() > 0 {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: calls missed", slog.String("task", info.Name), slog.Time("period", c),
			slog.Int64("calls", tag.RowsAffected()), slog.String("reason", reason), slog.Int("caught_up", len(catchUps)))
	}
	return tag.RowsAffected(), seen == missedBatch, nil
}
