package syncjob

import (
	"time"

	"github.com/google/uuid"
)

// Kind is the River job kind of sync jobs. Tasks share it; the args carry
// the task name, and each task may have its own queue.
const Kind = "riverslot_sync"

// Args are the arguments of a sync job.
type Args struct {
	// Task is the name of the riverslot task that scheduled this sync.
	Task string `json:"task"`

	// AccountID is the account to sync.
	AccountID uuid.UUID `json:"account_id"`

	// CycleStart is the nominal start of the cycle this sync belongs to.
	CycleStart time.Time `json:"cycle_start"`

	// Slot is the account's slot in the cycle, numbered from 0.
	Slot int `json:"slot"`

	// NotAfter is the latest time the sync may start: half a cycle before
	// the account's regular time in the next cycle (and at least LateGrace
	// after its scheduled time). A sync that starts later (it waited in the
	// queue through an outage, or its cycle was superseded) completes
	// without calling Sync; the next cycle syncs the account.
	//
	// The fan-out sets it only on syncs it moved from their regular time
	// (late-spread ones): River indexes args with a GIN index, and a value
	// unique to each row made River's insert of a cycle's jobs 43% slower.
	// Zero on a job tagged with its plan (taskspec.PlanTag, as the fan-out
	// tags every sync job): the worker derives it from the plan, the slot,
	// the account's offset and the cycle's record in the ledger (cached per
	// cycle). Zero on a job without the tag (made by hand, or by an
	// earlier version, which wrote NotAfter into every job): no limit.
	NotAfter time.Time `json:"not_after,omitzero"`

	// Upstream is the account's upstream key (Task.Upstream's value when
	// the fan-out selected it; empty: the task's default upstream), whose
	// limits and breaker the sync goes through when the task sets any.
	Upstream string `json:"upstream,omitempty"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the sync args of task for one account (cycleStart is
// normalized to UTC).
func NewArgs(task string, accountID uuid.UUID, cycleStart time.Time, slot int) Args {
	return Args{Task: task, AccountID: accountID, CycleStart: cycleStart.UTC(), Slot: slot}
}
