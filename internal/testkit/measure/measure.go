// Package measure computes cycle figures: how many accounts were synced
// once, missed or duplicated, counted from the record of Sync calls the
// app-like sync function writes (SyncedTableDDL), and, from River's job
// table, the peak number of pending sync jobs (inserted, not yet started)
// and start lateness. The integration
// tests and the riverslot demo share it, so both report the same numbers the
// same way, measured from the database. PeakPerSecond is an upstream's
// busiest second, from the times of its calls, for the demo and the
// simulator alike.
package measure

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/sqlbucket"
)

// latenessAndPeakSQL selects, over the sync jobs in CTE s: start lateness
// p50 and p99 (attempted_at - scheduled_at, seconds) and the peak number of
// jobs inserted but not yet started, by a sweep over insert (+1) and start
// (-1) events; a start sorts before an insert at the same instant.
const latenessAndPeakSQL = `
		coalesce((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at)) FROM s WHERE attempted_at IS NOT NULL), 0),
		coalesce((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - scheduled_at)) FROM s WHERE attempted_at IS NOT NULL), 0),
		coalesce((SELECT max(depth) FROM (
			SELECT sum(d) OVER (ORDER BY ts, d ROWS UNBOUNDED PRECEDING) AS depth FROM (
				SELECT created_at AS ts, 1 AS d FROM s
				UNION ALL
				SELECT attempted_at, -1 FROM s WHERE attempted_at IS NOT NULL
			) events
		) sweep), 0)`

// Cycle is what one cycle of one task did, measured from river_job.
type Cycle struct {
	CycleStart time.Time `json:"cycle_start"`
	Accounts   int64     `json:"accounts"`
	SyncJobs   int64     `json:"sync_jobs"`
	Completed  int64     `json:"completed"`
	// SyncedOnce counts accounts whose Sync was called exactly once in the
	// cycle (the record of Sync calls, Target.SyncedTable): a sync job
	// skipped, discarded or failed without a call does not count.
	SyncedOnce int64 `json:"synced_once"`
	// Missed counts accounts in the table whose Sync was not called in the
	// cycle.
	Missed int64 `json:"missed"`
	// Duplicated counts accounts whose Sync was called more than once in
	// the cycle (a retried sync whose Sync failed after recording counts
	// each call).
	Duplicated int64 `json:"duplicated"`
	// MissedSkipped counts the Missed accounts whose sync job completed as
	// skipped, its reason recorded (stale, upstream throttled or down): a
	// miss the app was told of (Task.OnSkip); and, up to FanOutSkipped,
	// the Missed accounts with no sync job in the cycle (a fan-out skipped
	// them, and counted them in the ledger). Missed - MissedSkipped
	// accounts were missed with no word.
	MissedSkipped int64 `json:"missed_skipped"`
	// FanOutSkipped counts the accounts the cycle's fan-outs skipped:
	// too late (more than half a cycle behind: the next cycle covers
	// them) or synced by an older plan's cycle (the overlap rule). From
	// the ledger's slot rows: a fan-out records how many, not which.
	FanOutSkipped int64 `json:"fan_out_skipped"`
	// SyncCalls counts the cycle's recorded Sync calls.
	SyncCalls int64 `json:"sync_calls"`
	// Skipped counts sync jobs completed without calling Sync (their
	// output's riverslot_skipped: stale, or no room with their upstream);
	// their accounts are in Missed unless another call synced them.
	Skipped int64 `json:"skipped"`
	// PeakPending is the largest number of the cycle's sync jobs that were
	// inserted but not yet started at any one moment.
	PeakPending int64 `json:"peak_pending"`
	// LatenessP50 and LatenessP99 are percentiles of attempted_at -
	// scheduled_at over started sync jobs.
	LatenessP50 time.Duration `json:"lateness_p50"`
	LatenessP99 time.Duration `json:"lateness_p99"`
}

