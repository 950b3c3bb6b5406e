package taskspec

import "fmt"

// LatePolicy decides what a per-slot job does with accounts whose target
// time is more than LateGrace in the past when it enqueues them. The
// constants and their documentation are re-exported by riverslot.
type LatePolicy string

const (
	// LatePolicySpread schedules each late account inside a catch-up window.
	LatePolicySpread LatePolicy = "spread"
	// LatePolicySkip does not enqueue late accounts.
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

// FirstCycle decides what a task's first cycle (no earlier cycle of the
// task in the ledger) does when it started before its bootstrap ran, as
// when an app is first deployed mid-cycle.
type FirstCycle string

const (
	// FirstCycleLate treats the first cycle as any late cycle: the late
	// policy spreads the accounts of past slots within half a cycle of
	// their slot, or skips them until the next cycle.
	FirstCycleLate FirstCycle = "late"
	// FirstCycleAll syncs every account within the first cycle: the
	// accounts of past slots are spread over the rest of the cycle (their
	// next regular sync may then come less than half a cycle later).
	FirstCycleAll FirstCycle = "all"
	// FirstCycleNext starts at the next cycle: a first cycle that already
	// started is not bootstrapped.
	FirstCycleNext FirstCycle = "next"
)

// Validate returns an error naming the field for an unknown value.
func (f FirstCycle) Validate() error {
	switch f {
	case FirstCycleLate, FirstCycleAll, FirstCycleNext:
		return nil
	}
	return fmt.Errorf("FirstCycle must be %q, %q or %q, got %q", FirstCycleLate, FirstCycleAll, FirstCycleNext, string(f))
}
