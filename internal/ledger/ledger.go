// Package ledger is riverslot's record of the cycles it has made, in a small
// table in River's schema (riverslot_ledger): one row per cycle's bootstrap
// and one per per-slot job, inserted in the same transaction as the jobs
// with ON CONFLICT DO NOTHING deciding whether each job is inserted. A
// cycle is therefore made once per (task, cycle start, plan), and each of
// its slots fanned out by one per-slot job, however early River deletes
// finished jobs. When a fan-out finishes, its row records what it did
// (accounts selected, sync jobs inserted, late accounts spread and skipped)
// in the transaction of its last batch, so the figures outlive River's
// deletions. Rows older than Horizon are pruned by the bootstraps.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/sqlbucket"
)

// Table is the ledger's table name, in River's schema.
const Table = "riverslot_ledger"

// BootstrapSlot is the slot of a cycle's bootstrap row.
const BootstrapSlot = -1

// DDL returns the statements that create the ledger in schema ("" for the
// search path), idempotently.
func DDL(schema string) []string {
	table := sqlbucket.QualifiedTable(schema, Table)
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
	task text NOT NULL,
	cycle_start timestamptz NOT NULL,
	plan text NOT NULL,
	slot int NOT NULL,
	job_id bigint,
	created_at timestamptz NOT NULL DEFAULT now(),
	accounts bigint,
	range_accounts bigint,
	inserted bigint,
	skipped bigint,
	late_spread bigint,
	late_skipped bigint,
	batches int,
	finished_at timestamptz,
	PRIMARY KEY (task, cycle_start, plan, slot)
)`,
		`COMMENT ON TABLE ` + table + ` IS 'riverslot: one row per cycle bootstrap (slot -1) and per-slot job; keeps cycles unique after River deletes their jobs'`,
		// Version 2: the cycle's row records what its bootstrap decided
		// (its end, the latest NotAfter of its syncs, its placement and
		// pins, how long it is kept), a slot's row its state. Rows of
		// version 1 keep NULLs there; readers fall back as documented on
		// each column.
		`ALTER TABLE ` + table + `
	ADD COLUMN IF NOT EXISTS cycle_end timestamptz,
	ADD COLUMN IF NOT EXISTS deadline timestamptz,
	ADD COLUMN IF NOT EXISTS keep_until timestamptz,
	ADD COLUMN IF NOT EXISTS placement text,
	ADD COLUMN IF NOT EXISTS pins jsonb,
	ADD COLUMN IF NOT EXISTS fallback text,
	ADD COLUMN IF NOT EXISTS started_at timestamptz,
	ADD COLUMN IF NOT EXISTS failed_at timestamptz,
	ADD COLUMN IF NOT EXISTS error text,
	ADD COLUMN IF NOT EXISTS first_cycle boolean`,
		// The pins a cycle follows may be another task's (OppositeOf):
		// pin pruning finds the cycles that follow a task's pins here.
		`CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{Table + "_pins"}.Sanitize() + ` ON ` + table + ` ((pins->>'task'), cycle_start) WHERE slot = -1 AND pins IS NOT NULL`,
		// Version 3: the cycle's late policy, as its bootstrap's node had
		// it: its fan-outs place late accounts by it, and a later plan's
		// overlap rule reads it, whatever the policy of the node that runs
		// them (a deploy may change LateGrace or LatePolicy mid-cycle).
		`ALTER TABLE ` + table + `
	ADD COLUMN IF NOT EXISTS late_policy text,
	ADD COLUMN IF NOT EXISTS late_grace_us bigint`,
		// Version 4: the rest of the cycle's plan (its trigger offset and
		// zone), and how its sync jobs ended, counted by the nodes that ran
		// them (Tally): Status and the history read these, not River's
		// completed jobs, which River may have deleted.
		`ALTER TABLE ` + table + `
	ADD COLUMN IF NOT EXISTS trigger_offset_us bigint,
	ADD COLUMN IF NOT EXISTS location text,
	ADD COLUMN IF NOT EXISTS synced bigint,
	ADD COLUMN IF NOT EXISTS gone bigint,
	ADD COLUMN IF NOT EXISTS stale bigint,
	ADD COLUMN IF NOT EXISTS upstream_skipped bigint,
	ADD COLUMN IF NOT EXISTS failed bigint,
	ADD COLUMN IF NOT EXISTS cancelled bigint,
	ADD COLUMN IF NOT EXISTS lateness bigint[]`,
		// Version 5: shards. A sharded task's cycle records the shard that
		// made it and the version of the shard map it followed; the maps
		// themselves, each shard's copy, are in riverslot_shards.
		`ALTER TABLE ` + table + `
	ADD COLUMN IF NOT EXISTS shard text,
	ADD COLUMN IF NOT EXISTS shard_version bigint`,
		`CREATE TABLE IF NOT EXISTS ` + sqlbucket.QualifiedTable(schema, ShardsTable) + ` (
	task text NOT NULL,
	version bigint NOT NULL,
	effective_from timestamptz NOT NULL,
	map jsonb NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, version)
)`,
		`COMMENT ON TABLE ` + sqlbucket.QualifiedTable(schema, ShardsTable) + ` IS 'riverslot: this shard''s copy of each sharded task''s shard maps, by version; a cycle follows the latest version in effect at its start'`,
		// Version 6: a cycle's place in its task's commit order
		// (recorded_at, see RecordCycle), and how far a slot's fan-out
		// got (its cursor after its last committed batch, and when that
		// batch committed): the overlap rule of a plan change reads which
		// accounts a fan-out that stopped for good had placed. Rows of
		// earlier versions keep NULLs: their created_at orders them, and
		// a stopped fan-out without a cursor placed none.
		`ALTER TABLE ` + table + `
	ADD COLUMN IF NOT EXISTS recorded_at timestamptz,
	ADD COLUMN IF NOT EXISTS progress_at timestamptz,
	ADD COLUMN IF NOT EXISTS cursor_pinned boolean,
	ADD COLUMN IF NOT EXISTS cursor_bucket int,
	ADD COLUMN IF NOT EXISTS cursor_id uuid`,
	}
}

