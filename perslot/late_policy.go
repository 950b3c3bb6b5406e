package perslot

import (
	"fmt"
	"time"
)

// LatePolicy decides what a per-slot job does with accounts whose target
// time is more than LateGrace in the past when it enqueues them, which
// happens after an outage or when the bootstrap of a cycle runs mid-cycle.
type LatePolicy string

const (
	// LatePolicySpread schedules each late account at now + a deterministic
	// offset inside a catch-up window as long as the part of the cycle that
	// has elapsed (rounded up to whole slots). Missed slots are replayed at
	// the normal density instead of all at once: at most one extra slot's
	// worth of work per slot duration on top of the current slot. This is
	// the default.
	LatePolicySpread LatePolicy = "spread"

	// LatePolicySkip does not enqueue late accounts; they are synced at their
	// usual time next cycle. The skipped count is logged and kept in the
	// per-slot job's cursor.
	LatePolicySkip LatePolicy = "skip"
)

// Validate returns an error naming the field for an unknown policy.
func (p LatePolicy) Validate() error {
	switch p {
	case LatePolicySpread, LatePolicySkip:
		return nil
	}
	return fmt.Errorf("LatePolicy must be %q or %q, got %q", LatePolicySpread, LatePolicySkip, string(p))
}

// catchUpWindow is the window late accounts are spread over: the elapsed part
// of the cycle rounded up to whole slots, at least one slot, at most a cycle.
func catchUpWindow(now, cycleStart time.Time, slotDuration, cycle time.Duration) time.Duration {
	elapsed := now.Sub(cycleStart)
	slots := (elapsed + slotDuration - 1) / slotDuration
	w := max(slots, 1) * slotDuration
	return min(w, cycle)
}
