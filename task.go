package riverslot

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
)

// Defaults and bounds of Task's fields; see each field. New applies a
// default to a field left at its zero value and refuses a value out of
// bounds, naming the field.
const (
	IDColumnDefault       = taskspec.IDColumnDefault       // Task.IDColumn
	BatchSizeDefault      = taskspec.BatchSizeDefault      // Task.BatchSize, accounts per fan-out transaction
	BatchSizeMax          = taskspec.BatchSizeMax          // the largest Task.BatchSize New accepts
	PriorityDefault       = taskspec.PriorityDefault       // Task.Priority of sync jobs (River: 1 highest, 4 lowest)
	MaxAttemptsDefault    = taskspec.MaxAttemptsDefault    // Task.MaxAttempts of a sync job
	SyncTimeoutDefault    = taskspec.SyncTimeoutDefault    // Task.SyncTimeout, one Sync call
	PerSlotTimeoutDefault = taskspec.PerSlotTimeoutDefault // Task.PerSlotTimeout, one fan-out attempt
	PinsTimeoutDefault    = taskspec.PinsTimeoutDefault    // Task.PinsTimeout, a weighted cycle's pin computation

	// CycleMin is the shortest Cycle: River's scheduler promotes scheduled
	// jobs every 5 s, so a shorter cycle's slots could not start on time.
	CycleMin = taskspec.CycleMin

	// BucketsDefault is the default Buckets: one UUID byte, 256 buckets.
	BucketsDefault = slotplan.Buckets
	// BucketsTwoByte is the other Buckets: two UUID bytes, 65,536
	// buckets.
	BucketsTwoByte = slotplan.BucketsTwoByte

	// PinsDirectMax is the largest fleet (accounts matching Filter) whose
	// pins a weighted bootstrap computes directly, scanning the accounts
	// table in its own transaction (about a second at 1,000,000 accounts
	// on 2 cores, so a fifth of that here). A larger fleet's pins come from
	// a weight census taken in bounded steps by a census job during the
	// previous cycle (docs/weights-and-phases.md).
	PinsDirectMax = taskspec.PinsDirectMax

	// WeightEpsilonDefault is the default WeightEpsilon (0.10): a slot
	// carries at most 1.10 × the mean slot weight.
	WeightEpsilonDefault = slotplan.WeightEpsilonDefault

	// LeadMax caps the default Lead, which is min(LeadMax, half a slot).
	LeadMax = taskspec.LeadMax
)

// LatePolicy decides what a per-slot job does with accounts whose target
// time is more than LateGrace in the past when it enqueues them, which
// happens after an outage or when the bootstrap of a cycle runs mid-cycle.
type LatePolicy = taskspec.LatePolicy

const (
	// LatePolicySpread (the default) schedules each late account at now + a
	// deterministic offset in a window as long as its slot is late, ending
	// half a cycle after the slot's start: the catch-up load is spread, and
	// no late sync is scheduled less than half a cycle before the account's
	// regular time in the next cycle (it may start up to LateGrace past its
	// scheduled time before it is stale; see SyncArgs.NotAfter). Accounts of
	// a slot more than half a cycle late are skipped: the next cycle covers
	// them.
	LatePolicySpread = taskspec.LatePolicySpread

	// LatePolicySkip does not enqueue late accounts; the next cycle syncs
	// them at their usual time. The count is in the per-slot job's output.
	LatePolicySkip = taskspec.LatePolicySkip
)

// FirstCycle decides what a task's first cycle does when it started before
// the app did (see Task.FirstCycle).
type FirstCycle = taskspec.FirstCycle

const (
	// FirstCycleLate (the default) treats the first cycle as any late
	// cycle: LatePolicy decides for the accounts of past slots.
	FirstCycleLate = taskspec.FirstCycleLate
	// FirstCycleAll syncs every account within the first cycle: the
	// accounts of past slots are spread over the rest of the cycle.
	FirstCycleAll = taskspec.FirstCycleAll
	// FirstCycleNext starts at the next cycle.
	FirstCycleNext = taskspec.FirstCycleNext
)