// SyncedTableDDL is the column list of the table an app-like sync function
// records each sync in (task, account, cycle, and when the sync job was
// scheduled and its job id, where the writer knows them): the record of
// each Sync call, which also survives River's deletion of completed jobs.
// riverslot demo and worker and the integration tests' sync functions write
// it; Target.SyncedTable reads it.
const SyncedTableDDL = "(task text NOT NULL, account_id uuid NOT NULL, cycle_start timestamptz NOT NULL, client_id text, synced_at timestamptz NOT NULL DEFAULT clock_timestamp(), scheduled_at timestamptz, job_id bigint)"

// RecordContext is the context a sync function writes its record with
// (the row of SyncedTableDDL that is the sync's effect): not cut by the
// sync job's timeout (River's JobTimeout, the task's SyncTimeout), so the
// Sync returns the INSERT's real outcome. With the job's own context, an
// INSERT that committed as the deadline passed returned the deadline's
// error: River retried the job and the account was recorded twice, 1-2 s
// apart (River's first retry backoff), in CI runs at load average 20+.
func RecordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// Target names the tables and the task to measure.
type Target struct {
	RiverSchema   string
	AccountsTable string // quoted, qualified
	IDColumn      string
	Filter        string
	SyncKind      string
	Task          string
	// SyncedTable (quoted, qualified; required) is a table of
	// SyncedTableDDL's form the task's sync function writes a row to on
	// each call. SyncedOnce, Missed, Duplicated and SyncCalls count its
	// rows: what Sync did, not what was queued, so they hold after River
	// deleted completed jobs and a job that never called Sync (skipped,
	// discarded) syncs nobody. The other figures cover the jobs River
	// keeps.
	SyncedTable string
}

// MeasureCycle computes the figures of one cycle.
func MeasureCycle(ctx context.Context, pool *pgxpool.Pool, target Target, cycleStart time.Time) (*Cycle, error) {
	jobs := riverjob.QualifiedTable(target.RiverSchema)
	id := pgx.Identifier{target.IDColumn}.Sanitize()
	filter := "true"
	if target.Filter != "" {
		filter = "(" + target.Filter + ")"
	}
	if target.SyncedTable == "" {
		return nil, fmt.Errorf("measure: Target.SyncedTable is empty: name the table the sync function records its calls in (SyncedTableDDL)")
	}
	c := &Cycle{CycleStart: cycleStart.UTC()}
	var missedNoJob int64

	// Sync jobs of this cycle. cycle_start is compared as timestamptz so the
	// JSON text form does not matter.
	cte := `WITH s AS (
		SELECT (args->>'account_id')::uuid AS account_id, state, created_at, attempted_at, scheduled_at,
			coalesce(metadata->'output' ? '` + syncjob.OutputSkipped + `', false) AS skipped
		FROM ` + jobs + `
		WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = $3
	)`
	per := `per AS (SELECT account_id, count(*) AS n FROM ` + target.SyncedTable + ` WHERE task = $2 AND cycle_start = $3 GROUP BY account_id)`
	err := pool.QueryRow(ctx, cte+`,
	`+per+`,
	acc AS (SELECT `+id+` AS account_id FROM `+target.AccountsTable+` WHERE `+filter+`)
	SELECT
		(SELECT count(*) FROM acc),
		(SELECT count(*) FROM s),
		(SELECT count(*) FROM s WHERE state = 'completed'),
		(SELECT count(*) FROM per JOIN acc USING (account_id) WHERE n = 1),
		(SELECT count(*) FROM acc LEFT JOIN per USING (account_id) WHERE per.account_id IS NULL),
		(SELECT count(*) FROM acc LEFT JOIN per USING (account_id) WHERE per.account_id IS NULL AND acc.account_id IN (SELECT account_id FROM s WHERE skipped)),
		(SELECT count(*) FROM acc LEFT JOIN per USING (account_id) WHERE per.account_id IS NULL AND NOT EXISTS (SELECT 1 FROM s WHERE s.account_id = acc.account_id)),
		(SELECT count(*) FROM per JOIN acc USING (account_id) WHERE n > 1),
		(SELECT coalesce(sum(n), 0) FROM per),
		(SELECT count(*) FROM s WHERE skipped),
`+latenessAndPeakSQL,
		target.SyncKind, target.Task, cycleStart).Scan(
		&c.Accounts, &c.SyncJobs, &c.Completed, &c.SyncedOnce, &c.Missed, &c.MissedSkipped, &missedNoJob, &c.Duplicated, &c.SyncCalls, &c.Skipped,
		(*seconds)(&c.LatenessP50), (*seconds)(&c.LatenessP99), &c.PeakPending)
	if err != nil {
		return nil, fmt.Errorf("error measuring cycle %s: %w", cycleStart.Format(time.RFC3339), err)
	}
	// The fan-outs' skips, from the ledger's slot rows (every plan's: one
	// cycle start).
	table := ledger.New(target.RiverSchema).QualifiedTable()
	var hasLedger bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&hasLedger); err != nil {
		return nil, fmt.Errorf("error looking for the ledger: %w", err)
	}
	if hasLedger {
		if err := pool.QueryRow(ctx, "SELECT coalesce(sum(skipped), 0)::bigint FROM "+table+" WHERE task = $1 AND cycle_start = $2 AND slot >= 0",
			target.Task, cycleStart).Scan(&c.FanOutSkipped); err != nil {
			return nil, fmt.Errorf("error reading the fan-outs' skips of cycle %s: %w", cycleStart.Format(time.RFC3339), err)
		}
	}
	c.MissedSkipped += min(missedNoJob, c.FanOutSkipped)
	return c, nil
}

