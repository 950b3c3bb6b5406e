package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/sqlbucket"
)

// prepare creates the schema, River's tables, the accounts and the bucket
// index, and returns the number of accounts.
func (d *demo) prepare(ctx context.Context) (int64, error) {
	schema := pgx.Identifier{d.opts.schema}.Sanitize()
	if !d.opts.keep {
		d.logf("dropping and recreating schema %s (use --keep to reuse it)", d.opts.schema)
		if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			return 0, fmt.Errorf("error dropping demo schema: %w", err)
		}
	}
	if _, err := d.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
		return 0, fmt.Errorf("error creating demo schema: %w", err)
	}
	d.logf("migrating River's tables in schema %s", d.opts.schema)
	if err := riverutil.Migrate(ctx, d.pool, d.opts.schema); err != nil {
		return 0, err
	}
	if _, err := d.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+d.table()+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)"); err != nil {
		return 0, fmt.Errorf("error creating accounts table: %w", err)
	}
	var existing int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.table()).Scan(&existing); err != nil {
		return 0, err
	}
	if existing > 0 {
		d.logf("keeping %d existing accounts (--accounts ignored)", existing)
	} else if err := d.seed(ctx); err != nil {
		return 0, err
	}
	d.logf("creating the bucket index")
	if err := sqlbucket.CreateIndex(ctx, d.pool, d.opts.schema, "accounts", "id"); err != nil {
		return 0, err
	}
	if _, err := d.pool.Exec(ctx, "ANALYZE "+d.table()); err != nil {
		return 0, err
	}
	var n int64
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.table()+" WHERE active").Scan(&n)
	return n, err
}

func (d *demo) seed(ctx context.Context) error {
	const chunk = 50_000
	rows := make([][]any, 0, chunk)
	for done := 0; done < d.opts.accounts; {
		rows = rows[:0]
		for i := 0; i < chunk && done+i < d.opts.accounts; i++ {
			rows = append(rows, []any{uuid.New(), true})
		}
		if _, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.opts.schema, "accounts"}, []string{"id", "active"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("error seeding accounts: %w", err)
		}
		done += len(rows)
		d.logf("seeded %d/%d accounts", done, d.opts.accounts)
	}
	return nil
}

// firstCycleStart is --cycle-start, else (with --keep) an unfinished cycle
// found in the schema, else the next whole slot from now.
func (d *demo) firstCycleStart(ctx context.Context) (time.Time, error) {
	if !d.opts.cycleStart.IsZero() {
		return d.opts.cycleStart.UTC(), nil
	}
	if d.opts.keep {
		var last *time.Time
		err := d.pool.QueryRow(ctx, "SELECT max((args->>'cycle_start')::timestamptz) FROM "+
			pgx.Identifier{d.opts.schema, "river_job"}.Sanitize()+" WHERE kind = $1 AND args->>'task' = $2",
			bootstrap.Kind, d.opts.task).Scan(&last)
		if err != nil {
			return time.Time{}, fmt.Errorf("error looking for an unfinished cycle: %w", err)
		}
		if last != nil && time.Now().Before(last.Add(d.opts.cycle)) {
			d.logf("found unfinished cycle %s; resuming it", last.UTC().Format(time.RFC3339))
			return last.UTC(), nil
		}
	}
	// The next whole slot at least 5 s away: River's leader election and
	// first scheduler pass happen before the first slot is due.
	start := time.Now().Add(5 * time.Second).Truncate(d.plan.SlotDuration).Add(d.plan.SlotDuration)
	return start.UTC(), nil
}
