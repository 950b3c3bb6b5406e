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
	"time"

	"github.com/jackc/pgx/v5"

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
var ErrMissing = errors.New("riverslot's ledger table " + Table + " does not exist in River's schema; run riverutil.Migrate (or riverutil.MigrateLedger) on River's schema once after upgrading")

// Ledger reads and writes the ledger in one schema.
type Ledger struct {
	table string // quoted and qualified
}

// New returns the ledger of River's schema ("" for the search path).
func New(schema string) Ledger { return Ledger{table: sqlbucket.QualifiedTable(schema, Table)} }

// QualifiedTable returns the ledger's quoted, qualified table name.
func (l Ledger) QualifiedTable() string { return l.table }

// wrap turns Postgres' undefined_table into ErrMissing.
func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	if isUndefinedTable(err) {
		return fmt.Errorf("error %s: %w", what, ErrMissing)
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
	rows, err := tx.Query(ctx, "INSERT INTO "+l.table+" (task, cycle_start, plan, slot) SELECT $1, $2, $3, s FROM generate_series(0, $4 - 1) s ON CONFLICT DO NOTHING RETURNING slot",
		task, cycleStart, plan, slots)
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
// transaction of its last batch). A row made before the ledger existed, or
// pruned, is created; a row claimed by another job is left alone (and
// false returned).
func (l Ledger) RecordSlot(ctx context.Context, tx pgx.Tx, task, plan string, cycleStart time.Time, slot int, jobID int64, r SlotResult) (bool, error) {
	tag, err := tx.Exec(ctx, "INSERT INTO "+l.table+" AS l (task, cycle_start, plan, slot, job_id, accounts, range_accounts, inserted, skipped, late_spread, late_skipped, batches, finished_at)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now())"+
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

// Prune deletes the task's rows of cycles that started before cutoff, in
// tx, and returns how many it deleted.
func (l Ledger) Prune(ctx context.Context, tx pgx.Tx, task string, cutoff time.Time) (int64, error) {
	tag, err := tx.Exec(ctx, "DELETE FROM "+l.table+" WHERE task = $1 AND cycle_start < $2", task, cutoff)
	if err != nil {
		return 0, wrap(err, "pruning the ledger")
	}
	return tag.RowsAffected(), nil
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
