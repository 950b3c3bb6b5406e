package riverslot

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// Off slots: a done slot whose selected accounts differ from Expected by
// more than max(offSlotMin, Expected / offSlotDivisor).
const (
	offSlotMin     = 10
	offSlotDivisor = 10
)

func offSlot(selected, expected int64) bool {
	d := selected - expected
	if d < 0 {
		d = -d
	}
	return d > max(offSlotMin, expected/offSlotDivisor)
}

func (s *Scheduler) cycleStatus(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time, counts []int64, now time.Time) (*CycleStatus, error) {
	nSlots := spec.Slots(cycleStart)
	c := &CycleStatus{CycleStart: cycleStart, Slots: nSlots, Plan: spec.PlanID, NextSlot: -1, OffSlot: -1, FailedSlot: -1, PerSlot: make([]SlotStatus, nSlots)}
	for i := range c.PerSlot {
		c.PerSlot[i] = SlotStatus{Slot: i, Start: spec.SlotStart(cycleStart, i), State: SlotMissing}
		if c.NextSlot < 0 && c.PerSlot[i].Start.After(now) {
			c.NextSlot, c.NextSlotAt = i, c.PerSlot[i].Start
		}
	}

	// The cycle and its slots, from the ledger: what the bootstrap
	// decided (placement, pins) and each slot's state and figures. River's
	// job table is read only for the slots not finished, by their job's
	// primary key: is it queued, running, retrying, or gone?
	led := s.ledger()
	var (
		// outcomes are how the cycle's sync jobs ended, from its row.
		outcomes ledger.Outcomes
		// ref is the pins the cycle follows, as its bootstrap recorded
		// them; a cycle recorded before placements were (and a cycle not
		// bootstrapped yet) follows the task's configuration, as a
		// per-slot worker does.
		ref = spec.PinsRef()
	)
	rec, recorded, err := led.CycleRecord(ctx, s.pool, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return nil, err
	}
	// A sharded task's cycle: the map its bootstrap followed (or, before
	// it ran, the one in force) says which slots are this shard's.
	shardMap, sharded, err := led.ShardMapAt(ctx, s.pool, spec.Name, cycleStart)
	if recorded && rec.Shard != "" {
		shardMap, sharded, err = led.ShardMapVersion(ctx, s.pool, spec.Name, rec.ShardVersion)
	}
	if err != nil {
		return nil, err
	}
	if sharded {
		c.Shard, c.ShardVersion = cmp.Or(rec.Shard, s.shard), shardMap.Version
		for i := range c.PerSlot {
			if shardMap.SlotOwner(spec.Plan, spec.Shift, i) != c.Shard {
				c.PerSlot[i].State = SlotElsewhere
				c.SlotsElsewhere++
			}
		}
	}
	if recorded {
		outcomes = rec.Outcomes
		c.PinsFallback = rec.Fallback
		switch rec.Placement {
		case perslot.PlacementHash:
			ref = nil
		case perslot.PlacementPinned:
			if rec.Pins != nil && rec.Pins.Task != "" && rec.Pins.Plan != "" {
				ref = rec.Pins
			}
		}
	}
	slots, err := led.Slots(ctx, s.pool, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return nil, err
	}
	var pending []int64
	for _, r := range slots {
		if r.Finished == nil && r.JobID != 0 {
			pending = append(pending, r.JobID)
		}
	}
	jobs, err := riverjob.ByID(ctx, s.pool, s.riverSchema, pending)
	if err != nil {
		return nil, fmt.Errorf("error reading the cycle's unfinished per-slot jobs: %w", err)
	}
	for slot, r := range slots {
		if slot < 0 || slot >= len(c.PerSlot) || c.PerSlot[slot].State == SlotElsewhere {
			continue
		}
		p := &c.PerSlot[slot]
		p.jobID = r.JobID
		if r.Finished != nil {
			p.State = SlotDone
			p.Enqueued, p.Skipped, p.Batches = r.Inserted, r.Skipped, r.Batches
			c.SlotsDone++
			c.Enqueued += p.Enqueued
			c.Skipped += p.Skipped
			if j, ok := jobs[r.JobID]; ok {
				p.Attempts = j.Attempt
			}
			continue
		}
		j, ok := jobs[r.JobID]
		switch {
		case !ok:
			p.State = SlotFailed
			p.Error = r.Error
			if p.Error == "" {
				p.Error = fmt.Sprintf("per-slot job %d is no longer in River's job table and never finished its fan-out (cancelled or discarded, then deleted by River's retention)", r.JobID)
			}
		case j.State == "discarded" || j.State == "cancelled":
			p.State, p.Error = SlotFailed, cmp.Or(j.LastError, r.Error)
		case j.State == "running" || j.State == "retryable":
			p.State, p.Error = SlotRunning, cmp.Or(j.LastError, r.Error)
		default:
			// Scheduled, or snoozed while it waits for the accounts
			// database: the ledger says why.
			p.State, p.Error = SlotScheduled, r.Error
		}
		if p.State != SlotFailed && r.Error != "" && c.WaitingError == "" {
			c.WaitingError = r.Error
		}
		if ok {
			p.Attempts = j.Attempt
		}
		// Progress so far, as its batches recorded it in the ledger.
		p.Enqueued, p.Skipped, p.Batches = r.Inserted, r.Skipped, r.Batches
		if p.State == SlotFailed {
			c.SlotsFailed++
			if c.FailedSlot < 0 || slot < c.FailedSlot {
				c.FailedSlot, c.FailedError = slot, p.Error
			}
		}
		c.Enqueued += p.Enqueued
		c.Skipped += p.Skipped
	}

	// The accounts each slot selects under the cycle's placement.
	c.Placement = PlacementHash
	if ref != nil {
		c.Placement, c.PinsTask, c.PinsShift = PlacementPinned, ref.Task, ref.Shift
	}
	if counts == nil { // from the jobs alone: see jobsExpected
		ref, counts = nil, make([]int64, nSlots)
	}
	in, out, err := s.pinMoves(ctx, spec, ref, cycleStart)
	if err != nil {
		if !taskspec.Unreachable(err) {
			return nil, err
		}
		in, out, c.AccountsError = nil, nil, accountsErrorText(err)
	}
	for i := range c.PerSlot {
		p := &c.PerSlot[i]
		if p.State == SlotElsewhere {
			continue // counted by its own shard
		}
		p.Expected = counts[i]
		if in != nil {
			p.PinnedIn, p.PinnedOut = in[i], out[i]
			p.Expected += in[i] - out[i]
		}
		c.AccountsExpected += p.Expected
	}

	// Unfinished sync jobs (few, by design: through River's fetching index)
	// and finished-but-failed ones (through its finalized_at index).
	unfinished, err := syncjob.CountUnfinished(ctx, s.pool, s.riverSchema, spec.Name, cycleStart, 0)
	if err != nil {
		return nil, err
	}
	c.Pending, c.Running, c.Retryable = unfinished.Pending, unfinished.Running, unfinished.Retryable
	c.Synced, c.Gone = outcomes.Synced(), outcomes.Gone()
	c.SkippedStale, c.SkippedUpstream = outcomes.Stale(), outcomes.Upstream()
	c.Completed = c.Synced + c.Gone + c.SkippedStale + c.SkippedUpstream
	c.Discarded, c.Cancelled = outcomes.Failed(), outcomes.Cancelled()
	c.LatenessSample = outcomes.Lateness.Count()
	c.LatenessP50, c.LatenessKnown = outcomes.Lateness.Quantile(0.5)
	c.LatenessP99, _ = outcomes.Lateness.Quantile(0.99)

	// Behind: slots past their middle whose fan-out has not finished. Off:
	// done slots that selected other accounts than the placement expects.
	for _, p := range c.PerSlot {
		if open(p) && !now.Before(p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot)/2)) {
			c.BehindSlots++
		}
		if p.State == SlotDone && offSlot(p.Enqueued+p.Skipped, p.Expected) {
			c.OffSlots++
			if c.OffSlot < 0 {
				c.OffSlot = p.Slot
			}
		}
	}
	switch {
	case c.FailedSlot >= 0:
		c.Verdict = fmt.Sprintf("failed slot %d: %s", c.FailedSlot, c.FailedError)
	case c.BehindSlots > 0 && c.WaitingError != "":
		c.Verdict = fmt.Sprintf("behind by %d slots: %s", c.BehindSlots, c.WaitingError)
	case c.BehindSlots > 0:
		c.Verdict = fmt.Sprintf("behind by %d slots", c.BehindSlots)
	case c.OffSlots > 0:
		p := c.PerSlot[c.OffSlot]
		c.Verdict = fmt.Sprintf("slot %d selected %d accounts, %d expected (%d done slots off by more than max(%d, 1/%d))",
			p.Slot, p.Enqueued+p.Skipped, p.Expected, c.OffSlots, offSlotMin, offSlotDivisor)
	default:
		c.OnTrack, c.Verdict = true, "on track"
	}
	return c, nil
}

// open reports whether the slot's fan-out is this shard's and has not
// ended.
func open(p SlotStatus) bool {
	return p.State != SlotDone && p.State != SlotFailed && p.State != SlotElsewhere
}
