package ledger

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/taskspec"
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

func isUndefinedColumn(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
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
// the ledger has none, or does not exist. The latest may be a cycle
// prepared ahead of its start: CycleAt finds the one running.
func (l Ledger) LatestCycle(ctx context.Context, q Queryer, task, planFirst string) (time.Time, taskspec.PlanKey, bool, error) {
	return l.oneCycle(ctx, q, "finding the task's latest cycle in the ledger",
		"SELECT cycle_start, plan FROM "+l.table+" WHERE task = $1 AND slot = $2 ORDER BY cycle_start DESC, plan = $3 DESC LIMIT 1",
		task, BootstrapSlot, planFirst)
}

// CycleAt returns the start and plan of the task's cycle running at now:
// its latest bootstrapped cycle that starts at or before now (planFirst
// first among cycles that start together), and false when none does, or
// the ledger does not exist. A cycle bootstrapped ahead of its start (by
// EnqueueCycle, or by the trigger's lead) is not running yet: NextCycle
// finds it. One range of the primary key, stopped at the first row.
func (l Ledger) CycleAt(ctx context.Context, q Queryer, task, planFirst string, now time.Time) (time.Time, taskspec.PlanKey, bool, error) {
	return l.oneCycle(ctx, q, "finding the task's running cycle in the ledger",
		"SELECT cycle_start, plan FROM "+l.table+" WHERE task = $1 AND slot = $2 AND cycle_start <= $4 ORDER BY cycle_start DESC, plan = $3 DESC LIMIT 1",
		task, BootstrapSlot, planFirst, now)
}

// NextCycle returns the start and plan of the task's earliest bootstrapped
// cycle that starts after after (planFirst first among cycles that start
// together): a cycle prepared ahead of its start. False when there is
// none, or no ledger. One range of the primary key, stopped at the first
// row.
func (l Ledger) NextCycle(ctx context.Context, q Queryer, task, planFirst string, after time.Time) (time.Time, taskspec.PlanKey, bool, error) {
	return l.oneCycle(ctx, q, "finding the task's next cycle in the ledger",
		"SELECT cycle_start, plan FROM "+l.table+" WHERE task = $1 AND slot = $2 AND cycle_start > $4 ORDER BY cycle_start, plan = $3 DESC LIMIT 1",
		task, BootstrapSlot, planFirst, after)
}

// oneCycle scans the start and plan of the one cycle sql selects (false
// when it selects none, or the ledger does not exist).
func (l Ledger) oneCycle(ctx context.Context, q Queryer, what, sql string, args ...any) (time.Time, taskspec.PlanKey, bool, error) {
	var (
		start time.Time
		plan  taskspec.PlanKey
	)
	err := q.QueryRow(ctx, sql, args...).Scan(&start, &plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return time.Time{}, taskspec.PlanKey{}, false, nil
	case err != nil:
		return time.Time{}, taskspec.PlanKey{}, false, wrap(err, what)
	}
	return start.UTC(), plan, true, nil
}

// CyclePlan returns the plan of the task's cycle at cycleStart as the
// ledger records its bootstrap (planFirst when it has one under it), and
// false when it records none.
func (l Ledger) CyclePlan(ctx context.Context, q Queryer, task string, cycleStart time.Time, planFirst string) (taskspec.PlanKey, bool, error) {
	var plan taskspec.PlanKey
	err := q.QueryRow(ctx, "SELECT plan FROM "+l.table+" WHERE task = $1 AND cycle_start = $2 AND slot = $3 ORDER BY plan = $4 DESC LIMIT 1",
		task, cycleStart, BootstrapSlot, planFirst).Scan(&plan)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return taskspec.PlanKey{}, false, nil
	case err != nil:
		return taskspec.PlanKey{}, false, wrap(err, "finding the plan of the task's cycle in the ledger")
	}
	return plan, true, nil
}

// Slot is one slot's row.
type Slot struct {
	Slot     int
	JobID    int64 // 0 when unknown
	Finished *time.Time
	// Started is when its first attempt began; FailedAt and Error what
	// its last attempt recorded when it ended without finishing.
	Started, FailedAt *time.Time
	Error             string
	SlotResult
}