// seconds scans a float number of seconds into a time.Duration.
type seconds time.Duration

func (s *seconds) Scan(src any) error {
	switch v := src.(type) {
	case float64:
		*s = seconds(time.Duration(v * float64(time.Second)))
		return nil
	case nil:
		*s = 0
		return nil
	}
	return fmt.Errorf("cannot scan %T into seconds", src)
}

// Run is the measurement of several cycles of one task.
type Run struct {
	Cycles []*Cycle `json:"cycles"`
	// PeakPending is the largest number of the run's sync jobs (all cycles)
	// inserted but not yet started at any one moment.
	PeakPending int64 `json:"peak_pending"`
	LatenessP50 time.Duration
	LatenessP99 time.Duration
	// Slots is the number of distinct per-slot jobs of the first cycle, and
	// SlotDuration the smallest gap between their scheduled times, both read
	// back from the job table.
	Slots        int64
	SlotDuration time.Duration
	// Buckets is the number of distinct bucket values among the accounts.
	Buckets int64
}

// MeasureRun measures every cycle in cycleStarts and the run as a whole.
func MeasureRun(ctx context.Context, pool *pgxpool.Pool, target Target, perSlotKind string, cycleStarts []time.Time) (*Run, error) {
	run := &Run{}
	for _, start := range cycleStarts {
		c, err := MeasureCycle(ctx, pool, target, start)
		if err != nil {
			return nil, err
		}
		run.Cycles = append(run.Cycles, c)
	}

	jobs := riverjob.QualifiedTable(target.RiverSchema)
	err := pool.QueryRow(ctx, `WITH s AS (
		SELECT created_at, attempted_at, scheduled_at FROM `+jobs+`
		WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = ANY($3)
	), p AS (
		SELECT scheduled_at FROM `+jobs+`
		WHERE kind = $4 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = $5
	)
	SELECT
`+latenessAndPeakSQL+`,
		(SELECT count(*) FROM p),
		coalesce((SELECT extract(epoch FROM min(gap))::float8 FROM (
			SELECT scheduled_at - lag(scheduled_at) OVER (ORDER BY scheduled_at) AS gap FROM p) g WHERE gap > interval '0'), 0),
		(SELECT count(DISTINCT `+sqlbucket.Expr(target.IDColumn)+`) FROM `+target.AccountsTable+`)`,
		target.SyncKind, target.Task, cycleStarts, perSlotKind, cycleStarts[0]).Scan(
		(*seconds)(&run.LatenessP50), (*seconds)(&run.LatenessP99), &run.PeakPending,
		&run.Slots, (*seconds)(&run.SlotDuration), &run.Buckets)
	if err != nil {
		return nil, fmt.Errorf("error measuring run: %w", err)
	}
	return run, nil
}