// SyncArgs are the arguments of a sync job (River's job args, kind
// "riverslot_sync"), as a SyncFunc reads them from job.Args:
//
//	Task       string    // the task that scheduled the sync
//	AccountID  uuid.UUID // the account to sync
//	CycleStart time.Time // the nominal start of the sync's cycle
//	Slot       int       // the account's slot in the cycle, from 0
//	NotAfter   time.Time // the latest start, when the fan-out moved the sync (else zero)
//
// A sync that starts after its NotAfter (the plan's, when zero) completes
// without calling Sync: the next cycle syncs the account.
type SyncArgs = syncjob.Args

// SyncFunc is the application's work for one account. Returning an error
// makes River retry the job with its usual backoff, up to the task's
// MaxAttempts.
type SyncFunc = syncjob.SyncFunc

// SkipFunc hears of a sync that completed without calling Sync, and why:
// SkippedStale (it could start only less than half a cycle before the
// account's next regular sync: an outage, a backlog), SkippedUpstreamDown
// or SkippedUpstreamThrottled (its upstream's breaker or rate limit held
// it past that time). It runs once per such sync, before the job
// completes; it must be quick, and the skip stands whatever it does.
type SkipFunc = syncjob.SkipFunc

// The reasons a SkipFunc hears.
const (
	SkippedStale             = syncjob.SkippedStale
	SkippedUpstreamDown      = upstream.SkippedDown
	SkippedUpstreamThrottled = upstream.SkippedThrottled
)

