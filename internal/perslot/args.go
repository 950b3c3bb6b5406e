package perslot

import (
	"time"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// Kind is the River job kind of per-slot jobs. Tasks share it; the args carry
// the task name.
const Kind = "riverslot_perslot"

// Args are the arguments of a per-slot job. One job exists per (task, cycle
// start, slot, plan): it is inserted as a unique job by those four fields,
// in every state, so a failed one is retried rather than replaced.
//
// Placement, Pins and CycleEnd are the decisions of the cycle's bootstrap,
// recorded in each of its per-slot jobs so that whichever node runs a
// per-slot job follows its cycle, not its own configuration: a weighted
// cycle finished by a node without Weight (a rolling deploy, a rollback)
// still serves its pinned accounts in their pinned slots, and an unweighted
// one finished by a weighted node still selects by hash.
type Args struct {
	Task       string    `json:"task" river:"unique"`
	CycleStart time.Time `json:"cycle_start" river:"unique"`
	Slot       int       `json:"slot" river:"unique"`
	// Plan identifies the slot plan the job was made for (cycle, slots,
	// seed and shift), written as its plan id. The job always runs under
	// it.
	Plan taskspec.PlanKey `json:"plan" river:"unique"`

	// Placement is the cycle's placement: PlacementHash or PlacementPinned.
	// Empty in jobs made before placements were recorded: the node's own
	// Weight decides.
	Placement string `json:"placement,omitempty"`
	// Pins names the pins the cycle follows when Placement is
	// PlacementPinned.
	Pins *taskspec.PinsRef `json:"pins,omitempty"`
	// CycleEnd is when the cycle's successor on its grid starts (zero in
	// older jobs: the node's schedule decides). The late policy's deadline
	// and the NotAfter of late-spread syncs come from it (the sync worker
	// reads the same end from the cycle's ledger record for the others).
	CycleEnd time.Time `json:"cycle_end,omitzero"`
}

// Placements a cycle's bootstrap records in its per-slot jobs.
const (
	// PlacementHash: every account in its hash slot.
	PlacementHash = "hash"
	// PlacementPinned: the accounts pinned by Args.Pins in their pinned
	// slots, every other account in its hash slot.
	PlacementPinned = "pinned"
)

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the per-slot args of slot in spec's cycle starting at
// cycleStart, with the cycle's decisions: its end on its grid and its
// placement (pins, when the task or the task it is OppositeOf is weighted).
func NewArgs(spec *taskspec.Spec, cycleStart time.Time, slot int) Args {
	args := Args{
		Task: spec.Name, CycleStart: cycleStart.UTC(), Slot: slot, Plan: spec.Key,
		Placement: PlacementHash, CycleEnd: spec.CycleEnd(cycleStart).UTC(),
	}
	if ref := spec.PinsRef(); ref != nil {
		args.Placement, args.Pins = PlacementPinned, ref
	}
	return args
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

	// RangeAccounts counts the accounts of the slot's bucket range the
	// fan-out selected (pinned ones included); LateSpread and LateSkipped
	// the late accounts spread and skipped. The ledger records them.
	RangeAccounts int64 `json:"range_accounts,omitempty"`
	LateSpread    int64 `json:"late_spread,omitempty"`
	LateSkipped   int64 `json:"late_skipped,omitempty"`
}
