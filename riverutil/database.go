package riverutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverslot/riverslot/sqlbucket"
)

// Migrate brings River's tables in schema ("" for search_path) up to the
// version this River release needs. It is rivermigrate's Migrate up, for
// apps that do not run River's CLI.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("error creating River migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("error migrating River tables in schema %q: %w", schema, err)
	}
	return nil
}

// Check verifies every task against the database before the client starts:
// the table exists and is readable, the id column exists and is uuid, and the
// filter is a valid boolean condition. It never writes: the filter is checked
// with EXPLAIN (not executed) inside a read-only transaction that is rolled
// back. A missing bucket index is logged as a warning, not an error.
func (p *Plugin) Check(ctx context.Context) error {
	var errs []error
	for _, t := range p.tasks {
		if err := p.checkTask(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("riverslot task %q: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Plugin) checkTask(ctx context.Context, t *task) error {
	table := sqlbucket.QualifiedTable(t.Schema, t.Table)

	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("error starting check transaction: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only, always rolled back

	var typ *string
	var found bool
	err = tx.QueryRow(ctx, `
		SELECT to_regclass($1) IS NOT NULL,
		       (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		         WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped)`,
		table, t.IDColumn).Scan(&found, &typ)
	if err != nil {
		return fmt.Errorf("error looking up Table %s: %w", table, err)
	}
	if !found {
		return fmt.Errorf("Table %s does not exist or is not visible to this role; create it, fix Table/Schema, or grant USAGE on its schema", table)
	}
	if typ == nil {
		return fmt.Errorf("IDColumn %q does not exist in Table %s; set IDColumn to the account's uuid column", t.IDColumn, table)
	}
	if *typ != "uuid" {
		return fmt.Errorf("IDColumn %q of Table %s has type %s; it must be uuid (riverslot buckets accounts by the UUID's last byte)", t.IDColumn, table, *typ)
	}

	// Prepared (extended protocol), so a second statement cannot ride along.
	query := "SELECT " + pgx.Identifier{t.IDColumn}.Sanitize() + " FROM " + table
	if t.Filter != "" {
		query += " WHERE (" + t.Filter + ")"
	}
	if _, err := tx.Exec(ctx, "EXPLAIN "+query); err != nil {
		if t.Filter != "" {
			return fmt.Errorf("Filter %q is not a valid boolean condition on Table %s: %w", t.Filter, table, err)
		}
		return fmt.Errorf("cannot select from Table %s (is SELECT granted?): %w", table, err)
	}
	if _, err := tx.Exec(ctx, query+" LIMIT 0"); err != nil {
		return fmt.Errorf("cannot select from Table %s; grant SELECT on it to this role: %w", table, err)
	}

	var hasIndex bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = to_regclass($1) AND c.relname = $2)`, table, sqlbucket.IndexName(t.Table, t.IDColumn)).Scan(&hasIndex); err != nil {
		return fmt.Errorf("error looking up bucket index: %w", err)
	}
	if !hasIndex {
		p.logger.WarnContext(ctx, "riverslot: bucket index missing; per-slot selection will scan the whole table. Create it with sqlbucket.IndexDDL or Plugin.CreateIndexes",
			slog.String("task", t.Name), slog.String("ddl", sqlbucket.IndexDDL(t.Schema, t.Table, t.IDColumn)))
	}
	return nil
}

// CreateIndexes creates the bucket expression index of every task's table
// (CREATE INDEX CONCURRENTLY IF NOT EXISTS), once per distinct table.
func (p *Plugin) CreateIndexes(ctx context.Context) error {
	done := make(map[string]bool)
	for _, t := range p.tasks {
		key := sqlbucket.QualifiedTable(t.Schema, t.Table) + "." + t.IDColumn
		if done[key] {
			continue
		}
		done[key] = true
		if err := sqlbucket.CreateIndex(ctx, p.pool, t.Schema, t.Table, t.IDColumn); err != nil {
			return err
		}
	}
	return nil
}
