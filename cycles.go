package riverslot

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
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
	// SlotsElsewhere are, for a sharded task, the cycle's slots the shard
	// map its bootstrap followed gives other shards: served there (their
	// accounts counted in that shard's history), neither missing nor
	// missed here. Slots counts them.
	SlotsElsewhere int
	// FailedSlots are the slots whose fan-out failed for good (discarded
	// or cancelled); MissingSlots those of this shard without a per-slot
	// job.
	FailedSlots, MissingSlots []int
	// Selected is the accounts the cycle's fan-outs selected (Enqueued plus
	// SkippedLate); Enqueued the sync jobs they inserted; SkippedLate the
	// late accounts they skipped (the next cycle covers them).
	Selected, Enqueued, SkippedLate int64
	// Sync jobs of the cycle: Unfinished (pending, running or retryable,
	// from River's job table), and how the others ended, as the nodes that
	// ran them counted them in the cycle's ledger row: Failed (their last
	// attempt failed, or cancelled), SkippedStale (started past their
	// NotAfter) and SkippedUpstream (no room with their upstream before
	// their NotAfter), completed without calling Sync.
	Unfinished, Failed, SkippedStale, SkippedUpstream int64
	// Synced is the sync jobs that called Sync, or found their account
	// gone or filtered out (nothing to sync).
	Synced int64
	// Uncounted is the sync jobs that ended without being counted: Enqueued
	// less Unfinished and every counted end (a cycle run before the ledger
	// counted ends, or counts lost with a killed node). They are neither
	// synced nor missed: Coverage leaves them out.
	Uncounted int64
	// NotSelected estimates the accounts of failed or missing slots that
	// their fan-out never reached: the accounts the same slot selected in
	// the nearest listed cycle where its fan-out finished, less what it
	// enqueued here.
	NotSelected int64
	// Covered is the accounts the cycle's fan-outs left to an overlapping
	// cycle (of another plan or grid, after a plan change) that syncs
	// them less than half a cycle away: not missed.
	Covered int64
	// Missed is SkippedLate + SkippedStale + SkippedUpstream + Failed +
	// NotSelected: accounts
	// the cycle did not sync. Coverage is (Synced + Covered) / (Selected +
	// NotSelected - Uncounted), at most 1: the share of the accounts whose
	// end is known that were synced within their cycle, by it or by the
	// cycle it left them to (1 for a cycle with no such account).
	Missed   int64
	Coverage float64
	// Duplicates is the sync jobs the fan-outs enqueued beyond the accounts
	// they selected (0 when every batch committed once).
	Duplicates int64
	// Lateness of the cycle's synced syncs (started after their scheduled
	// time), from the histogram of its ledger row (buckets 26% wide,
	// interpolated). LatenessKnown is false when the row counts none (a
	// cycle before the ledger counted outcomes, or with no sync yet): the
	// lateness is unknown, not zero.
	LatenessP50, LatenessP99 time.Duration
	LatenessSample           int64
	LatenessKnown            bool
	// Finished: the cycle has ended and none of its slots or sync jobs is
	// still to run.
	Finished bool
}

// Cycles returns the named task's most recent cycles, newest first, at most
// limit (CyclesLimitDefault when 0, at most CyclesLimitMax), as riverslot's
// ledger records them (for 4 cycles + 1 h of each cycle's plan), whatever
// River has deleted: every plan's cycle, its slots' states, what each
// fan-out did and how the cycle's sync jobs ended. It reads the ledger by
// key, River's job table only for the cycles' unfinished sync jobs (River's
// fetching index) and per-slot jobs (by id), and never the accounts table.
func (s *Scheduler) Cycles(ctx context.Context, taskName string, limit int) ([]CycleSummary, error) {
	spec, limit, err := s.readSpec(taskName, limit, CyclesLimitDefault, CyclesLimitMax)
	if err != nil {
		return nil, err
	}
	return s.cycleHistory(ctx, spec, limit, time.Now())
}

// historyUnfinishedMax bounds the count of a cycle's unfinished sync jobs.
const historyUnfinishedMax = 1_000_000

