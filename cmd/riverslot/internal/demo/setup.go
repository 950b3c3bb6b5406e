package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/bench"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/sqlbucket"
)

// SchemaComment marks a schema as the demo's own. The demo writes it
// (COMMENT ON SCHEMA) in the transaction that creates the schema, and drops
// or reuses only a schema that carries it: pointed at an application's
// database, `riverslot demo --schema public` is refused instead of running
// DROP SCHEMA public CASCADE. riverslot worker runs only on such a schema.
const SchemaComment = "riverslot demo: created by riverslot demo, which drops and recreates it; keep no other data here"

// SchemaState is what the database holds under the demo's schema name.
type SchemaState int

const (
	SchemaAbsent  SchemaState = iota // no such schema: the demo creates it
	SchemaOwned                      // created by the demo (carries SchemaComment)
	SchemaForeign                    // anything else: the demo refuses it
)

// QuerySchemaState reads whether schema exists and carries the demo's marker.
// It is read-only: the demo calls it before its first side effect.
func QuerySchemaState(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (SchemaState, error) {
	var comment *string
	err := q.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1", schema).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return SchemaAbsent, nil
	case err != nil:
		return 0, fmt.Errorf("error looking up schema %s: %w", schema, err)
	case comment != nil && *comment == SchemaComment:
		return SchemaOwned, nil
	default:
		return SchemaForeign, nil
	}
}

// ForeignSchemaError is Run's refusal of a schema that exists and was not
// created by the demo, before it changed anything.
type ForeignSchemaError struct {
	Schema string
}

func (e *ForeignSchemaError) Error() string {
	return fmt.Sprintf("--schema %s: schema %q already exists and was not created by riverslot demo, "+
		"which drops and recreates its schema; nothing was changed. Pass --schema with a name that does not exist yet "+
		"(the demo creates it and marks it as its own), or, if it is a demo schema from an older riverslot that you no longer need, "+
		"drop it yourself first", e.Schema, e.Schema)
}

// checkSchema refuses (ForeignSchemaError) a schema the demo did not
// create. It runs before the demo touches anything.
func (d *demo) checkSchema(ctx context.Context) error {
	for _, pool := range d.pools() {
		state, err := QuerySchemaState(ctx, pool, d.cfg.Schema)
		if err != nil {
			return err
		}
		if state == SchemaForeign {
			return &ForeignSchemaError{Schema: d.cfg.Schema}
		}
	}
	return nil
}

// pools are River's database and, when it is another, the accounts'.
func (d *demo) pools() []*pgxpool.Pool {
	d.defaultAccounts()
	if d.accounts != d.pool {
		return []*pgxpool.Pool{d.pool, d.accounts}
	}
	return []*pgxpool.Pool{d.pool}
}

// prepare creates the schema, River's tables, the accounts and the bucket
// index, and returns the number of accounts. Without --keep it drops and
// recreates the schema, only if the demo created it (SchemaComment).
func (d *demo) prepare(ctx context.Context) (int64, error) {
	d.defaultAccounts()
	for _, pool := range d.pools() {
		if err := d.resetSchema(ctx, pool); err != nil {
			return 0, err
		}
	}
	d.logf("migrating River's tables in schema %s", d.cfg.Schema)
	if err := riverslot.Migrate(ctx, d.pool, d.cfg.Schema); err != nil {
		return 0, err
	}
	if _, err := d.accounts.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+d.table()+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)"); err != nil {
		return 0, fmt.Errorf("error creating accounts table: %w", err)
	}
	if _, err := d.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+d.synced()+" "+measure.SyncedTableDDL); err != nil {
		return 0, fmt.Errorf("error creating the synced table: %w", err)
	}
	if d.cfg.Weights != "" {
		if _, err := d.accounts.Exec(ctx, "ALTER TABLE "+d.table()+" ADD COLUMN IF NOT EXISTS weight double precision NOT NULL DEFAULT 1"); err != nil {
			return 0, fmt.Errorf("error adding the weight column: %w", err)
		}
	}
	var existing int64
	if err := d.accounts.QueryRow(ctx, "SELECT count(*) FROM "+d.table()).Scan(&existing); err != nil {
		return 0, err
	}
	if existing > 0 {
		d.logf("keeping %d existing accounts (--accounts ignored)", existing)
	} else if err := d.seed(ctx); err != nil {
		return 0, err
	}
	if d.cfg.Upstreams.Count > 0 {
		// Each account's bank, from its first UUID byte: uneven, fixed.
		if _, err := d.accounts.Exec(ctx, "ALTER TABLE "+d.table()+" ADD COLUMN IF NOT EXISTS bank text"); err != nil {
			return 0, fmt.Errorf("error adding the bank column: %w", err)
		}
		if _, err := d.accounts.Exec(ctx, "UPDATE "+d.table()+" SET bank = "+bankExpr(d.cfg.Upstreams.Count)); err != nil {
			return 0, fmt.Errorf("error spreading the accounts over the upstreams: %w", err)
		}
	}
	d.logf("creating the bucket index")
	if err := sqlbucket.CreateIndex(ctx, d.accounts, d.cfg.Schema, "accounts", "id"); err != nil {
		return 0, err
	}
	if _, err := d.accounts.Exec(ctx, "ANALYZE "+d.table()); err != nil {
		return 0, err
	}
	var n int64
	err := d.accounts.QueryRow(ctx, "SELECT count(*) FROM "+d.table()+" WHERE active").Scan(&n)
	return n, err
}