// Task is one periodic per-account task.
type Task struct {
	// Name identifies the task in job args, unique jobs and logs. Required;
	// letters, digits, '_', '-' and '.', at most 64 bytes. Renaming a task
	// moves its accounts' offsets unless Seed is set.
	Name string

	// Cycle is how often every account is synced, e.g. 24*time.Hour. It must
	// be a whole number of seconds that is a multiple of 2 s, at least 16 s
	// (CycleMin); it is split into gcd(seconds, 256) slots (24h gives 128
	// slots of 11m15s, 15 min only 4: Check warns below 8), or with Buckets
	// 65536 into gcd(milliseconds, 65536) slots (24h gives 1,024 slots of
	// 1m24.375s). Changing it moves every account once (the old cycle
	// finishes under its own plan). Required, unless Monthly is set.
	Cycle time.Duration

	// Monthly makes the cycle a calendar month in Location (UTC when
	// nil): an account's place is a fixed fraction of the month, so it is
	// synced at month start + that fraction × the month's length, once
	// every month, and a 28-day month carries the same load per second
	// as a 31-day one (no pile-up on the 28th to the 31st as with
	// day-of-month anchors). The month's slots are its days in Location
	// (23 or 25 hours on a DST change); each day's per-slot job selects
	// the accounts due that day, so an account added mid-month is synced
	// from the next day its place falls on (this month or the next).
	// Cycle must be 0; Buckets is 65536; TriggerOffset, Weight, Phase and
	// OppositeOf are not supported. The rules stated in half cycles (the
	// late window, NotAfter) use half the month. Defaults to false.
	Monthly bool

	// Buckets is how many buckets accounts are hashed into: 256 (the last
	// byte of the UUID) or 65536 (the last two bytes, byte 15 × 256 + byte
	// 14). 65536 gives a cycle up to 256 times more, shorter slots (24h:
	// 1,024 instead of 128), so fewer sync jobs wait in the queue at once.
	// The last byte stays the high part, so switching a task from 256 to
	// 65536 moves each account only within its old slot. Each bucket count
	// has its own index (CreateIndexes creates it). Defaults to 256.
	Buckets int

	// TriggerOffset shifts cycle starts: after local midnight when Location
	// is set (30*time.Minute and Europe/London syncs after 00:30 UK time),
	// else after the Unix epoch. Must be in [0, Cycle). Defaults to 0.
	TriggerOffset time.Duration

	// Location makes cycle starts wall-clock times in that zone; Cycle must
	// then divide 24h. See slotplan.Schedule for DST change days. Defaults
	// to nil: an absolute UTC grid.
	Location *time.Location

	// AccountsPool reaches the database holding Table (the app's database
	// or a read replica of it), when that is not River's. River's jobs and
	// each fan-out's cursor stay in River's database: a per-slot job reads
	// each page of accounts with a plain read on this pool and inserts its
	// sync jobs and advances its cursor in one transaction on River's, so a
	// fan-out killed mid-batch still resumes exactly once. The sync job's
	// existence check, Check and CreateIndexes use it too, and so does a
	// weighted task's placement, whose pins tables live next to Table: a
	// weighted task needs a writable AccountsPool (the primary, not a
	// replica). Defaults to Config.AccountsPool, else the pool given to New.
	AccountsPool *pgxpool.Pool

	// Schema of the accounts table. Defaults to "" (search_path).
	Schema string
	// Table holding the accounts. Required.
	Table string
	// IDColumn is the account's uuid column. Defaults to "id".
	IDColumn string
	// Filter is an optional SQL boolean condition on Table's rows, e.g.
	// "active AND NOT restricted". It must be one balanced expression
	// without ';', comments or bind parameters; it is trusted application
	// SQL, spliced into queries inside parentheses: never build it from
	// user input. Check validates the exact queries it ends up in. Defaults
	// to "" (every row).
	Filter string

	// Weight is an optional numeric SQL expression of Table's columns
	// giving each account's cost, e.g. "weight" or "seats * 2 + 1" (NULL,
	// negative, NaN and infinite values count as 0). When set, ordinary
	// accounts keep their hash slot and the few heavy ("jumbo") accounts
	// are pinned to slots so that every slot's total weight stays within
	// 1 + WeightEpsilon of the mean; the bootstrap of each cycle recomputes
	// the pins (docs/weights-and-phases.md has the rule) in the table
	// riverslot_pins, which CreateIndexes creates in Schema: up to
	// PinsDirectMax accounts by scanning the table, above it from a weight
	// census that a census job takes in bounded steps ahead of the cycle.
	// Like Filter it is trusted application SQL. Defaults to "" (hash
	// placement only).
	Weight string

	// WeightEpsilon bounds a weighted task's slot load: each slot at most
	// (1 + WeightEpsilon) × the mean slot weight, unless a single account
	// is heavier than that. In (0, 1]. Defaults to 0.10.
	WeightEpsilon float64

	// PinsTimeout bounds how long a weighted task's bootstrap may spend
	// computing a cycle's pins (each of its queries runs under the
	// statement_timeout left of it). A computation that does not finish in
	// time is rolled back, and the cycle follows the latest pins computed
	// before it (or hash placement if there are none) instead of being
	// lost: its bootstrap logs a warning, records the fallback in its
	// output, and inserts the per-slot jobs at once. The bootstrap job's own
	// timeout is twice PinsTimeout (1 minute by default, River's default
	// job timeout), and Configure's RescueStuckJobsAfter is above it. Only
	// for a task with Weight. Defaults to 30 s.
	PinsTimeout time.Duration

	// Phase shifts this task's slots around the cycle by a fraction of it,
	// in [0, 1): the accounts of bucket slot k are synced in slot
	// (k + Phase×slots) mod slots, at the same offset inside the slot.
	// Phase×slots must be a whole number. Two tasks half a cycle apart never
	// serve an account at the same time. Defaults to 0.
	Phase float64

	// OppositeOf names another task of the same scheduler that this task
	// must never meet on an account: this task's Phase becomes that task's
	// plus 1/2 (mod 1), so each account is synced by the two tasks about
	// half a cycle apart, at least half a cycle minus one slot. Cycle must
	// equal that task's. Set Phase or OppositeOf, not both.
	OppositeOf string

	// Seed is mixed into every account's offset. Defaults to 0, which means
	// a seed derived from Name (FNV-1a 64), so two tasks place the same
	// account at different offsets. Changing it moves every account.
	Seed uint64

	// BatchSize is how many accounts a per-slot job enqueues per
	// transaction (one multi-row insert). Defaults to 2000; at most 50,000.
	BatchSize int

	// Queue for sync jobs. Defaults to river.QueueDefault.
	Queue string
	// ControlQueue for bootstrap and per-slot jobs. Defaults to Queue.
	ControlQueue string
	// Priority of sync jobs (1 highest, 4 lowest). Defaults to 2. Bootstrap
	// and per-slot jobs run at priority 1, ahead of a backlog of syncs.
	Priority int
	// MaxAttempts of a sync job. Defaults to 5.
	MaxAttempts int
	// SyncTimeout bounds one Sync call. Defaults to 1 minute.
	SyncTimeout time.Duration
	// PerSlotTimeout bounds one per-slot attempt; a timed-out attempt is
	// retried from its last committed batch, so a short timeout loses no
	// work and keeps the rescue delay Configure sets short. Defaults to 1
	// minute.
	PerSlotTimeout time.Duration

	// Lead is how long before its slot a per-slot job runs, so its sync
	// jobs are in the queue before River's scheduler (5 s ticks) must
	// promote them and start on time; every sync's target time stays where
	// it is. Defaults to min(10 s, half a slot); must be less than a slot.
	Lead time.Duration

	// LatePolicy handles accounts enqueued more than LateGrace after their
	// target time: LatePolicySpread (default) or LatePolicySkip.
	LatePolicy LatePolicy
	// LateGrace is how far past its target an account may be and still be
	// enqueued at its target (to run at once). Defaults to the slot
	// duration; at most the cycle.
	LateGrace time.Duration

	// FirstCycle decides what the task's first cycle (the ledger records
	// no earlier one) does when it started before the app did, as on a
	// first deploy at 21:59 of a 24 h cycle: FirstCycleLate (default: as
	// any late cycle, past slots' accounts spread within half a cycle or
	// skipped until the next cycle), FirstCycleAll (every account synced
	// within this cycle, past slots' accounts spread over its rest) or
	// FirstCycleNext (nothing until the next cycle starts). The first
	// bootstrap logs at warn what it does. For a task of an OppositeOf
	// pair the pair's rule comes first: a late account is spread only
	// within its own slot, so FirstCycleAll syncs the past slots' accounts
	// no sooner than FirstCycleLate does.
	FirstCycle FirstCycle

	// Upstream is an optional SQL expression of Table's columns naming
	// each account's upstream (the bank, the API host), e.g. "bank_id".
	// The fan-out reads its value with the account (as text, cut to 128
	// bytes) and carries it in the sync job, so no sync queries for it;
	// accounts where it is NULL, and every account when it is empty,
	// share the task's default upstream (key ""). Like Filter it is
	// trusted application SQL. Defaults to "".
	Upstream string

	// Limits are each upstream's limits (Rate, Burst, Concurrency) and
	// circuit breaker (FailureThreshold, Cooldown), held across every node
	// in River's database (Migrate creates the tables). An operator
	// overrides one upstream's limits at run time with
	// Scheduler.SetUpstreamLimits or `riverslot upstream set`. A sync over
	// its upstream's limit, or deferred by its open breaker, is snoozed
	// (no attempt used, no worker held) in its place in line; one that
	// cannot start before its NotAfter completes as skipped, with the
	// reason (upstream_throttled, upstream_down). Defaults to no limits;
	// a task with neither Upstream nor Limits does not touch the tables.
	Limits UpstreamLimits

	// Punctual makes the task's fan-outs and syncs start on time: its
	// per-slot and sync jobs are inserted available with their future
	// scheduled time, instead of scheduled. River's producers fetch only
	// jobs whose time has come, so each starts within the client's
	// FetchPollInterval (River's default 1 s) of its time, on any node; a
	// scheduled job waits for River's scheduler, which makes due jobs
	// available every 5 s on the leader (up to 5 s late, and not at all
	// while a new leader is elected after the old one died: 15-20 s). It matters for short slots (a
	// slot shorter than River's tick) and for calls that must come at the
	// same second every period (riverslot serve sets it). A sync job River
	// retries or snoozes goes through River's scheduler as any job. Set it
	// on every node of a rolling deploy before relying on it (a node
	// without it inserts scheduled jobs, which are merely late). The cost:
	// River's fetch orders by priority before time, so while fewer jobs
	// are due than it asks for, each fetch also walks the queue's jobs
	// that wait for their time (about one slot's syncs and the cycle's
	// per-slot jobs; at 100M accounts a day, some 100,000 index entries a
	// fetch, about 2 ms on 2 cores: docs/guarantees.md). Defaults to false.
	Punctual bool

	// Sync is the application's work for one account. Required.
	Sync SyncFunc

	// OnSkip, when set, hears of each sync completed without calling Sync
	// and why (SkipFunc): an app that keeps a history per account records
	// the miss there. Accounts a fan-out skipped (LatePolicySkip, or a
	// cycle that began before the first) had no sync job: the ledger
	// counts them, OnSkip does not hear of them. Defaults to nil.
	OnSkip SkipFunc
}

