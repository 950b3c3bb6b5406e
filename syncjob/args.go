package syncjob

import (
	"time"

	"github.com/google/uuid"
)

// KindDefault is the sync job kind of a task that does not set its own.
const KindDefault = "riverslot_sync"

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

	kind string
}

// NewArgs returns sync args for kind (KindDefault when empty).
func NewArgs(kind, task string, accountID uuid.UUID, cycleStart time.Time, slot int) Args {
	return Args{Task: task, AccountID: accountID, CycleStart: cycleStart.UTC(), Slot: slot, kind: kind}
}

// Kind is the River job kind: the kind given to NewArgs, else KindDefault.
func (a Args) Kind() string {
	if a.kind == "" {
		return KindDefault
	}
	return a.kind
}
