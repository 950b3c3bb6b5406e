package riverslot

import (
	"errors"
	"time"

	"github.com/riverslot/riverslot/internal/perslot"
)

// Slot fan-out states in SlotStatus.State.
const (
	SlotScheduled = "scheduled" // the per-slot job waits for its time
	SlotRunning   = "running"   // fanning out (or retrying after an error)
	SlotDone      = "done"      // every account of the slot enqueued (or skipped as late)
	SlotFailed    = "failed"    // discarded or cancelled: see Error
	SlotMissing   = "missing"   // no per-slot job: the bootstrap has not run, or River deleted it
	SlotElsewhere = "elsewhere" // another shard's slot: that shard's database makes and serves it
)

// TaskStatus is where a task's cycles stand: the current one, the one
// before it, and one prepared ahead of its start.
type TaskStatus struct {
	Task string // the task's Name
	// Current is the cycle asked for; by default (Status, StatusFromLedger
	// without a cycle start) the cycle running now: the latest the ledger
	// records that has started, or, before the task's first cycle starts,
	// the latest prepared. Status errs when the ledger has none.
	Current  *CycleStatus
	Previous *CycleStatus // nil when the task has no earlier cycle
	// Prepared is the earliest cycle the ledger records bootstrapped ahead
	// of its start (EnqueueCycle, or the trigger's lead before each start)
	// while Current runs: it is shown beside the running cycle, never
	// instead of it, and the verdict is Current's. Nil when there is none,
	// or when a cycle start was asked for.
	Prepared *PreparedCycle
	// Census is the latest weight census of a weighted task (nil for
	// another task, or before its first census).
	Census *CensusStatus
	// Upstreams sums up the task's upstreams (nil for a task without
	// Upstream or Limits, or before its first sync).
	Upstreams *UpstreamsStatus
}

// PreparedCycle is a cycle bootstrapped ahead of its start: its per-slot
// jobs wait for their slots. StatusAt describes it in full.
type PreparedCycle struct {
	CycleStart time.Time // when it starts
	// Plan is the plan id it was made under, as its jobs carry it (see
	// CycleStatus.Plan); Slots its slots under that plan.
	Plan  string
	Slots int
}

// CycleStatus is one cycle of one task: riverslot's ledger's record of it,
// River's job table for what is still queued or running, and the accounts
// expected per slot.
type CycleStatus struct {
	CycleStart time.Time // when the cycle starts (slot 0's start)
	Slots      int       // slots in the cycle, gcd(cycle seconds, 256)
	// Plan is the plan id the cycle runs under, as its jobs carry it (see
	// TaskInfo.PlanID): the task's own, or the one its latest cycle was
	// made under when that differs (a task OppositeOf another described
	// without it, as riverslot status does; a change of Cycle or Seed).
	Plan string
	// Placement is the cycle's placement as its bootstrap recorded it in
	// the per-slot jobs: PlacementHash or PlacementPinned. PinsTask is the
	// task whose pins a pinned cycle follows (the task itself, or the
	// weighted task it is OppositeOf), PinsShift the slots those pins are
	// shifted by (half the slots for an OppositeOf task).
	Placement string
	PinsTask  string
	PinsShift int
	// PinsFallback is set when the cycle's bootstrap could not compute its
	// pins in time (Task.PinsTimeout) and fell back: "previous" (the
	// latest pins computed before) or "hash" (hash placement), as its
	// ledger row records it; "" when it computed them.
	PinsFallback string
	// PerSlot has one entry per slot, in slot order.
	PerSlot []SlotStatus

	// SlotsDone and SlotsFailed count the slots in state SlotDone and
	// SlotFailed.
	SlotsDone, SlotsFailed int
	// Shard and ShardVersion are, for a sharded task, this database's
	// shard and the version of the shard map the cycle follows; the
	// SlotsElsewhere slots the map gives other shards are in state
	// SlotElsewhere, expect no account here, and are never behind.
	Shard          string
	ShardVersion   int64
	SlotsElsewhere int

	// Sync jobs of the cycle: Enqueued is what the fan-outs inserted (their
	// cursors), Skipped the late accounts they skipped. Pending (scheduled
	// or available), Running and Retryable are River's unfinished jobs.
	// The rest is how the cycle's sync jobs ended, as the nodes that ran
	// them counted them in the cycle's ledger row (so it stays after River
	// deletes the jobs; a node killed loses at most half a second of its
	// counts): Completed ended without error (Synced called Sync, Gone
	// found the account gone or filtered out, SkippedStale started past
	// its NotAfter, less than half a cycle before the account's next
	// regular sync, SkippedUpstream found no room with its upstream before
	// its NotAfter), Discarded failed its last attempt, Cancelled was
	// cancelled.
	Enqueued, Skipped               int64
	Pending, Running, Retryable     int64
	Completed, Discarded, Cancelled int64
	Synced, Gone                    int64
	AccountsExpected                int64 // the sum of the slots' Expected
	SkippedStale, SkippedUpstream   int64
	// LatenessP50 and LatenessP99 are percentiles of the start minus the
	// scheduled time of the cycle's synced syncs, from the ledger's
	// histogram (buckets 26% wide, interpolated); LatenessSample is how
	// many syncs it counts, LatenessKnown false when none (the percentiles
	// are then unknown, not zero).
	LatenessP50, LatenessP99 time.Duration
	LatenessSample           int64
	LatenessKnown            bool
	NextSlot                 int       // -1 when every slot has started
	NextSlotAt               time.Time // when NextSlot starts
	Verdict                  string    // "on track", "starting: ...", "behind by N slots", "failed slot K: error" or "slot K selected N accounts, M expected (...)"
	OnTrack                  bool      // the verdict is "on track"
	BehindSlots              int       // slots past their middle whose fan-out has not finished
	// Starting is set, with the verdict "starting: ...", instead of
	// "behind by N slots" while River is starting and the behind slots'
	// per-slot jobs are due (none missing, retrying or scheduled later):
	// River's leader (which promotes scheduled jobs) was elected less than
	// StartingGrace ago, or there is no leader yet and every behind slot
	// passed its middle less than StartingGrace ago. A health check should treat it as on track
	// (riverslot status exits 0); past StartingGrace it is "behind" again.
	Starting bool
	// OffSlots counts the done slots whose fan-out selected (enqueued plus
	// skipped as late) a number of accounts other than Expected, by more
	// than max(10, Expected / 10): accounts added or removed since the
	// fan-out on a large scale, or a placement status does not explain.
	// OffSlot is the first of them, -1 when none.
	OffSlots    int
	OffSlot     int
	FailedSlot  int    // -1 when none failed
	FailedError string // River's last error of FailedSlot's per-slot job
	// WaitingError is why a slot not finished waits, as its fan-out
	// recorded it in the ledger (the accounts database unreachable); ""
	// when none does.
	WaitingError string
	// AccountsError is set when Status could not reach the accounts
	// database to count the accounts expected per slot (or those the
	// cycle's pins move): it says so, and the expected accounts are then
	// what the fan-outs selected.
	AccountsError string
}