// Slots returns the recorded slots of the task's cycle under plan, by slot
// (nil when the ledger does not exist).
func (l Ledger) Slots(ctx context.Context, q Queryer, task, plan string, cycleStart time.Time) (map[int]Slot, error) {
	rows, err := q.Query(ctx, "SELECT slot, coalesce(job_id, 0), finished_at, coalesce(accounts, 0), coalesce(range_accounts, 0), coalesce(inserted, 0), coalesce(skipped, 0),"+
		" coalesce(late_spread, 0), coalesce(late_skipped, 0), coalesce(batches, 0), started_at, failed_at, coalesce(error, '') FROM "+l.table+
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
		&s.LateSpread, &s.LateSkipped, &s.Batches, &s.Started, &s.FailedAt, &s.Error}, func() error {
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

// cycleColumns are the columns of a cycle's row that Cycle holds, in the
// order scanCycle reads them.
const cycleColumns = "c.task, c.plan, c.cycle_start, c.cycle_end, c.deadline, c.keep_until, coalesce(c.placement, ''), c.pins, coalesce(c.fallback, ''), coalesce(c.first_cycle, false), coalesce(c.late_policy, ''), coalesce(c.late_grace_us, 0), coalesce(c.trigger_offset_us, 0), coalesce(c.location, ''), coalesce(c.shard, ''), coalesce(c.shard_version, 0), c.created_at, coalesce(c.recorded_at, c.created_at), " +
	"coalesce(c.synced, 0), coalesce(c.gone, 0), coalesce(c.stale, 0), coalesce(c.upstream_skipped, 0), coalesce(c.failed, 0), coalesce(c.cancelled, 0), c.lateness"

// scanCycle scans cycleColumns, then extra, from row.
func scanCycle(row pgx.Row, extra ...any) (Cycle, error) {
	var (
		c                   Cycle
		end, deadline, keep *time.Time
		graceUS, offsetUS   int64
		lateness            []int64
	)
	dest := append([]any{&c.Task, &c.Plan, &c.Start, &end, &deadline, &keep, &c.Placement, &c.Pins, &c.Fallback, &c.First, &c.LatePolicy, &graceUS, &offsetUS, &c.Location, &c.Shard, &c.ShardVersion, &c.CreatedAt, &c.Recorded,
		&c.Outcomes.Count[OutcomeSynced], &c.Outcomes.Count[OutcomeGone], &c.Outcomes.Count[OutcomeStale], &c.Outcomes.Count[OutcomeUpstream],
		&c.Outcomes.Count[OutcomeFailed], &c.Outcomes.Count[OutcomeCancelled], &lateness}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Cycle{}, err
	}
	copy(c.Outcomes.Lateness[:], lateness)
	c.LateGrace = time.Duration(graceUS) * time.Microsecond
	c.TriggerOffset = time.Duration(offsetUS) * time.Microsecond
	c.Start = c.Start.UTC()
	for _, t := range []struct {
		dst *time.Time
		src *time.Time
	}{{&c.End, end}, {&c.Deadline, deadline}, {&c.KeepUntil, keep}} {
		if t.src != nil {
			*t.dst = t.src.UTC()
		}
	}
	return c, nil
}

// CycleRecord returns the record of the task's cycle at cycleStart under
// plan, and false when the ledger has none.
func (l Ledger) CycleRecord(ctx context.Context, q Queryer, task, plan string, cycleStart time.Time) (Cycle, bool, error) {
	c, err := scanCycle(q.QueryRow(ctx, "SELECT "+cycleColumns+" FROM "+l.table+" c WHERE c.task = $1 AND c.cycle_start = $2 AND c.plan = $3 AND c.slot = $4",
		task, cycleStart, plan, BootstrapSlot))
	switch {
	case errors.Is(err, pgx.ErrNoRows), isUndefinedTable(err):
		return Cycle{}, false, nil
	case err != nil:
		return Cycle{}, false, wrap(err, "reading the cycle's record in the ledger")
	}
	return c, true, nil
}

// Cycles returns the task's recorded cycles that started in [from, to),
// newest first, at most limit: one range of the primary key.
func (l Ledger) Cycles(ctx context.Context, q Queryer, task string, from, to time.Time, limit int) ([]Cycle, error) {
	rows, err := q.Query(ctx, "SELECT "+cycleColumns+" FROM "+l.table+" c WHERE c.task = $1 AND c.cycle_start >= $2 AND c.cycle_start < $3 AND c.slot = $4"+
		" ORDER BY c.cycle_start DESC, coalesce(c.recorded_at, c.created_at) DESC LIMIT $5", task, from, to, BootstrapSlot, limit)
	if isUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err, "reading the task's cycles in the ledger")
	}
	defer rows.Close()
	var out []Cycle
	for rows.Next() {
		c, err := scanCycle(rows)
		if err != nil {
			return nil, wrap(err, "reading the task's cycles in the ledger")
		}
		out = append(out, c)
	}
	return out, wrap(rows.Err(), "reading the task's cycles in the ledger")
}