// Horizon is how long the ledger keeps a cycle's rows after its start: four
// cycles plus an hour, longer than any retry of a cycle's per-slot jobs and
// than the late window of its syncs. A bootstrap prunes the older rows of
// its task; a cycle that started more than Oldest ago is refused.
func Horizon(cycle time.Duration) time.Duration { return 4*cycle + time.Hour }

// Oldest is how long after its start a cycle may still be bootstrapped:
// one cycle less than Horizon, so that no bootstrap runs for a cycle whose
// rows a node with a clock up to a cycle ahead may have pruned.
func Oldest(cycle time.Duration) time.Duration { return Horizon(cycle) - cycle }

// ErrMissing is returned when the ledger table does not exist.
var ErrMissing = errors.New("riverslot's ledger table " + Table + " does not exist in River's schema; run riverslot.Migrate (or riverslot.MigrateLedger) on River's schema once after upgrading")

// ErrOutdated is returned when the ledger table lacks the columns this
// version records (it was made by an older riverslot).
var ErrOutdated = errors.New("riverslot's ledger table " + Table + " was made by an older riverslot and lacks columns this version records; run riverslot.Migrate (or riverslot.MigrateLedger) on River's schema once after upgrading")

// Ledger reads and writes the ledger in one schema.
type Ledger struct {
	table  string // quoted and qualified
	shards string // the shard maps' table beside it, quoted and qualified
}

// New returns the ledger of River's schema ("" for the search path).
func New(schema string) Ledger {
	return Ledger{table: sqlbucket.QualifiedTable(schema, Table), shards: sqlbucket.QualifiedTable(schema, ShardsTable)}
}

