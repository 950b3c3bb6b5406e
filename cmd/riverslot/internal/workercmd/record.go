package workercmd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/measure"
)

// recorder inserts a row per sync into <schema>.synced, when that table
// exists, filling the optional columns it has.
type recorder struct {
	pool *pgxpool.Pool
	// ok says the table exists (and recording is on).
	ok bool
	// optional are the synced table's optional columns this node fills:
	// scheduled_at (the sync job's scheduled time) and job_id (River's job
	// id: a job run again after a kill -9 records the same id twice).
	optional []string
	insert   string
	// clientID is the River client's ID, recorded with each sync; set once
	// the client exists.
	clientID string
}

// newRecorder looks for <schema>.synced and its optional columns (not at
// all without on) and logs whether each sync is recorded.
func newRecorder(ctx context.Context, pool *pgxpool.Pool, schema string, on bool, logger *slog.Logger) (*recorder, error) {
	r := &recorder{pool: pool}
	synced := pgx.Identifier{schema, "synced"}.Sanitize()
	if on {
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", synced).Scan(&r.ok); err != nil {
			return nil, err
		}
		if r.ok {
			if err := pool.QueryRow(ctx, "SELECT coalesce(array_agg(attname::text ORDER BY attname), '{}') FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('job_id', 'scheduled_at') AND NOT attisdropped",
				synced).Scan(&r.optional); err != nil {
				return nil, err
			}
			logger.Info("recording each sync", slog.String("table", schema+".synced"), slog.String("optional_columns", strings.Join(r.optional, ",")))
		} else {
			logger.Info("not recording syncs: no such table", slog.String("table", schema+".synced"))
		}
	}
	r.insert = "INSERT INTO " + synced + " (task, account_id, cycle_start, client_id"
	for _, c := range r.optional {
		r.insert += ", " + pgx.Identifier{c}.Sanitize()
	}
	r.insert += ") VALUES ($1, $2, $3, $4"
	for i := range r.optional {
		r.insert += fmt.Sprintf(", $%d", 5+i)
	}
	r.insert += ")"
	return r, nil
}

// record records the sync of accountID by job (nothing without the table).
func (r *recorder) record(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
	if !r.ok {
		return nil
	}
	args := []any{job.Args.Task, accountID, job.Args.CycleStart, r.clientID}
	for _, c := range r.optional {
		switch c {
		case "job_id":
			args = append(args, job.ID)
		case "scheduled_at":
			args = append(args, job.ScheduledAt)
		}
	}
	// Not cut by the sync's timeout: an INSERT that committed as the
	// deadline passed would return the deadline's error, and River would
	// run the sync again (the account recorded twice, 1-2 s apart).
	ctx, cancel := measure.RecordContext(ctx)
	defer cancel()
	_, err := r.pool.Exec(ctx, r.insert, args...)
	return err
}