// OtherSlot is one slot of another cycle of a task, with its cycle's
// record: what the overlap rule of a plan change reads.
type OtherSlot struct {
	Cycle Cycle
	Slot  int
	JobID int64
	// Done: the slot's fan-out finished (its syncs are in the queue or
	// ran). Failed: it ended without finishing, as recorded.
	Done, Failed bool
	// StartedAt and FinishedAt bound when its fan-out placed the slot's
	// accounts (zero when not recorded): a late account was spread from
	// the time of the batch that placed it.
	StartedAt, FinishedAt time.Time
	// Accounts and Inserted are the finished fan-out's counts (-1 when
	// not recorded): a slot that inserted every account it selected
	// synced each, one that inserted none synced none.
	Accounts, Inserted int64
	// LateSpread and LateSkipped are the fan-out's late accounts spread
	// and skipped (-1 when not recorded).
	LateSpread, LateSkipped int64
	// Cursor is where a fan-out not finished left off after its last
	// committed batch, and ProgressAt when that batch committed (nil and
	// zero when it committed none, or before they were recorded):
	// Accounts and Inserted are then its counts so far.
	Cursor     *Cursor
	ProgressAt time.Time
}

// OtherSlots returns the slots of the task's cycles, of any plan, that
// started in (from, to), other than (plan, cycleStart) itself, whose
// cycle was recorded before before (its place in the task's commit order,
// Cycle.Recorded, ties broken by plan and start so that of two cycles
// exactly one is first) and whose
// syncs can run after notBefore (their Deadline; cycles recorded without
// one are included). One range of the primary key.
func (l Ledger) OtherSlots(ctx context.Context, q Queryer, task, plan string, cycleStart, from, to, before, notBefore time.Time) ([]OtherSlot, error) {
	rows, err := q.Query(ctx, "SELECT "+cycleColumns+", s.slot, coalesce(s.job_id, 0), s.finished_at IS NOT NULL, s.failed_at IS NOT NULL, s.started_at, s.finished_at, coalesce(s.accounts, -1), coalesce(s.inserted, -1), coalesce(s.late_spread, -1), coalesce(s.late_skipped, -1),"+
		" s.cursor_id IS NOT NULL AND s.finished_at IS NULL, coalesce(s.cursor_pinned, false), coalesce(s.cursor_bucket, 0), coalesce(s.cursor_id::text, ''), s.progress_at"+
		" FROM "+l.table+" c JOIN "+l.table+" s ON s.task = c.task AND s.cycle_start = c.cycle_start AND s.plan = c.plan AND s.slot >= 0"+
		" WHERE c.task = $1 AND c.slot = $2 AND c.cycle_start > $3 AND c.cycle_start < $4"+
		" AND NOT (c.plan = $5 AND c.cycle_start = $6)"+
		" AND (coalesce(c.recorded_at, c.created_at), c.plan, c.cycle_start) < ($7, $5, $6)"+
		" AND (c.deadline IS NULL OR c.deadline > $8)",
		task, BootstrapSlot, from, to, plan, cycleStart, before, notBefore)
	if err != nil {
		return nil, wrap(err, "reading the task's other cycles in the ledger")
	}
	defer rows.Close()
	var out []OtherSlot
	for rows.Next() {
		var (
			o                           OtherSlot
			started, finished, progress *time.Time
			hasCursor                   bool
			cursor                      Cursor
		)
		c, err := scanCycle(rows, &o.Slot, &o.JobID, &o.Done, &o.Failed, &started, &finished, &o.Accounts, &o.Inserted, &o.LateSpread, &o.LateSkipped,
			&hasCursor, &cursor.Pinned, &cursor.Bucket, &cursor.AfterID, &progress)
		if err != nil {
			return nil, wrap(err, "reading the task's other cycles in the ledger")
		}
		o.Cycle = c
		if hasCursor {
			o.Cursor = &cursor
		}
		if progress != nil {
			o.ProgressAt = *progress
		}
		if started != nil {
			o.StartedAt = *started
		}
		if finished != nil {
			o.FinishedAt = *finished
		}
		out = append(out, o)
	}
	return out, wrap(rows.Err(), "reading the task's other cycles in the ledger")
}

