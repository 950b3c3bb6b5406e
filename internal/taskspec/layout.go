package taskspec

import (
	"time"

	"github.com/riverslot/riverslot/slotplan"
)

// A cycle's layout: how many slots it has, when each starts and how long
// it lasts, which buckets each selects and when an account is due. A task
// of a fixed Cycle lays out every cycle alike (Plan); a calendar-month
// task (Month set) lays out each month by its own days, 28 to 31 of them,
// 23 to 25 hours long in a zone with DST. The tiers ask the spec, never
// Plan directly, for anything that depends on the cycle.

// monthlyPlan is the Plan of a calendar-month task: the longest month's
// shape (31 days of 24 hours, 65,536 buckets), as a bound for what sizes
// itself by a plan (the ledger's horizon, arrays of slots). A month's own
// layout comes from the spec's methods.
var monthlyPlan = slotplan.Plan{
	Cycle:          31 * 24 * time.Hour,
	Buckets:        slotplan.BucketsTwoByte,
	Slots:          31,
	SlotDuration:   24 * time.Hour,
	BucketsPerSlot: (slotplan.BucketsTwoByte + 30) / 31,
}

// Monthly reports whether the task's cycles are calendar months.
func (s *Spec) Monthly() bool { return s.Month != nil }

// CycleName names the task's cycle for messages: its Cycle, or "calendar
// months in <zone>".
func (s *Spec) CycleName() string {
	if s.Month != nil {
		return "calendar months in " + s.Month.Location().String()
	}
	return s.Plan.Cycle.String()
}

// Slots returns how many slots the cycle starting at cycleStart has: the
// plan's, or the month's days.
func (s *Spec) Slots(cycleStart time.Time) int {
	if s.Month != nil {
		return s.Month.Days(cycleStart)
	}
	return s.Plan.Slots
}

// SlotStart returns when slot of the cycle starting at cycleStart starts.
func (s *Spec) SlotStart(cycleStart time.Time, slot int) time.Time {
	if s.Month != nil {
		return s.Month.DayStart(cycleStart, slot)
	}
	return s.Plan.SlotStart(cycleStart, slot)
}

// SlotLen returns how long slot of the cycle starting at cycleStart lasts:
// the plan's SlotDuration, or the day's length (23 or 25 hours on a DST
// change).
func (s *Spec) SlotLen(cycleStart time.Time, slot int) time.Duration {
	if s.Month != nil {
		return s.Month.DayStart(cycleStart, slot+1).Sub(s.Month.DayStart(cycleStart, slot))
	}
	return s.Plan.SlotDuration
}

// CycleLen returns how long the cycle starting at cycleStart lasts by its
// layout: the plan's Cycle, or the month's length. The rules stated in
// half cycles (the late window, NotAfter, the overlap of two plans) use
// it.
func (s *Spec) CycleLen(cycleStart time.Time) time.Duration {
	if s.Month != nil {
		return s.Month.NextMonth(cycleStart).Sub(cycleStart)
	}
	return s.Plan.Cycle
}

// SlotBuckets returns the inclusive bucket range slot of the cycle
// starting at cycleStart selects: the range of bucket slot slot - Shift,
// or the buckets of the month's day (a bucket on the boundary of two days
// in both, its accounts split by InSlot).
func (s *Spec) SlotBuckets(cycleStart time.Time, slot int) (lo, hi int) {
	if s.Month != nil {
		return s.Month.DayBuckets(cycleStart, slot)
	}
	return s.Plan.BucketRange(s.Plan.Shift(slot, -s.Shift))
}

// SlotOf returns the slot the account is served in, in the cycle starting
// at cycleStart, by hash placement: its bucket's slot shifted by the
// task's phase, or the month's day it is due on.
func (s *Spec) SlotOf(cycleStart time.Time, id [16]byte) int {
	if s.Month != nil {
		return s.Month.DayOf(cycleStart, s.Seed, id)
	}
	return s.Plan.Shift(s.Plan.SlotOf(id), s.Shift)
}

// InSlot reports whether an account of slot's bucket range is the slot's:
// always for a fixed plan; for a month, whether it is due on that day (a
// bucket on the boundary of two days has accounts due on each).
func (s *Spec) InSlot(cycleStart time.Time, slot int, id [16]byte) bool {
	if s.Month != nil {
		return s.Month.DayOf(cycleStart, s.Seed, id) == slot
	}
	return true
}
