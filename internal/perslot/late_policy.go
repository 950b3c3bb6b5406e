package perslot

import (
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// catchUpWindow is taskspec.CatchUpWindow.
func catchUpWindow(now, slotStart time.Time, slotDuration, cycle time.Duration) time.Duration {
	return taskspec.CatchUpWindow(now, slotStart, slotDuration, cycle)
}

// placement is where one account's sync goes.
type placement struct {
	target time.Time
	late   bool // past its target plus LateGrace: spread, or skipped
	skip   bool
}

// place returns the account's sync time in the cycle [cycleStart,
// cycleEnd), seen at now: taskspec.Spec.PlaceCycle (first: the task's
// first cycle under FirstCycleAll), the late policy the simulator shares.
func place(spec *taskspec.Spec, now, cycleStart, cycleEnd, slotStart time.Time, slotLen time.Duration, regular time.Time, hash uint64, first bool) placement {
	target, late, skip := spec.PlaceRegular(now, cycleStart, cycleEnd, slotStart, slotLen, regular, hash, first)
	return placement{target: target, late: late, skip: skip}
}