// QualifiedTable returns the ledger's quoted, qualified table name.
func (l Ledger) QualifiedTable() string { return l.table }

// StatementError returns the error of a statement on the ledger made
// outside this package as the ledger's own methods return theirs: nil for
// nil, else "error <what>: " and ErrMissing when the ledger's table does not
// exist, ErrOutdated when it lacks a column (Migrate fixes both), or err.
func StatementError(err error, what string) error { return wrap(err, what) }

// wrap turns Postgres' undefined_table into ErrMissing.
func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	if isUndefinedTable(err) {
		return fmt.Errorf("error %s: %w", what, ErrMissing)
	}
	if isUndefinedColumn(err) {
		return fmt.Errorf("error %s: %w", what, ErrOutdated)
	}
	return fmt.Errorf("error %s: %w", what, err)
}

// ClaimBootstrap records the bootstrap of (task, cycleStart, plan) by job
// in tx. It returns false when the cycle was bootstrapped already: the
// caller must then insert nothing. A concurrent claim of the same cycle
// waits for the other transaction and is refused if it commits.
func (l Ledger) ClaimBootstrap(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, jobID int64) (bool, error) {
	tag, err := tx.Exec(ctx, "INSERT INTO "+l.table+" (task, cycle_start, plan, slot, job_id) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
		task, cycleStart, plan, BootstrapSlot, jobID)
	if err != nil {
		return false, wrap(err, "claiming the cycle's bootstrap in the ledger")
	}
	return tag.RowsAffected() == 1, nil
}

// ClaimSlots records slots 0..slots-1 of the cycle in tx and returns those
// that were not recorded yet, in order: only their per-slot jobs may be
// inserted.
func (l Ledger) ClaimSlots(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slots int) ([]int, error) {
	all := make([]int, slots)
	for i := range all {
		all[i] = i
	}
	return l.ClaimSlotList(ctx, tx, task, plan, cycleStart, all)
}

// ClaimSlotList is ClaimSlots for the slots listed (in order), a shard's
// share of the cycle.
func (l Ledger) ClaimSlotList(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slots []int) ([]int, error) {
	s32 := make([]int32, len(slots))
	for i, s := range slots {
		s32[i] = int32(s)
	}
	rows, err := tx.Query(ctx, "INSERT INTO "+l.table+" (task, cycle_start, plan, slot) SELECT $1, $2, $3, s FROM unnest($4::int[]) s ON CONFLICT DO NOTHING RETURNING slot",
		task, cycleStart, plan, s32)
	if err != nil {
		return nil, wrap(err, "claiming the cycle's slots in the ledger")
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, wrap(err, "claiming the cycle's slots in the ledger")
	}
	out := make([]int, len(claimed))
	for i, s := range claimed {
		out[i] = int(s)
	}
	sortInts(out)
	return out, nil
}

// SetJobs records the per-slot job id of each claimed slot.
func (l Ledger) SetJobs(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slots []int, jobIDs []int64) error {
	if len(slots) == 0 {
		return nil
	}
	s32 := make([]int32, len(slots))
	for i, s := range slots {
		s32[i] = int32(s)
	}
	_, err := tx.Exec(ctx, "UPDATE "+l.table+" l SET job_id = j.id FROM unnest($4::int[], $5::bigint[]) j(slot, id)"+
		" WHERE l.task = $1 AND l.cycle_start = $2 AND l.plan = $3 AND l.slot = j.slot",
		task, cycleStart, plan, s32, jobIDs)
	return wrap(err, "recording the per-slot jobs in the ledger")
}

// SlotJob returns the per-slot job id the ledger records for the slot, and
// whether a row exists (false for jobs made before the ledger, or whose
// cycle was pruned). The id is 0 when the row has none.
func (l Ledger) SlotJob(ctx context.Context, q Queryer, task, plan string, cycleStart time.Time, slot int) (int64, bool, error) {
	var id *int64
	err := q.QueryRow(ctx, "SELECT job_id FROM "+l.table+" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4",
		task, cycleStart, plan, slot).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, wrap(err, "reading the slot's row in the ledger")
	case id == nil:
		return 0, true, nil
	}
	return *id, true, nil
}