func (d *demo) seed(ctx context.Context) error {
	const chunk = 50_000
	rows := make([][]any, 0, chunk)
	columns := []string{"id", "active"}
	// Weights from a fixed seed: the same distribution every run.
	rng := rand.New(rand.NewPCG(1, 5))
	if d.cfg.Weights != "" {
		columns = append(columns, "weight")
	}
	for done := 0; done < d.cfg.Accounts; {
		rows = rows[:0]
		for i := 0; i < chunk && done+i < d.cfg.Accounts; i++ {
			if d.cfg.Weights != "" {
				rows = append(rows, []any{uuid.New(), true, bench.Pareto(rng, 1.5)})
			} else {
				rows = append(rows, []any{uuid.New(), true})
			}
		}
		if _, err := d.accounts.CopyFrom(ctx, pgx.Identifier{d.cfg.Schema, "accounts"}, columns, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("error seeding accounts: %w", err)
		}
		done += len(rows)
		d.logf("seeded %d/%d accounts", done, d.cfg.Accounts)
	}
	return nil
}

// firstCycleStart is --cycle-start, else (with --keep) an unfinished cycle
// the schema's ledger records, else a trigger lead from now.
func (d *demo) firstCycleStart(ctx context.Context, triggerLead time.Duration) (time.Time, error) {
	if !d.cfg.CycleStart.IsZero() {
		return d.cfg.CycleStart.UTC(), nil
	}
	if d.cfg.Keep {
		// The ledger's latest cycle of the task, whatever River deleted.
		last, _, found, err := ledger.New(d.cfg.Schema).LatestCycle(ctx, d.pool, d.cfg.Task, "")
		if err != nil {
			return time.Time{}, fmt.Errorf("error looking for an unfinished cycle: %w", err)
		}
		if found && time.Now().Before(last.Add(d.cfg.Cycle)) {
			d.logf("found unfinished cycle %s; resuming it", last.UTC().Format(time.RFC3339))
			return last.UTC(), nil
		}
	}
	// The first whole second at least the trigger's lead minus a second
	// away: the client, started at once, bootstraps it through RunOnStart,
	// and slot 0's per-slot job is queued before River's scheduler must
	// promote it.
	start := time.Now().Add(triggerLead - time.Second).Truncate(time.Second)
	return start.UTC(), nil
}

// resetSchema creates the demo's schema and marks it as the demo's own, or,
// when it exists, drops and recreates it (without --keep) or keeps it (with
// --keep). The marker is checked again in the same transaction as the DROP, so
// a schema that is not the demo's is never dropped.
func (d *demo) resetSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		schema := pgx.Identifier{d.cfg.Schema}.Sanitize()
		state, err := QuerySchemaState(ctx, tx, d.cfg.Schema)
		if err != nil {
			return err
		}
		switch {
		case state == SchemaForeign:
			return &ForeignSchemaError{Schema: d.cfg.Schema} // checked before, in run
		case state == SchemaOwned && d.cfg.Keep:
			return nil
		case state == SchemaOwned:
			d.logf("dropping and recreating schema %s, created by an earlier demo (use --keep to reuse it)", d.cfg.Schema)
			if _, err := tx.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
				return fmt.Errorf("error dropping demo schema: %w", err)
			}
		default:
			d.logf("creating schema %s", d.cfg.Schema)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return fmt.Errorf("error creating demo schema: %w", err)
		}
		// COMMENT takes no bind parameters; the comment is a constant.
		if _, err := tx.Exec(ctx, "COMMENT ON SCHEMA "+schema+" IS '"+SchemaComment+"'"); err != nil {
			return fmt.Errorf("error marking demo schema: %w", err)
		}
		return nil
	})
}

// defaultAccounts makes the accounts pool River's when none is set.
func (d *demo) defaultAccounts() {
	if d.accounts == nil {
		d.accounts = d.pool
	}
}
