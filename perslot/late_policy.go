package perslot

import (
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// catchUpWindow is the window late accounts of a slot are spread over: how
// late the slot is (now - slot start) rounded up to whole slots, at least
// one slot, at most a cycle.
func catchUpWindow(now, slotStart time.Time, slotDuration, cycle time.Duration) time.Duration {
	late := now.Sub(slotStart)
	slots := (late + slotDuration - 1) / slotDuration
	w := max(slots, 1) * slotDuration
	return min(w, cycle)
}

// placement is where one account's sync goes.
type placement struct {
	target time.Time
	skip   bool
}

// place returns the account's sync time in the cycle starting at cycleStart,
// seen at now. An account at most LateGrace past its target keeps it. A
// later one is skipped under LatePolicySkip; under LatePolicySpread it is
// moved to now + its deterministic offset in a window as long as the slot is
// late (catchUpWindow), cut so that it ends half a cycle after the slot's
// start: no late sync lands less than half a cycle before the account's
// regular time in the next cycle. A slot more than half a cycle late has no
// window left and its late accounts are skipped: the next cycle covers them,
// within half a cycle.
func place(spec *taskspec.Spec, now, cycleStart, slotStart time.Time, hash uint64) placement {
	target := slotStart.Add(slotplan.OffsetIn(hash, spec.Plan.SlotDuration))
	if now.Sub(target) <= spec.LateGrace {
		return placement{target: target}
	}
	if spec.LatePolicy == taskspec.LatePolicySkip {
		return placement{skip: true}
	}
	// The next cycle's start minus half a cycle: on a wall-clock schedule
	// the next cycle may start 23 h or 25 h later.
	deadline := spec.Schedule.Next(cycleStart).Add(slotStart.Sub(cycleStart) - spec.Plan.Cycle/2)
	window := min(catchUpWindow(now, slotStart, spec.Plan.SlotDuration, spec.Plan.Cycle), deadline.Sub(now))
	if window <= 0 {
		return placement{skip: true}
	}
	return placement{target: now.Add(slotplan.OffsetIn(hash, window)).Truncate(time.Microsecond)}
}
