package riverutil

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/syncjob"
)

// Bounds of Cycles' limit.
const (
	CyclesLimitDefault = 24
	CyclesLimitMax     = 200
)

// CycleSummary is how one cycle of a task went, from what its jobs carry.
type CycleSummary struct {
	CycleStart time.Time
	Plan       string
	Slots      int
	SlotsDone  int
	// FailedSlots are the slots whose fan-out failed for good (discarded
	// or cancelled); MissingSlots those without a per-slot job.
	FailedSlots, MissingSlots []int
	// Selected is the accounts the cycle's fan-outs selected (Enqueued plus
	// SkippedLate); Enqueued the sync jobs they inserted; SkippedLate the
	// late accounts they skipped (the next cycle covers them).
	Selected, Enqueued, SkippedLate int64
	// Sync jobs of the cycle: Unfinished (pending, running or retryable),
	// Failed (discarded or cancelled), SkippedStale and SkippedTooSoon
	// (completed without calling Sync), each counted up to SkippedCountMax.
	Unfinished, Failed, SkippedStale, SkippedTooSoon int64
	// Synced is Enqueued less Unfinished, Failed and SkippedStale: the
	// accounts whose Sync ran (or, for SkippedTooSoon, had run less than
	// half a cycle before).
	Synced int64
	// NotSelected estimates the accounts of failed or missing slots that
	// their fan-out never reached: the accounts the same slot selected in
	// the nearest listed cycle where its fan-out finished, less what it
	// enqueued here.
	NotSelected int64
	// Covered is the accounts the cycle's fan-outs left to an overlapping
	// cycle (of another plan or grid, after a plan change) that syncs
	// them less than half a cycle away: not missed.
	Covered int64
	// Missed is SkippedLate + SkippedStale + Failed + NotSelected: accounts
	// the cycle did not sync. Coverage is (Synced + Covered) / (Selected +
	// NotSelected), the share of accounts synced within their cycle, by it
	// or by the cycle it left them to (1 for a cycle with no account).
	Missed   int64
	Coverage float64
	// Duplicates is the sync jobs the fan-outs enqueued beyond the accounts
	// they selected (0 when every batch committed once).
	Duplicates int64
	// Lateness of the cycle's completed sync jobs (started after their
	// scheduled time), from a sample of up to 2,000 spread over the cycle.
	// LatenessKnown is false when River keeps none of the cycle's
	// completed sync jobs (its retention deleted them): the lateness is
	// unknown, not zero.
	LatenessP50, LatenessP99 time.Duration
	LatenessSample           int
	LatenessKnown            bool
	// Finished: the cycle has ended and none of its slots or sync jobs is
	// still to run.
	Finished bool
}

// Cycles returns the named task's most recent cycles, newest first, at most
// limit (CyclesLimitDefault when 0, at most CyclesLimitMax), as riverslot's
// ledger records them (for 4 cycles + 1 h of each cycle's plan), whatever
// River has deleted: every plan's cycle, its slots' states and what each
// fan-out did. Its sync job figures (unfinished, failed, skipped, lateness)
// cover the sync jobs River still keeps; lateness is unknown
// (LatenessKnown false) once River deleted them all. It never reads the accounts table
// and never lists a cycle's sync jobs: its figures come from the per-slot
// jobs' results, River's indexes on job state and metadata, and a bounded
// sample for lateness.
func (s *Scheduler) Cycles(ctx context.Context, taskName string, limit int) ([]CycleSummary, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	switch {
	case limit == 0:
		limit = CyclesLimitDefault
	case limit < 0 || limit > CyclesLimitMax:
		return nil, fmt.Errorf("limit must be between 1 and %d, got %d", CyclesLimitMax, limit)
	}
	return s.cycleHistory(ctx, spec, limit, time.Now())
}

