package taskspec

import (
	"math/bits"
	"time"

	"github.com/riverslot/riverslot/slotplan"
)

// CatchUpWindow is the window late accounts of a slot are spread over: how
// late the slot is (now - slot start) rounded up to whole slots, at least
// one slot, at most a cycle.
func CatchUpWindow(now, slotStart time.Time, slotDuration, cycle time.Duration) time.Duration {
	late := now.Sub(slotStart)
	slots := (late + slotDuration - 1) / slotDuration
	w := max(slots, 1) * slotDuration
	return min(w, cycle)
}

// Place returns when the account with offset hash hash is synced in the
// cycle starting at cycleStart, seen by a fan-out at now, or skip; late says
// the account was past its target plus LateGrace (spread when not skipped). It is the
// one implementation of the late policy: the per-slot tier and the
// simulator both call it.
//
// An account at most LateGrace past its target keeps it. A later one is
// skipped under LatePolicySkip; under LatePolicySpread it is moved to now +
// its deterministic offset in a window as long as the slot is late
// (CatchUpWindow), cut so that it ends half a cycle after the slot's start
// (LateDeadline): no late sync is scheduled less than half a cycle before
// the account's regular time in the next cycle (for a calendar month, half
// the shorter of the month and the next, see NextGap). A slot more than
// half a cycle late has no window left and its late accounts are skipped:
// the next cycle covers them, within half a cycle. For a task of an OppositeOf pair (Opposed)
// the window also ends with the account's own slot, so its two tasks'
// syncs stay at least half a cycle minus a slot apart, late or not.
func (s *Spec) Place(now, cycleStart, slotStart time.Time, hash uint64) (target time.Time, late, skip bool) {
	return s.PlaceIn(now, cycleStart, s.CycleEnd(cycleStart), slotStart, hash)
}

// PlaceIn is Place for a cycle that ends (its successor on its grid starts)
// at cycleEnd, as the cycle's bootstrap recorded it: the late deadline is
// the cycle's own, whatever the schedule of the node that runs the fan-out.
func (s *Spec) PlaceIn(now, cycleStart, cycleEnd, slotStart time.Time, hash uint64) (target time.Time, late, skip bool) {
	return s.PlaceCycle(now, cycleStart, cycleEnd, slotStart, hash, false)
}

// PlaceCycle is PlaceIn for a cycle the bootstrap recorded as the task's
// first under FirstCycleAll (first): its late accounts are spread over the
// rest of the cycle, whatever the late policy, as no earlier sync of them
// exists to keep away from.
func (s *Spec) PlaceCycle(now, cycleStart, cycleEnd, slotStart time.Time, hash uint64, first bool) (target time.Time, late, skip bool) {
	return s.PlaceRegular(now, cycleStart, cycleEnd, slotStart, s.Plan.SlotDuration, slotStart.Add(slotplan.OffsetIn(hash, s.Plan.SlotDuration)), hash, first)
}

// PlaceRegular is PlaceCycle for an account whose regular time in the slot
// [slotStart, slotStart+slotLen) is regular (Regular): what a
// calendar-month task's fan-out calls, whose days differ in length and
// whose accounts' times are fractions of the month.
func (s *Spec) PlaceRegular(now, cycleStart, cycleEnd, slotStart time.Time, slotLen time.Duration, regular time.Time, hash uint64, first bool) (target time.Time, late, skip bool) {
	target = regular
	if now.Sub(target) <= s.LateGrace {
		return target, false, false
	}
	if s.LatePolicy == LatePolicySkip && !first {
		return time.Time{}, true, true
	}
	deadline := s.LateDeadline(cycleStart, cycleEnd, slotStart)
	if first {
		deadline = cycleEnd
	}
	if s.Opposed {
		// The opposite task serves the account in the slot half a cycle
		// away, at an offset of its own: a late sync after the end of the
		// account's own slot could come closer to it than half a cycle
		// minus a slot. The account is skipped instead; the next cycle
		// covers it.
		if end := slotStart.Add(slotLen); end.Before(deadline) {
			deadline = end
		}
	}
	window := min(CatchUpWindow(now, slotStart, slotLen, s.CycleLen(cycleStart)), deadline.Sub(now))
	if first {
		window = deadline.Sub(now) // the whole rest of the cycle
	}
	if window <= 0 {
		return time.Time{}, true, true
	}
	return now.Add(slotplan.OffsetIn(hash, window)).Truncate(time.Microsecond), true, false
}