// Placements of a cycle in CycleStatus.Placement.
const (
	// PlacementHash: every account in its hash slot.
	PlacementHash = perslot.PlacementHash
	// PlacementPinned: the accounts pinned in the cycle (Task.Weight) in
	// their pinned slots, every other account in its hash slot.
	PlacementPinned = perslot.PlacementPinned
)

// SlotStatus is one slot's fan-out.
type SlotStatus struct {
	Slot     int       // 0 to Slots-1
	Start    time.Time // when the slot starts; its per-slot job runs Lead before
	State    string    // SlotScheduled, SlotRunning, SlotDone, SlotFailed or SlotMissing
	Attempts int       // the per-slot job's attempts so far (River's attempt count)
	// Enqueued and Skipped are the accounts the fan-out enqueued and
	// skipped as late so far; Batches the transactions it committed.
	Enqueued, Skipped int64
	Batches           int
	// Expected is the accounts the slot selects today under the cycle's
	// placement: those of its hash slot that are not pinned in the cycle
	// (PinnedOut are), plus those pinned to it (PinnedIn), from the pins its
	// cycle's per-slot jobs name. PinnedIn and PinnedOut count only accounts
	// that still exist and match the task's filter.
	Expected            int64
	PinnedIn, PinnedOut int64
	// Error is River's last recorded error of a failed or retrying slot
	// (the ledger's, once River deleted the job).
	Error string

	jobID int64 // the per-slot job the ledger records
}

// ErrNoCycle is wrapped by the errors of Status, StatusAt, StatusFromLedger,
// StatusShards and AccountOnShards when the task has no such cycle: none
// yet, no ledger row of the asked cycle start (and, for StatusAt, that
// start is not on the task's grid), or no shard map in force. The text of
// such an error names the task and the cycle, and a shard's database error
// only as StatusShardsOpts.DescribeError tells it: a page may show it.
var ErrNoCycle = errors.New("no such cycle")

// noCycleError: the task has no such cycle. msg is its whole text; causes
// (the errors of the shards that did not answer) are wrapped, not shown.
type noCycleError struct {
	msg    string
	causes []error
}

func (e *noCycleError) Error() string   { return e.msg }
func (e *noCycleError) Unwrap() []error { return append([]error{ErrNoCycle}, e.causes...) }

// errNoRiverSchema is returned when Status runs before Configure.
var errNoRiverSchema = errors.New("call Configure before Status: Status reads River's tables in river.Config.Schema")
