package syncjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/riverjob"
)

// Queryer is the subset of pgx.Conn, pgx.Tx and pgxpool.Pool that
// CountUnfinished needs.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Unfinished is how many of a cycle's sync jobs River has not finished,
// by state.
type Unfinished struct {
	// Pending are not started yet: scheduled, available or pending.
	Pending int64
	// Running are started and not ended.
	Running int64
	// Retryable failed and will be tried again.
	Retryable int64
}

// Total is every unfinished sync job.
func (u Unfinished) Total() int64 { return u.Pending + u.Running + u.Retryable }

// unfinishedSQL counts, up to $4 (NULL: all), the sync jobs ($1 kind) of
// task $2's cycle $3 (args->>'cycle_start', as the job's JSON spells it)
// that River has not finished, through River's fetching index on state:
//
//	SELECT count(*) FILTER (WHERE state IN ('scheduled', 'available', 'pending')), ...
//	FROM (SELECT state FROM "schema"."river_job"
//	      WHERE state IN ('scheduled', 'available', 'pending', 'running', 'retryable')
//	        AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $4) u
func unfinishedSQL(jobs string) string {
	return `SELECT
			count(*) FILTER (WHERE state IN ('scheduled', 'available', 'pending')),
			count(*) FILTER (WHERE state = 'running'),
			count(*) FILTER (WHERE state = 'retryable')
		FROM (SELECT state FROM ` + jobs + ` WHERE state IN ('scheduled', 'available', 'pending', 'running', 'retryable')
			AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3 LIMIT $4) u`
}

// CountUnfinished counts the sync jobs of task's cycle starting at
// cycleStart that River (in schema, "" for the search path) has not
// finished: few, by design, and found through River's index on state,
// however many finished ones River still keeps. It stops counting at limit
// (0: counts them all), so a bounded read stays bounded whatever the
// queue holds.
func CountUnfinished(ctx context.Context, q Queryer, schema, task string, cycleStart time.Time, limit int64) (Unfinished, error) {
	var bound any // NULL: LIMIT ALL
	if limit > 0 {
		bound = limit
	}
	var u Unfinished
	if err := q.QueryRow(ctx, unfinishedSQL(riverjob.QualifiedTable(schema)), Kind, task, argsCycleStart(cycleStart), bound).
		Scan(&u.Pending, &u.Running, &u.Retryable); err != nil {
		return Unfinished{}, fmt.Errorf("error counting the unfinished sync jobs of task %q, cycle %s: %w", task, cycleStart.UTC().Format(time.RFC3339), err)
	}
	return u, nil
}

// argsCycleStart is cycleStart as a sync job's args spell it (args->>'cycle_start'):
// NewArgs keeps it in UTC, which JSON writes in RFC 3339 with nanoseconds.
func argsCycleStart(cycleStart time.Time) string {
	return cycleStart.UTC().Format(time.RFC3339Nano)
}