// LateDeadline returns the end of the late window of the slot starting at
// slotStart in the cycle [cycleStart, cycleEnd): half a cycle before the
// slot's start in the next cycle (on a wall-clock schedule the next cycle
// may start 23 h or 25 h later). No late account of the slot is placed
// after it, and past it a per-slot job has nothing left to place.
//
// For a calendar month the slot's place in the next month is its start's
// fraction of the month, in the next month (NextPlace): no account of the
// slot is due earlier there. The deadline is NextGap before it, and never
// later than half the month after the month's end (SyncsUntil's bound).
func (s *Spec) LateDeadline(cycleStart, cycleEnd, slotStart time.Time) time.Time {
	if s.Month != nil {
		return s.monthLimit(cycleStart, cycleEnd, s.NextPlace(cycleStart, cycleEnd, slotStart))
	}
	return cycleEnd.Add(slotStart.Sub(cycleStart) - s.CycleLen(cycleStart)/2)
}

// NextPlace returns the place in the next cycle (starting at cycleEnd) of
// the instant at of the cycle starting at cycleStart: cycleEnd plus at's
// offset in its cycle; for a calendar month, the same fraction of the
// next month's length (a place in a 31-day month is a different offset
// in a 28-day one), rounded down to a microsecond. For the regular time
// of an account (Month.Target) it is at most 2 µs before the account's
// Target in the next month, never after it; for a day's start, never
// after the next month's Target of any account due that day.
func (s *Spec) NextPlace(cycleStart, cycleEnd, at time.Time) time.Time {
	d := at.Sub(cycleStart)
	if s.Month == nil {
		return cycleEnd.Add(d)
	}
	this, next := s.CycleLen(cycleStart), s.CycleLen(cycleEnd)
	switch {
	case d <= 0:
		return cycleEnd.Add(d)
	case d >= this:
		return cycleEnd.Add(next + d - this)
	}
	// floor(d × next / this) in whole microseconds, in 128 bits: d < this,
	// so the quotient fits.
	hi, lo := bits.Mul64(uint64(d/time.Microsecond), uint64(next/time.Microsecond))
	q, _ := bits.Div64(hi, lo, uint64(this/time.Microsecond))
	return cycleEnd.Add(time.Duration(q) * time.Microsecond)
}

// NextGap returns how long before an account's regular time in the next
// cycle (starting at cycleEnd) a sync of the cycle starting at cycleStart
// may start at the latest: half a cycle; for a calendar month, half the
// shorter of the month and the next (14 days from January to February
// and from February to March, 15 days from April to May). The late
// window of a slot ends, and a sync's NotAfter is, that long before the
// next regular time.
func (s *Spec) NextGap(cycleStart, cycleEnd time.Time) time.Duration {
	if s.Month == nil {
		return s.CycleLen(cycleStart) / 2
	}
	return min(s.CycleLen(cycleStart), s.CycleLen(cycleEnd)) / 2
}

// monthLimit is the latest start of a sync of the month [cycleStart,
// cycleEnd) whose next regular time (or the earliest of a day's accounts)
// is next: NextGap before next, and never later than half the month after
// the month's end, the bound SyncsUntil records (it matters after a month
// shorter than the next: the last days of February would otherwise run
// up to 17 days into March).
func (s *Spec) monthLimit(cycleStart, cycleEnd, next time.Time) time.Time {
	limit := next.Add(-s.NextGap(cycleStart, cycleEnd))
	if bound := cycleEnd.Add(s.CycleLen(cycleStart) / 2); bound.Before(limit) {
		return bound
	}
	return limit
}