// cycleHistory returns the task's last limit cycles, newest first, as of
// now. It is the one place history is read: from River's job table and
// riverslot's ledger (cycles and slots whose jobs River deleted).
func (s *Scheduler) cycleHistory(ctx context.Context, spec *taskspec.Spec, limit int, now time.Time) ([]CycleSummary, error) {
	led := s.ledger()
	// The cycles, from the ledger alone: every plan's cycle is listed
	// (after a plan change, two start together; each says what it did).
	recorded, err := led.Cycles(ctx, s.pool, spec.Name, time.Time{}, now.Add(100*365*24*time.Hour), limit)
	if err != nil {
		return nil, err
	}
	type cycleRef struct {
		plan     string
		start    time.Time
		spec     *taskspec.Spec
		outcomes ledger.Outcomes
	}
	cycles := make([]cycleRef, len(recorded))
	out := make([]CycleSummary, len(recorded))
	selected := make([][]int64, len(out)) // per cycle and slot, -1 when unknown
	states := make([][]string, len(out))
	maps := map[int64]*ledger.ShardMap{}
	for i, r := range recorded {
		cs, err := planSpec(spec, r.Plan, r.Start)
		if err != nil {
			return nil, err
		}
		cycles[i] = cycleRef{plan: r.Plan.String(), start: r.Start, spec: cs, outcomes: r.Outcomes}
		c := &out[i]
		*c = CycleSummary{CycleStart: r.Start, Plan: r.Plan.String(), Slots: cs.Slots(r.Start)}
		selected[i] = slices.Repeat([]int64{-1}, c.Slots)
		states[i] = slices.Repeat([]string{SlotMissing}, c.Slots)
		// A sharded task's cycle: the slots the map its bootstrap followed
		// gives other shards are theirs, not missing here (after a move,
		// a moved range is counted by the shard that served it then).
		if r.Shard == "" {
			continue
		}
		m, ok := maps[r.ShardVersion]
		if !ok {
			found, sharded, err := led.ShardMapVersion(ctx, s.pool, spec.Name, r.ShardVersion)
			if err != nil {
				return nil, err
			}
			if sharded {
				m = &found
			}
			maps[r.ShardVersion] = m
		}
		if m == nil {
			continue
		}
		for slot := range c.Slots {
			if m.SlotOwner(cs.Plan, cs.Shift, slot) != r.Shard {
				states[i][slot] = SlotElsewhere
				c.SlotsElsewhere++
			}
		}
	}

	// Per-slot results of every listed cycle, from the ledger; River's job
	// table only says whether a slot not finished can still run.
	for i := range out {
		c := &out[i]
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
		jobs, err := riverjob.ByID(ctx, s.pool, s.riverSchema, pending)
		if err != nil {
			return nil, err
		}
		for slot, r := range slots {
			if slot < 0 || slot >= c.Slots || states[i][slot] == SlotElsewhere {
				continue
			}
			if r.Finished == nil {
				switch jobs[r.JobID].State {
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
		unfinished, err := syncjob.CountUnfinished(ctx, s.pool, s.riverSchema, spec.Name, c.CycleStart, historyUnfinishedMax)
		if err != nil {
			return nil, err
		}
		c.Unfinished = unfinished.Total()
		o := &cycles[i].outcomes
		c.Failed = o.Failed() + o.Cancelled()
		c.SkippedStale, c.SkippedUpstream = o.Stale(), o.Upstream()
		c.Synced = o.Synced() + o.Gone()
		c.Missed = c.SkippedLate + c.SkippedStale + c.SkippedUpstream + c.Failed + c.NotSelected
		c.Uncounted = max(c.Enqueued-c.Unfinished-o.Ended(), 0)
		c.Coverage = 1
		if all := c.Selected + c.NotSelected - c.Uncounted; all > 0 {
			c.Coverage = min(float64(c.Synced+c.Covered)/float64(all), 1)
		}
		end := cs.CycleEnd(c.CycleStart)
		c.Finished = now.After(end) && c.Unfinished == 0 && c.SlotsDone+len(c.FailedSlots)+c.SlotsElsewhere == c.Slots
		c.LatenessSample = o.Lateness.Count()
		c.LatenessP50, c.LatenessKnown = o.Lateness.Quantile(0.5)
		c.LatenessP99, _ = o.Lateness.Quantile(0.99)
	}
	return out, nil
}

// readSpec is the preamble of a read of a task's history: the task's
// spec, once Configure has named River's schema, and limit (0: def) when
// it is between 1 and max.
func (s *Scheduler) readSpec(taskName string, limit, def, max int) (*taskspec.Spec, int, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, 0, err
	}
	if !s.configured {
		return nil, 0, errNoRiverSchema
	}
	switch {
	case limit == 0:
		limit = def
	case limit < 0 || limit > max:
		return nil, 0, fmt.Errorf("limit must be between 1 and %d, got %d", max, limit)
	}
	return spec, limit, nil
}