// SlotResult is what one slot's fan-out did.
type SlotResult struct {
	// Accounts is every account the fan-out selected (Inserted plus
	// Skipped); RangeAccounts those of the slot's bucket range (the hash
	// slot, pinned accounts included), the count Status expects a slot to
	// select.
	Accounts, RangeAccounts int64
	Inserted, Skipped       int64
	// LateSpread and LateSkipped count the late accounts spread over the
	// rest of the late window and those skipped as too late.
	LateSpread, LateSkipped int64
	Batches                 int
}

// RecordSlot records the slot's finished fan-out by job in tx (the
// transaction of its last batch). Its finished_at is the statement's
// clock, after the batch placed its accounts (the transaction's start is
// before): the overlap rule bounds the batches' placement times by it. A
// row made before the ledger existed, or pruned, is created; a row claimed
// by another job is left alone, and false returned: the caller must then
// roll tx back (the slot is the other job's to fan out).
func (l Ledger) RecordSlot(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slot int, jobID int64, r SlotResult) (bool, error) {
	tag, err := tx.Exec(ctx, "INSERT INTO "+l.table+" AS l (task, cycle_start, plan, slot, job_id, accounts, range_accounts, inserted, skipped, late_spread, late_skipped, batches, finished_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, clock_timestamp())"+
		" ON CONFLICT (task, cycle_start, plan, slot) DO UPDATE SET job_id = excluded.job_id, accounts = excluded.accounts, range_accounts = excluded.range_accounts,"+
		" inserted = excluded.inserted, skipped = excluded.skipped, late_spread = excluded.late_spread, late_skipped = excluded.late_skipped,"+
		" batches = excluded.batches, finished_at = excluded.finished_at"+
		" WHERE l.job_id IS NULL OR l.job_id = excluded.job_id",
		task, cycleStart, plan, slot, jobID, r.Accounts, r.RangeAccounts, r.Inserted, r.Skipped, r.LateSpread, r.LateSkipped, r.Batches)
	if err != nil {
		return false, wrap(err, "recording the slot's fan-out in the ledger")
	}
	return tag.RowsAffected() == 1, nil
}

// Cursor is where a fan-out's last committed batch left it: the last
// account it placed, in the order it places them (the slot's bucket range
// by (bucket, id), then, when Pinned, the accounts pinned to the slot by
// id).
type Cursor struct {
	Pinned  bool
	Bucket  int
	AfterID string // a UUID
}