// historyCountsSQL counts, each up to $6, a cycle's ($2 task, $3 cycle
// start) unfinished sync jobs (River's fetching index), failed ones
// finalized since $4 (its finalized_at index) and those completed without
// calling Sync as stale ($7) or too soon ($8) (its metadata GIN index; $5
// is syncjob.OutputSkipped).
const historyCountsSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE state IN ('scheduled', 'available', 'pending', 'running', 'retryable')
		AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $6) u),
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE state IN ('discarded', 'cancelled') AND finalized_at >= $4
		AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $6) f),
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE metadata @> jsonb_build_object('` + rivertype.MetadataKeyOutput + `', jsonb_build_object($5::text, $7::text))
		AND state = 'completed' AND finalized_at >= $4 AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $6) stale),
	(SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE metadata @> jsonb_build_object('` + rivertype.MetadataKeyOutput + `', jsonb_build_object($5::text, $8::text))
		AND state = 'completed' AND finalized_at >= $4 AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $6) too_soon)`

// historyLatenessSQL samples a cycle's ($2 task, $3 cycle start) completed
// sync jobs: from each window start of $4 (spread over the cycle), the
// first $5 finalized before the next ($6, same length) among the first $7
// completed jobs of any kind and task finalized there, each window a short
// range of River's (state, finalized_at) index. The inner bound keeps a
// page view's cost fixed whatever River keeps of other tasks: without it a
// window with none of the cycle's jobs (River deleted them, or the cycle
// left every account to another) read every job finalized in it.
const historyLatenessSQL = `SELECT count(*),
	coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY l), 0)::float8,
	coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY l), 0)::float8
	FROM unnest($4::timestamptz[], $6::timestamptz[]) w(since, until) CROSS JOIN LATERAL (
		SELECT extract(epoch FROM attempted_at - scheduled_at) AS l FROM (
			SELECT attempted_at, scheduled_at, kind, args FROM %s
			WHERE state = 'completed' AND finalized_at >= w.since AND finalized_at < w.until
			ORDER BY finalized_at LIMIT $7) window_jobs
		WHERE kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3
		LIMIT $5) s`

// historyLatenessScan bounds the completed jobs historyLatenessSQL reads
// per window: 16 windows of 1,000, 16,000 index entries a cycle.
const historyLatenessScan = 1000

// latenessWindows is how many windows historyLatenessSQL samples a cycle
// in, latenessSample/latenessWindows jobs each.
const latenessWindows = 16

// cycleHistory returns the task's last limit cycles, newest first, as of
// now. It is the one place history is read: from River's job table and
// riverslot's ledger (cycles and slots whose jobs River deleted).
func (s *Scheduler) cycleHistory(ctx context.Context, spec *taskspec.Spec, limit int, now time.Time) ([]CycleSummary, error) {
	table := s.riverTable(spec)
	led := s.ledger()
	// The cycles, from the ledger alone: every plan's cycle is listed
	// (after a plan change, two start together; each says what it did).
	recorded, err := led.Cycles(ctx, s.pool, spec.Name, time.Time{}, now.Add(100*365*24*time.Hour), limit)
	if err != nil {
		return nil, err
	}
	type cycleRef struct {
		plan  string
		start time.Time
		spec  *taskspec.Spec
	}
	cycles := make([]cycleRef, len(recorded))
	out := make([]CycleSummary, len(recorded))
	for i, r := range recorded {
		cs, err := planSpec(spec, r.Plan, r.Start)
		if err != nil {
			return nil, err
		}
		cycles[i] = cycleRef{plan: r.Plan.String(), start: r.Start, spec: cs}
		out[i] = CycleSummary{CycleStart: r.Start, Plan: r.Plan.String(), Slots: cs.Plan.Slots}
	}

	// Per-slot results of every listed cycle, from the ledger; River's job
	// table only says whether a slot not finished can still run.
	selected := make([][]int64, len(out)) // per cycle and slot, -1 when unknown
	states := make([][]string, len(out))
	for i := range out {
		c := &out[i]
		selected[i] = slices.Repeat([]int64{-1}, c.Slots)
		states[i] = slices.Repeat([]string{SlotMissing}, c.Slots)
		slots, err := led.Slots(ctx, s.pool, spec.Name, c.Plan, c.CycleStart)
		if err != nil {
			return nil, err
		}
		var pending []int64
		for _, r := range slots {
			if r.Finished == nil && r.FailedAt == nil && r.JobID != 0 {
				pending = append(pending, r.JobID)
			}
		}
		jobStates, err := led.JobStates(ctx, s.pool, pending)
		if err != nil {
			return nil, err
		}
		for slot, r := range slots {
			if slot < 0 || slot >= c.Slots {
				continue
			}
			if r.Finished == nil {
				switch jobStates[r.JobID] {
				case "", "cancelled", "discarded":
					// Recorded as failed, or its job is gone or ended
					// without finishing the fan-out.
					c.FailedSlots = append(c.FailedSlots, slot)
					states[i][slot] = SlotFailed
				default:
					states[i][slot] = SlotScheduled
				}
				// What its committed batches did, as they recorded it (as
				// Status counts it): their sync jobs exist.
				c.Enqueued += r.Inserted
				c.SkippedLate += r.LateSkipped
				c.Covered += max(r.Skipped-r.LateSkipped, 0)
				c.Selected += r.Accounts
				selected[i][slot] = r.Accounts
				continue
			}
			sel := max(r.Accounts, r.Inserted+r.Skipped)
			if r.Accounts > 0 && r.Inserted+r.Skipped > r.Accounts {
				c.Duplicates += r.Inserted + r.Skipped - r.Accounts
				sel = r.Accounts
			}
			c.SlotsDone++
			c.Enqueued += r.Inserted
			c.SkippedLate += r.LateSkipped
			c.Covered += max(r.Skipped-r.LateSkipped, 0)
			c.Selected += sel
			states[i][slot], selected[i][slot] = SlotDone, sel
		}
	}

	for i := range out {
		c, cs := &out[i], cycles[i].spec
		key := c.CycleStart.Format(time.RFC3339Nano)
		slices.Sort(c.FailedSlots)
		for slot, st := range states[i] {
			if st == SlotMissing {
				c.MissingSlots = append(c.MissingSlots, slot)
			}
			if st != SlotMissing && st != SlotFailed {
				continue
			}
			// The nearest listed cycle of the same plan where the slot
			// finished.
			for d := 1; d < len(out); d++ {
				j := -1
				for _, k := range []int{i - d, i + d} {
					if k >= 0 && k < len(out) && out[k].Plan == c.Plan && states[k][slot] == SlotDone {
						j = k
						break
					}
				}
				if j >= 0 {
					c.NotSelected += max(selected[j][slot]-max(selected[i][slot], 0), 0)
					break
				}
			}
		}
		if err := s.pool.QueryRow(ctx, fmt.Sprintf(historyCountsSQL, table), syncjob.Kind, spec.Name, key, c.CycleStart.Add(-cs.Plan.Cycle),
			syncjob.OutputSkipped, SkippedCountMax, syncjob.SkippedStale, syncjob.SkippedTooSoon).
			Scan(&c.Unfinished, &c.Failed, &c.SkippedStale, &c.SkippedTooSoon); err != nil {
			return nil, fmt.Errorf("error counting the sync jobs of cycle %s: %w", key, err)
		}
		c.Synced = max(c.Enqueued-c.Unfinished-c.Failed-c.SkippedStale, 0)
		c.Missed = c.SkippedLate + c.SkippedStale + c.Failed + c.NotSelected
		c.Coverage = 1
		if all := c.Selected + c.NotSelected; all > 0 {
			c.Coverage = float64(c.Synced+c.Covered) / float64(all)
		}
		end := cs.CycleEnd(c.CycleStart)
		c.Finished = now.After(end) && c.Unfinished == 0 && c.SlotsDone+len(c.FailedSlots) == c.Slots

		// Lateness: a sample spread over the cycle and the half cycle
		// after it (late syncs finish then).
		span := end.Sub(c.CycleStart) + cs.Plan.Cycle/2
		since := make([]time.Time, latenessWindows)
		until := make([]time.Time, latenessWindows)
		for w := range since {
			since[w] = c.CycleStart.Add(span * time.Duration(w) / latenessWindows)
			until[w] = c.CycleStart.Add(span * time.Duration(w+1) / latenessWindows)
		}
		var p50, p99 float64
		if err := s.pool.QueryRow(ctx, fmt.Sprintf(historyLatenessSQL, table), syncjob.Kind, spec.Name, key, since,
			latenessSample/latenessWindows, until, historyLatenessScan).Scan(&c.LatenessSample, &p50, &p99); err != nil {
			return nil, fmt.Errorf("error sampling the lateness of cycle %s: %w", key, err)
		}
		c.LatenessP50 = time.Duration(p50 * float64(time.Second))
		c.LatenessP99 = time.Duration(p99 * float64(time.Second))
		c.LatenessKnown = c.LatenessSample > 0
	}
	return out, nil
}
