package ledger

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queryer is what the read functions need of a pool, connection or
// transaction.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func sortInts(s []int) { slices.Sort(s) }

// Exists reports whether the ledger table exists.
func (l Ledger) Exists(ctx context.Context, q Queryer) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", l.table).Scan(&ok); err != nil {
		return false, wrap(err, "looking up the ledger table")
	}
	return ok, nil
}

// LatestCycle returns the start and plan of the task's latest bootstrapped
// cycle (planFirst first among cycles that start together), and false when
// the ledger has none, or does not exist.
func (l Ledger) LatestCycle(ctx context.Context, q Queryer, task, planFirst string) (time.Time, string, bool, error) {
	var (
		start time.Time
		plan  string
	)
	err := q.QueryRow(ctx, "SELECT cycle_start, plan FROM "+l.table+" WHERE task = $1 AND slot = $2 ORDER BY cycle_start DESC, plan = $3 DESC LIMIT 1",
		task, BootstrapSlot, planFirst).Scan(&start, &plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return time.Time{}, "", false, nil
	case err != nil:
		return time.Time{}, "", false, wrap(err, "finding the task's latest cycle in the ledger")
	}
	return start.UTC(), plan, true, nil
}

// CyclePlan returns the plan of the task's cycle at cycleStart as the
// ledger records its bootstrap (planFirst when it has one under it), and
// false when it records none.
func (l Ledger) CyclePlan(ctx context.Context, q Queryer, task string, cycleStart time.Time, planFirst string) (string, bool, error) {
	var plan string
	err := q.QueryRow(ctx, "SELECT plan FROM "+l.table+" WHERE task = $1 AND cycle_start = $2 AND slot = $3 ORDER BY plan = $4 DESC LIMIT 1",
		task, cycleStart, BootstrapSlot, planFirst).Scan(&plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return "", false, nil
	case err != nil:
		return "", false, wrap(err, "finding the plan of the task's cycle in the ledger")
	}
	return plan, true, nil
}

// Slot is one slot's row.
type Slot struct {
	Slot     int
	JobID    int64 // 0 when unknown
	Finished *time.Time
	SlotResult
}

// Slots returns the recorded slots of the task's cycle under plan, by slot
// (nil when the ledger does not exist).
func (l Ledger) Slots(ctx context.Context, q Queryer, task, plan string, cycleStart time.Time) (map[int]Slot, error) {
	rows, err := q.Query(ctx, "SELECT slot, coalesce(job_id, 0), finished_at, coalesce(accounts, 0), coalesce(range_accounts, 0), coalesce(inserted, 0), coalesce(skipped, 0),"+
		" coalesce(late_spread, 0), coalesce(late_skipped, 0), coalesce(batches, 0) FROM "+l.table+
		" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot >= 0", task, cycleStart, plan)
	if isUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading the cycle's slots in the ledger")
	}
	out := make(map[int]Slot)
	var s Slot
	_, err = pgx.ForEachRow(rows, []any{&s.Slot, &s.JobID, &s.Finished, &s.Accounts, &s.RangeAccounts, &s.Inserted, &s.Skipped,
		&s.LateSpread, &s.LateSkipped, &s.Batches}, func() error {
		out[s.Slot] = s
		return nil
	})
	if isUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading the cycle's slots in the ledger")
	}
	return out, nil
}

// RangeCounts returns, per slot of a plan with slots slots, the accounts of
// the slot's bucket range its latest finished fan-out of the task under
// plan in a cycle that started before before counted (RangeAccounts), and
// whether every slot has one. It reads the task's rows within the ledger's
// horizon only: at most a few cycles.
func (l Ledger) RangeCounts(ctx context.Context, q Queryer, task, plan string, slots int, before time.Time) ([]int64, bool, error) {
	rows, err := q.Query(ctx, "SELECT DISTINCT ON (slot) slot, range_accounts FROM "+l.table+
		" WHERE task = $1 AND cycle_start < $3 AND plan = $2 AND slot >= 0 AND finished_at IS NOT NULL AND range_accounts IS NOT NULL"+
		" ORDER BY slot, cycle_start DESC", task, plan, before)
	if isUndefinedTable(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap(err, "reading the slots' account counts in the ledger")
	}
	out := make([]int64, slots)
	seen := 0
	var (
		slot int
		n    int64
	)
	_, err = pgx.ForEachRow(rows, []any{&slot, &n}, func() error {
		if slot >= 0 && slot < slots {
			out[slot] = n
			seen++
		}
		return nil
	})
	if isUndefinedTable(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap(err, "reading the slots' account counts in the ledger")
	}
	return out, seen == slots, nil
}