// CycleEnd returns when the cycle starting at cycleStart ends, that is when
// its successor on the same grid starts: the schedule's next start for a
// cycle start of the task's schedule (23 h or 25 h later across a DST
// change), else cycleStart + Cycle (a cycle on another grid, such as one
// made under another TriggerOffset or by riverslot demo). The bootstrap
// records it in the cycle's per-slot jobs.
func (s *Spec) CycleEnd(cycleStart time.Time) time.Time {
	if s.Schedule.Start(cycleStart).Equal(cycleStart) {
		return s.Schedule.Next(cycleStart)
	}
	return cycleStart.Add(s.CycleLen(cycleStart))
}

// NotAfter returns the latest start of the sync of an account whose regular
// target in the cycle [cycleStart, cycleEnd) is regular and which is
// scheduled at scheduled (regular, or later when the late policy spread
// it): half a cycle before its regular time in the next cycle, and never
// less than LateGrace after scheduled, so that a spread sync placed near
// the end of its window is not stale as soon as River starts it a little
// late. A sync that starts later (it waited in the queue through an
// outage, or its cycle was superseded) is stale: the next cycle syncs the
// account soon enough, so the sync job completes without calling Sync.
//
// For a calendar month the regular time in the next month is the
// account's fraction of that month (NextPlace), and the limit is NextGap
// (half the shorter of the two months) before it, never later than half
// the month after its end: a sync at its regular time is never stale less
// than half the shorter month before the account's next one.
func (s *Spec) NotAfter(cycleStart, cycleEnd, regular, scheduled time.Time) time.Time {
	var notAfter time.Time
	if s.Month != nil {
		notAfter = s.monthLimit(cycleStart, cycleEnd, s.NextPlace(cycleStart, cycleEnd, regular))
	} else {
		notAfter = cycleEnd.Add(regular.Sub(cycleStart) - s.CycleLen(cycleStart)/2)
	}
	return s.graced(notAfter, scheduled)
}

// graced is notAfter, or LateGrace after scheduled when that is later.
func (s *Spec) graced(notAfter, scheduled time.Time) time.Time {
	if grace := scheduled.Add(s.LateGrace); grace.After(notAfter) {
		return grace
	}
	return notAfter
}

// Regular returns the account's regular time in the cycle starting at
// cycleStart, in slot (the slot whose per-slot job serves it: its hash
// slot shifted by the task's phase, or the slot it is pinned to): the
// slot's start plus the account's seeded offset in it. A sync that no late
// policy moved is scheduled then.
func (s *Spec) Regular(cycleStart time.Time, slot int, id [16]byte) time.Time {
	if s.Month != nil {
		// The account's fraction of the month (slot is its day).
		return s.Month.Target(cycleStart, s.Seed, id)
	}
	return s.Plan.SlotStart(cycleStart, slot).Add(slotplan.OffsetIn(slotplan.Hash(s.Seed, id), s.Plan.SlotDuration))
}

// RegularNotAfter is NotAfter for a sync at its regular time (Regular):
// what the fan-out wrote into every sync job before, and what the sync
// worker now derives for a job whose args carry no NotAfter.
//
// For a calendar month it reads the account's place in the next month
// from its fraction (Month.Target), not from its offset in this month.
func (s *Spec) RegularNotAfter(cycleStart, cycleEnd time.Time, slot int, id [16]byte) time.Time {
	regular := s.Regular(cycleStart, slot, id)
	if s.Month != nil {
		return s.graced(s.monthLimit(cycleStart, cycleEnd, s.Month.Target(cycleEnd, s.Seed, id)), regular)
	}
	return s.NotAfter(cycleStart, cycleEnd, regular, regular)
}

// SyncsUntil returns the latest NotAfter a sync of the cycle [cycleStart,
// cycleEnd) can carry: no sync of the cycle calls Sync after it. The
// cycle's ledger row records it, so that the overlap rule of a later plan
// reads only the cycles whose syncs can still run near its own.
func (s *Spec) SyncsUntil(cycleStart, cycleEnd time.Time) time.Time {
	// Slots span the plan's Cycle even on a 23 h day: the last NotAfter
	// is cycleEnd + Cycle - Cycle/2, plus LateGrace for a spread sync. A
	// month's NotAfter and late deadlines are cut at cycleEnd + half the
	// month (monthLimit), whatever the next month's length.
	return cycleEnd.Add(s.CycleLen(cycleStart)/2 + s.LateGrace)
}
