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
	// the account's regular time in the next cycle. A sync that starts
	// later (it waited in the queue through an outage, or its cycle was
	// superseded) completes without calling Sync; the next cycle syncs the
	// account. Zero in jobs made before it was recorded: no limit.
	NotAfter time.Time `json:"not_after,omitzero"`

	// Apart, when set, is the least time between two Sync calls of the task
	// for the account: a sync job that starts less than Apart after another
	// sync of the account started completes without calling Sync (one GIN
	// index lookup per sync). riverslot's fan-out leaves it zero (no check).
	Apart time.Duration `json:"apart,omitempty"`
}

// Kind returns Kind.
func (Args) Kind() string { return Kind }

// NewArgs returns the sync args of task for one account (cycleStart is
// normalized to UTC).
func NewArgs(task string, accountID uuid.UUID, cycleStart time.Time, slot int) Args {
	return Args{Task: task, AccountID: accountID, CycleStart: cycleStart.UTC(), Slot: slot}
}