// UpstreamLimits are an upstream's limits (Task.Limits); a zero field sets
// no limit. The limits hold on every node at once: they are kept in
// PostgreSQL, per task and upstream key.
type UpstreamLimits struct {
	// Rate is syncs started per second over all nodes. Defaults to no
	// limit.
	Rate float64
	// Burst is how many syncs may start at once above Rate after a quiet
	// spell. Defaults to 1 when Rate is set.
	Burst int
	// Concurrency is syncs of the upstream in flight at once over all
	// nodes. Defaults to no limit.
	Concurrency int
	// FailureThreshold is how many consecutive failed syncs open the
	// upstream's circuit breaker, which then defers every sync of the
	// upstream for Cooldown and lets one probe through: its success closes
	// the breaker, its failure opens it for another Cooldown. Defaults to
	// 0: no breaker.
	FailureThreshold int
	// Cooldown is how long an open breaker defers syncs before a probe.
	// Defaults to 30s.
	Cooldown time.Duration
	// Latency is how long one sync's call to the upstream usually takes.
	// It is not enforced: Check and UpstreamBudgets weigh it with
	// Concurrency, which lets at most Concurrency / Latency syncs a
	// second through, below Rate when the bank is slow. Defaults to
	// unknown: the concurrency bound is not weighed.
	Latency time.Duration
}

