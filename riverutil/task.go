package riverutil

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/syncjob"
)

const (
	// IDColumnDefault is the default account id column.
	IDColumnDefault = "id"

	// BatchSizeDefault is how many accounts a per-slot job selects and
	// enqueues per transaction.
	BatchSizeDefault = 2000
	// BatchSizeMin and BatchSizeMax bound BatchSize.
	BatchSizeMin = 1
	BatchSizeMax = 50_000

	// PrioritySyncDefault is the River priority of sync jobs.
	PrioritySyncDefault = 2
	// PriorityControlDefault is the River priority of bootstrap and per-slot
	// jobs, ahead of sync jobs so fan-out is not stuck behind a backlog.
	PriorityControlDefault = 1

	// MaxAttemptsDefault is the maximum attempts of a sync job. The next
	// cycle syncs the account again anyway.
	MaxAttemptsDefault = 5

	// SyncTimeoutDefault bounds one sync call.
	SyncTimeoutDefault = time.Minute

	// PerSlotTimeoutDefault bounds one per-slot attempt. A timed-out attempt
	// is retried from its last committed batch, so a short timeout loses no
	// work; it keeps Plugin.RescueStuckJobsAfter short, which is how fast a
	// per-slot job orphaned by a dead process is picked up again.
	PerSlotTimeoutDefault = time.Minute

	// LatePolicyDefault is the late policy of a task that does not set one.
	LatePolicyDefault = perslot.LatePolicySpread
)

// Task is one periodic per-account task.
type Task struct {
	// Name identifies the task in job args, unique jobs and logs. Required;
	// letters, digits, '_', '-' and '.', at most 64 bytes. Renaming a task
	// moves its accounts' offsets unless Seed is set.
	Name string

	// Cycle is how often every account is synced, e.g. 24*time.Hour. It must
	// be a whole number of seconds that is a multiple of 2 s; it is split
	// into gcd(seconds, 256) slots (24h gives 128 slots of 11m15s). Required.
	Cycle time.Duration

	// TriggerOffset shifts cycle starts: after local midnight when Location
	// is set (30*time.Minute and Europe/London syncs after 00:30 UK time),
	// else after the Unix epoch. Must be in [0, Cycle). Defaults to 0.
	TriggerOffset time.Duration

	// Location makes cycle starts wall-clock times in that zone; Cycle must
	// then divide 24h. See slotplan.Schedule for DST change days. Defaults
	// to nil: an absolute UTC grid.
	Location *time.Location

	// Schema of the accounts table. Defaults to "" (search_path).
	Schema string
	// Table holding the accounts. Required.
	Table string
	// IDColumn is the account's uuid column. Defaults to "id".
	IDColumn string
	// Filter is an optional SQL boolean condition on Table's rows, e.g.
	// "active AND NOT restricted". It is trusted application SQL, spliced
	// into queries inside parentheses: never build it from user input.
	// Check validates it. Defaults to "" (every row).
	Filter string

	// Seed is mixed into every account's offset. Defaults to 0, which means
	// a seed derived from Name (FNV-1a 64), so two tasks place the same
	// account at different offsets.
	Seed uint64

	// BatchSize is how many accounts a per-slot job enqueues per
	// transaction. Defaults to 2000; 1 to 50,000.
	BatchSize int

	// SyncKind is the River kind of this task's sync jobs. Tasks may share a
	// kind. Defaults to "riverslot_sync".
	SyncKind string
	// Queue for sync jobs. Defaults to river.QueueDefault.
	Queue string
	// ControlQueue for bootstrap and per-slot jobs. Defaults to Queue.
	ControlQueue string
	// Priority of sync jobs (1 highest, 4 lowest). Defaults to 2.
	Priority int
	// MaxAttempts of a sync job. Defaults to 5.
	MaxAttempts int
	// SyncTimeout bounds one Sync call. Defaults to 1 minute.
	SyncTimeout time.Duration
	// PerSlotTimeout bounds one per-slot attempt; a timed-out attempt is
	// retried from its last committed batch. Defaults to 1 minute.
	PerSlotTimeout time.Duration

	// LatePolicy handles accounts enqueued more than LateGrace after their
	// target time: perslot.LatePolicySpread (default) or
	// perslot.LatePolicySkip.
	LatePolicy perslot.LatePolicy
	// LateGrace is how far past its target an account may be and still be
	// enqueued at its target (to run at once). Defaults to the slot
	// duration: a per-slot job that starts inside its own slot schedules
	// every account normally.
	LateGrace time.Duration

	// Sync is the application's work for one account. Required.
	Sync syncjob.SyncFunc
}

var taskNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// withDefaults returns a copy of t with defaults applied. It assumes Cycle
// is valid for LateGrace's default.
func (t Task) withDefaults(plan slotplan.Plan) Task {
	t.IDColumn = cmp.Or(t.IDColumn, IDColumnDefault)
	t.BatchSize = cmp.Or(t.BatchSize, BatchSizeDefault)
	t.SyncKind = cmp.Or(t.SyncKind, syncjob.KindDefault)
	t.Queue = cmp.Or(t.Queue, river.QueueDefault)
	t.ControlQueue = cmp.Or(t.ControlQueue, t.Queue)
	t.Priority = cmp.Or(t.Priority, PrioritySyncDefault)
	t.MaxAttempts = cmp.Or(t.MaxAttempts, MaxAttemptsDefault)
	t.SyncTimeout = cmp.Or(t.SyncTimeout, SyncTimeoutDefault)
	t.PerSlotTimeout = cmp.Or(t.PerSlotTimeout, PerSlotTimeoutDefault)
	t.LatePolicy = cmp.Or(t.LatePolicy, LatePolicyDefault)
	t.LateGrace = cmp.Or(t.LateGrace, plan.SlotDuration)
	if t.Seed == 0 {
		t.Seed = slotplan.SeedFromName(t.Name)
	}
	return t
}

// validate checks t (after defaults) and returns every problem found, each
// naming the field and the fix.
func (t Task) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !taskNameRE.MatchString(t.Name) {
		add("Name must be 1-64 letters, digits, '_', '-' or '.', got %q", t.Name)
	}
	if _, err := slotplan.NewSchedule(t.Cycle, t.TriggerOffset, t.Location); err != nil {
		errs = append(errs, err)
	}
	if t.Table == "" {
		add("Table must be set to the table holding the accounts")
	}
	for _, f := range []struct{ field, value string }{{"Schema", t.Schema}, {"Table", t.Table}, {"IDColumn", t.IDColumn}} {
		if err := checkIdentifier(f.field, f.value); err != nil {
			errs = append(errs, err)
		}
	}
	if strings.Contains(t.Filter, ";") {
		add("Filter must be a single SQL boolean expression without ';', got %q", t.Filter)
	}
	if t.BatchSize < BatchSizeMin || t.BatchSize > BatchSizeMax {
		add("BatchSize must be between %d and %d, got %d", BatchSizeMin, BatchSizeMax, t.BatchSize)
	}
	if t.Priority < 1 || t.Priority > 4 {
		add("Priority must be between 1 and 4, got %d", t.Priority)
	}
	if t.MaxAttempts < 1 {
		add("MaxAttempts must be at least 1, got %d", t.MaxAttempts)
	}
	if t.SyncTimeout < 0 {
		add("SyncTimeout must not be negative, got %s", t.SyncTimeout)
	}
	if t.PerSlotTimeout < 0 {
		add("PerSlotTimeout must not be negative, got %s", t.PerSlotTimeout)
	}
	if t.LateGrace < 0 {
		add("LateGrace must not be negative, got %s", t.LateGrace)
	}
	if err := t.LatePolicy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if t.Sync == nil {
		add("Sync must be set to the function that syncs one account")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid riverslot task %q: %w", t.Name, err)
	}
	return nil
}

// checkIdentifier rejects identifiers that are legal when quoted but almost
// certainly a mistake or an injection attempt. Identifiers are always quoted
// in SQL regardless.
func checkIdentifier(field, value string) error {
	if len(value) > 63 {
		return fmt.Errorf("%s must be at most 63 bytes (Postgres' identifier limit), got %d", field, len(value))
	}
	if strings.ContainsAny(value, "\";\x00") || strings.Contains(value, "--") {
		return fmt.Errorf("%s must be a plain identifier without quotes, ';' or '--' (it is quoted for you), got %q", field, value)
	}
	return nil
}