// RecordProgress records in tx (a batch's transaction) how far job's
// fan-out of the slot has come, and claims the slot's row for job: what
// Status shows of a slot fanning out, and what the overlap rule reads of a
// fan-out that stops for good before it finishes (its cursor, and when its
// last batch committed: progress_at, the statement's clock, after the
// batch placed its accounts). A row made before the ledger existed, or
// pruned, is created. It returns false when the row is claimed by another
// job: the caller must then roll tx back, so that two per-slot jobs of one
// slot never both fan it out. A row job finished already is left as it is.
func (l Ledger) RecordProgress(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slot int, jobID int64, r SlotResult, c Cursor) (bool, error) {
	// ON CONFLICT DO UPDATE locks the row whether or not its WHERE holds:
	// a concurrent claim waits for this transaction, then sees its job.
	tag, err := tx.Exec(ctx, "INSERT INTO "+l.table+" AS l (task, cycle_start, plan, slot, job_id, accounts, range_accounts, inserted, skipped, late_spread, late_skipped, batches,"+
		" cursor_pinned, cursor_bucket, cursor_id, progress_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, nullif($15, '')::uuid, clock_timestamp())"+
		" ON CONFLICT (task, cycle_start, plan, slot) DO UPDATE SET job_id = excluded.job_id, accounts = excluded.accounts, range_accounts = excluded.range_accounts,"+
		" inserted = excluded.inserted, skipped = excluded.skipped, late_spread = excluded.late_spread, late_skipped = excluded.late_skipped, batches = excluded.batches,"+
		" cursor_pinned = excluded.cursor_pinned, cursor_bucket = excluded.cursor_bucket, cursor_id = excluded.cursor_id, progress_at = excluded.progress_at"+
		" WHERE (l.job_id IS NULL OR l.job_id = excluded.job_id) AND l.finished_at IS NULL",
		task, cycleStart, plan, slot, jobID, r.Accounts, r.RangeAccounts, r.Inserted, r.Skipped, r.LateSpread, r.LateSkipped, r.Batches,
		c.Pinned, c.Bucket, c.AfterID)
	if err != nil {
		return false, wrap(err, "recording the slot's progress in the ledger")
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Claimed by another job, or finished by this one (a retry after its
	// last batch found accounts added since): the row is locked, read it.
	var owner *int64
	if err := tx.QueryRow(ctx, "SELECT job_id FROM "+l.table+" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4",
		task, cycleStart, plan, slot).Scan(&owner); err != nil {
		return false, wrap(err, "recording the slot's progress in the ledger")
	}
	return owner != nil && *owner == jobID, nil
}

// Prune deletes, in tx, the task's cycles whose own keep_until (their
// start plus the Horizon of the plan they were made under) is before now,
// with their slots, and returns how many rows it deleted. A cycle of
// another plan is kept as long as its own plan needs it, whatever the
// node's Cycle: a change from 24 h to 1 h does not prune the 24 h cycle
// still running. Rows made before keep_until was recorded are kept until
// cutoff (the pruning node's own horizon, PruneCutoff), as before.
func (l Ledger) Prune(ctx context.Context, tx pgx.Tx, task string, cutoff, now time.Time) (int64, error) {
	var cycles int64
	err := tx.QueryRow(ctx, "WITH gone AS (DELETE FROM "+l.table+" c WHERE c.task = $1 AND c.slot = $4"+
		" AND coalesce(c.keep_until < $3, c.cycle_start < $2) RETURNING c.cycle_start, c.plan),"+
		" slots AS (DELETE FROM "+l.table+" s USING gone g WHERE s.task = $1 AND s.cycle_start = g.cycle_start AND s.plan = g.plan AND s.slot >= 0 RETURNING 1)"+
		" SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM slots)",
		task, cutoff, now, BootstrapSlot).Scan(&cycles)
	if err != nil {
		return 0, wrap(err, "pruning the ledger")
	}
	// Slot rows whose cycle row is gone (made before the cycle row was
	// kept with them) go by the start cutoff alone.
	orphans, err := tx.Exec(ctx, "DELETE FROM "+l.table+" s WHERE s.task = $1 AND s.slot >= 0 AND s.cycle_start < $2"+
		" AND NOT EXISTS (SELECT 1 FROM "+l.table+" c WHERE c.task = s.task AND c.cycle_start = s.cycle_start AND c.plan = s.plan AND c.slot = $3)",
		task, cutoff, BootstrapSlot)
	if err != nil {
		return 0, wrap(err, "pruning the ledger")
	}
	return cycles + orphans.RowsAffected(), nil
}

// Cycle is what a cycle's bootstrap decided, as the cycle's row records
// it: every reader of the cycle (the overlap rule of a plan change, pin
// pruning, Status, the history, the account lookup) reads it here, never
// from River's job table, which may have deleted the cycle's jobs.
type Cycle struct {
	Task       string
	Plan       taskspec.PlanKey
	Start, End time.Time
	// Deadline is the latest NotAfter a sync of the cycle can carry: no
	// sync of the cycle calls Sync after it.
	Deadline time.Time
	// KeepUntil is when the ledger may prune the cycle: its start plus
	// the Horizon of its own plan.
	KeepUntil time.Time
	// Placement is "hash" or "pinned" (the per-slot tier's constants);
	// empty for a cycle recorded before placements were (its nodes' own
	// Weight decides).
	Placement string
	// Pins names the pins a pinned cycle follows.
	Pins *taskspec.PinsRef
	// Fallback is the pin computation's fallback ("previous", "hash").
	Fallback string
	// First: the task's first cycle, bootstrapped after it started under
	// FirstCycleAll: its late accounts are spread over the rest of it.
	First bool
	// LatePolicy and LateGrace are the late policy the cycle's bootstrap
	// decided with (LatePolicy empty for a cycle recorded before they
	// were: the node's own applies).
	LatePolicy taskspec.LatePolicy
	LateGrace  time.Duration
	// TriggerOffset and Location are the rest of the plan the cycle was
	// decided under: its schedule's offset and zone ("" for an absolute
	// UTC grid; unknown for a cycle recorded before they were).
	TriggerOffset time.Duration
	Location      string
	// Shard and ShardVersion are, for a sharded task, the shard that made
	// the cycle and the version of the shard map it followed: its slots
	// are those the map gives the shard ("" and 0 for an unsharded task).
	Shard        string
	ShardVersion int64
	CreatedAt    time.Time
	// Recorded is the cycle's place in its task's commit order: a cycle
	// whose Recorded is earlier committed before this one took its own
	// (see RecordCycle). Its created_at for a cycle recorded before
	// version 6.
	Recorded time.Time
	// Outcomes are how the cycle's sync jobs ended, as the nodes that ran
	// them counted them (read back only; RecordCycle does not write them).
	Outcomes Outcomes
}

// RecordCycle records in tx what the bootstrap that claimed c's cycle
// decided for it, and the cycle's place in its task's commit order
// (recorded_at).
//
// The order is what the overlap rule of a plan change reads: a cycle
// leaves an account to the cycles recorded before it, and never looks at
// those recorded after. It must therefore be the order in which the
// cycles become visible: a created_at of now(), the transaction's start,
// is not (two plans bootstrapping one cycle at once: the one that began
// first and committed last sorted first, while the other's fan-out had
// already run without seeing it; each missed the other). So recorded_at
// is taken under a per-task advisory lock held until the transaction
// ends: of two bootstraps, the second waits for the first to commit (or
// roll back) before it takes its own, so every cycle recorded before
// another was committed before that one's fan-outs can read the ledger.
// Its value is the database's clock, raised past every recorded_at (or
// created_at) of the task already committed, so that a clock stepping
// back cannot reorder it. The lock is held for the rest of the bootstrap
// only (its slots' rows, per-slot jobs and pruning): the pins, the slow
// part, are computed before.
func (l Ledger) RecordCycle(ctx context.Context, tx pgx.Tx, c Cycle) error {
	var ordered bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($2) AND attname = 'recorded_at' AND NOT attisdropped)"+
		" FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) l", l.table+" order "+c.Task, l.table).Scan(&ordered); err != nil {
		return wrap(err, "locking the task's order in the ledger")
	}
	var fallback *string
	if c.Fallback != "" {
		fallback = &c.Fallback
	}
	var latePolicy *string
	if c.LatePolicy != "" {
		p := string(c.LatePolicy)
		latePolicy = &p
	}
	set := "cycle_end = $5, deadline = $6, keep_until = $7, placement = $8, pins = $9, fallback = $10, first_cycle = $11, late_policy = $12, late_grace_us = $13, trigger_offset_us = $14, location = $15"
	args := []any{c.Task, c.Start, c.Plan, BootstrapSlot, c.End, c.Deadline, c.KeepUntil, c.Placement, c.Pins, fallback, c.First, latePolicy, c.LateGrace.Microseconds(), c.TriggerOffset.Microseconds(), c.Location}
	if c.Shard != "" {
		// Only a sharded cycle writes version 5's columns: an unsharded
		// fleet's new nodes keep making cycles on a version-4 ledger
		// until Migrate runs, in a rolling deploy.
		set += ", shard = $16, shard_version = $17"
		args = append(args, c.Shard, c.ShardVersion)
	}
	if ordered {
		// A ledger before version 6 (Migrate not run yet in a rolling
		// deploy) orders the cycle by its created_at, as before.
		set += ", recorded_at = greatest(clock_timestamp(), (SELECT max(coalesce(o.recorded_at, o.created_at)) + interval '1 microsecond' FROM " + l.table +
			" o WHERE o.task = $1 AND o.slot = $4))"
	}
	tag, err := tx.Exec(ctx, "UPDATE "+l.table+" SET "+set+" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4", args...)
	if err != nil {
		return wrap(err, "recording the cycle's decisions in the ledger")
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("recording the cycle's decisions in the ledger: no claimed row of task %q, plan %q, cycle %s", c.Task, c.Plan, c.Start.Format(time.RFC3339))
	}
	return nil
}