// Throttled returns the error a SyncFunc returns when the upstream asked
// it to slow down (an HTTP 429 with Retry-After): the sync is tried again
// after retryAfter without using one of its attempts, and, for a task with
// Upstream or Limits, every sync of that upstream waits as long, on every
// node.
func Throttled(retryAfter time.Duration, err error) error { return syncjob.Throttled(retryAfter, err) }

// NotUpstream marks an error of a SyncFunc that is not its upstream's
// fault (the app's own database, a bug): River retries the job as for any
// error, but the upstream's circuit breaker does not count it. Without it,
// every error a SyncFunc returns counts toward Limits.FailureThreshold.
func NotUpstream(err error) error { return syncjob.NotUpstream(err) }

// config is t as taskspec.Build takes it.
func (t Task) config() taskspec.Config {
	return taskspec.Config{
		Name: t.Name, Cycle: t.Cycle, Monthly: t.Monthly, Buckets: t.Buckets, TriggerOffset: t.TriggerOffset, Location: t.Location,
		AccountsPool: t.AccountsPool, Schema: t.Schema, Table: t.Table, IDColumn: t.IDColumn, Filter: t.Filter,
		Weight: t.Weight, WeightEpsilon: t.WeightEpsilon, PinsTimeout: t.PinsTimeout, Phase: t.Phase, OppositeOf: t.OppositeOf,
		Seed: t.Seed, BatchSize: t.BatchSize, Queue: t.Queue, ControlQueue: t.ControlQueue, Priority: t.Priority,
		MaxAttempts: t.MaxAttempts, SyncTimeout: t.SyncTimeout, PerSlotTimeout: t.PerSlotTimeout, Lead: t.Lead,
		LatePolicy: t.LatePolicy, LateGrace: t.LateGrace, FirstCycle: t.FirstCycle, Upstream: t.Upstream, Limits: upstream.Limits(t.Limits), HasSync: t.Sync != nil,
	}
}
