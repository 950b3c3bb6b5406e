package taskspec

import "fmt"

// LatePolicy decides what a per-slot job does with accounts whose target
// time is more than LateGrace in the past when it enqueues them. The
// constants and their documentation are re-exported by riverutil.
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
