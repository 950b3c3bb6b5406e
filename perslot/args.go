package perslot

import (
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// Kind is the River job kind of per-slot jobs. Tasks share it; the args carry
// the task name.
const Kind = "riverslot_perslot"

// Args are the arguments of a per-slot job. One job exists per (task, cycle
// start, slot, plan): it is inserted as a unique job by its args, in every
// state, so a failed one is retried rather than replaced.
type Args struct {
	Task       string    `json:"task"`
	CycleStart time.Time `json:"cycle_start"`
	Slot       int       `json:"slot"`
	// Plan identifies the slot plan the job was made for (cycle, slots and
	// seed). A per-slot job made under another plan is cancelled, not run.
	Plan string `json:"plan"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the per-slot args of slot in spec's cycle starting at
// cycleStart.
func NewArgs(spec *taskspec.Spec, cycleStart time.Time, slot int) Args {
	return Args{Task: spec.Name, CycleStart: cycleStart.UTC(), Slot: slot, Plan: spec.PlanID}
}

// fanOutCursor is the fan-out position persisted after every committed batch.
type fanOutCursor struct {
	// Started is true once at least one batch was committed; Bucket and
	// AfterID are then the keyset position of the last account enqueued.
	Started bool `json:"started"`
	// Pinned is true once a weighted task's fan-out has moved on from the
	// slot's bucket range (minus the accounts pinned elsewhere) to the
	// accounts pinned to the slot, which are paged by id alone; Started,
	// Bucket and AfterID then describe that second phase.
	Pinned  bool   `json:"pinned,omitempty"`
	Bucket  int    `json:"bucket"`
	AfterID string `json:"after_id,omitempty"`

	// Inserted and Skipped count sync jobs enqueued and late accounts
	// skipped so far, across attempts.
	Inserted int64 `json:"inserted"`
	Skipped  int64 `json:"skipped"`
	Batches  int   `json:"batches"`
}