// SlotStarted records that job (the slot's per-slot job) started an
// attempt: the slot is fanning out, and a failure an earlier attempt
// recorded is cleared (an operator retried it).
func (l Ledger) SlotStarted(ctx context.Context, q Execer, task, plan string, cycleStart time.Time, slot int, jobID int64) error {
	_, err := q.Exec(ctx, "UPDATE "+l.table+" SET started_at = coalesce(started_at, now()), failed_at = NULL, error = NULL"+
		" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4 AND job_id = $5 AND finished_at IS NULL",
		task, cycleStart, plan, slot, jobID)
	return wrap(err, "recording the slot's start in the ledger")
}

// SlotFailed records that job's fan-out of the slot ended without
// finishing (its last attempt failed, or it was cancelled), with why.
func (l Ledger) SlotFailed(ctx context.Context, q Execer, task, plan string, cycleStart time.Time, slot int, jobID int64, reason string) error {
	return l.slotError(ctx, q, task, plan, cycleStart, slot, jobID, reason, true)
}

// SlotWaiting records why job's fan-out of the slot waits (the accounts
// database unreachable), for Status; the slot is not failed.
func (l Ledger) SlotWaiting(ctx context.Context, q Execer, task, plan string, cycleStart time.Time, slot int, jobID int64, reason string) error {
	return l.slotError(ctx, q, task, plan, cycleStart, slot, jobID, reason, false)
}