// Tasks returns the names of the tasks the ledger records cycles of, in
// order, at most limit: a loose index scan of the primary key, one probe
// per task however many cycles each has.
func (l Ledger) Tasks(ctx context.Context, q Queryer, limit int) ([]string, error) {
	rows, err := q.Query(ctx, "WITH RECURSIVE t(task) AS ("+
		"(SELECT task FROM "+l.table+" ORDER BY task LIMIT 1)"+
		" UNION ALL SELECT (SELECT task FROM "+l.table+" WHERE task > t.task ORDER BY task LIMIT 1) FROM t WHERE t.task IS NOT NULL)"+
		" SELECT task FROM t WHERE task IS NOT NULL LIMIT $1", limit)
	if err != nil {
		return nil, wrap(err, "listing the tasks in the ledger")
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return out, wrap(err, "listing the tasks in the ledger")
}

// PinsInUse returns the (plan, cycle start) under which the pins of task
// are stored for every cycle the ledger records as following them (its own
// cycles, or those of a task OppositeOf it) with a slot whose fan-out has
// not finished: a per-slot job that can still run (or be retried by an
// operator) reads those pins. Cycles recorded before placements were
// (placement NULL) follow their own task's pins, under their own plan and
// start. Bounded by the ledger's horizon.
func (l Ledger) PinsInUse(ctx context.Context, q Queryer, task string) ([]string, []time.Time, error) {
	rows, err := q.Query(ctx, "SELECT DISTINCT coalesce(c.pins->>'plan', c.plan), coalesce((c.pins->>'cycle_start')::timestamptz, c.cycle_start) FROM "+l.table+" c"+
		" WHERE c.slot = $2 AND ((c.pins IS NOT NULL AND c.pins->>'task' = $1) OR (c.task = $1 AND c.placement IS NULL))"+
		" AND EXISTS (SELECT 1 FROM "+l.table+" s WHERE s.task = c.task AND s.cycle_start = c.cycle_start AND s.plan = c.plan AND s.slot >= 0 AND s.finished_at IS NULL)",
		task, BootstrapSlot)
	if err != nil {
		return nil, nil, wrap(err, "finding the cycles that still read the task's pins in the ledger")
	}
	var (
		plans  []string
		starts []time.Time
		plan   string
		start  time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&plan, &start}, func() error {
		plans, starts = append(plans, plan), append(starts, start)
		return nil
	}); err != nil {
		return nil, nil, wrap(err, "finding the cycles that still read the task's pins in the ledger")
	}
	return plans, starts, nil
}

// HasCycleBefore reports whether the ledger records a cycle of the task,
// under any plan, that started before start: whether a cycle at start is
// the task's first. A primary-key range, stopped at the first row.
func (l Ledger) HasCycleBefore(ctx context.Context, q Queryer, task string, start time.Time) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+l.table+" WHERE task = $1 AND cycle_start < $2 AND slot = $3)", task, start, BootstrapSlot).Scan(&ok)
	return ok, wrap(err, "looking up the task's earlier cycles in the ledger")
}

// Current reports whether the ledger table exists with every column and
// index this version records (each version's marker column and the pins index).
func (l Ledger) Current(ctx context.Context, q Queryer) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL
		AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname IN ('first_cycle', 'late_grace_us', 'location', 'lateness', 'shard_version', 'recorded_at', 'cursor_id') AND NOT attisdropped) = 7
		AND to_regclass($3) IS NOT NULL
		AND EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1) AND c.relname = $2)`,
		l.table, Table+"_pins", l.shards).Scan(&ok)
	return ok, wrap(err, "looking up the ledger table's columns")
}
