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
	// offset inside a catch-up window as long as the slot is late (now -
	// slot start, rounded up to whole slots, at most a cycle). A slot that
	// is one slot late is replayed over one slot; after an outage of m
	// slots, slot 0 is replayed over m slots and slot m-1 over one, so the
	// catch-up load is about ln(m)+0.6 times the normal rate at its start
	// and falls off, instead of every missed account being due at once. No
	// account waits more than twice as long as its slot was late. This is
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

// catchUpWindow is the window late accounts of a slot are spread over: how
// late the slot is (now - slot start) rounded up to whole slots, at least
// one slot, at most a cycle.
func catchUpWindow(now, slotStart time.Time, slotDuration, cycle time.Duration) time.Duration {
	late := now.Sub(slotStart)
	slots := (late + slotDuration - 1) / slotDuration
	w := max(slots, 1) * slotDuration
	return min(w, cycle)
}