// slotError records reason (cut to 2,000 bytes on a UTF-8 boundary) on the
// slot's row while job owns it and has not finished: failed sets
// failed_at; a wait leaves a failed slot as it is.
func (l Ledger) slotError(ctx context.Context, q Execer, task, plan string, cycleStart time.Time, slot int, jobID int64, reason string, failed bool) error {
	if len(reason) > 2000 {
		reason = strings.ToValidUTF8(reason[:2000], "")
	}
	_, err := q.Exec(ctx, "UPDATE "+l.table+" SET error = $6, failed_at = CASE WHEN $7 THEN now() ELSE failed_at END"+
		" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4 AND job_id = $5 AND finished_at IS NULL AND ($7 OR failed_at IS NULL)",
		task, cycleStart, plan, slot, jobID, reason, failed)
	return wrap(err, "recording the slot's error in the ledger")
}

// Execer runs a statement: a pool, connection or transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PruneCutoff is the cutoff a bootstrap of cycleStart prunes its task's
// rows before, at now: Horizon before the earlier of the two (a cycle
// bootstrapped ahead of time never prunes the recent past).
func PruneCutoff(cycle time.Duration, cycleStart, now time.Time) time.Time {
	if now.Before(cycleStart) {
		cycleStart = now
	}
	return cycleStart.Add(-Horizon(cycle))
}
