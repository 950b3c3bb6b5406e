package riverutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/riverslot/riverslot/internal/taskspec"
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
// the table exists and is readable, the id column exists and is uuid, and
// the exact queries the per-slot and sync tiers run (with the filter spliced
// in) are valid. It never writes: the queries are planned with EXPLAIN, not
// executed, inside a read-only transaction that is rolled back. A missing
// bucket index is logged as a warning, not an error. Run Check before
// CreateIndexes, so a wrong table or column gets Check's error rather than
// Postgres' own.
func (s *Scheduler) Check(ctx context.Context) error {
	var errs []error
	for _, spec := range s.specs {
		if err := s.checkTask(ctx, spec); err != nil {
			errs = append(errs, fmt.Errorf("task %q: %w", spec.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Scheduler) checkTask(ctx context.Context, spec *taskspec.Spec) error {
	table := spec.QualifiedTable

	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
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
		table, spec.IDColumn).Scan(&found, &typ)
	if err != nil {
		return fmt.Errorf("error looking up Table %s: %w", table, err)
	}
	if !found {
		return fmt.Errorf("Table %s does not exist or is not visible to this role; create it, fix Table/Schema, or grant USAGE on its schema", table)
	}
	if typ == nil {
		return fmt.Errorf("IDColumn %q does not exist in Table %s; set IDColumn to the account's uuid column", spec.IDColumn, table)
	}
	if *typ != "uuid" {
		return fmt.Errorf("IDColumn %q of Table %s has type %s; it must be uuid (riverslot buckets accounts by the UUID's last byte)", spec.IDColumn, table, *typ)
	}

	// The exact queries the tiers run, prepared (extended protocol, so a
	// second statement cannot ride along) and planned, not executed.
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"per-slot first page", spec.SQL.FirstPage, []any{0, 1, 1}},
		{"per-slot next page", spec.SQL.NextPage, []any{0, 1, 1, 0, uuid.Nil}},
		{"sync existence check", spec.SQL.Exists, []any{uuid.Nil}},
	} {
		if _, err := tx.Exec(ctx, "EXPLAIN "+q.sql, q.args...); err != nil {
			if spec.Filter != "" {
				return fmt.Errorf("Filter %q is not a valid boolean condition on Table %s (checked in the %s query): %w", spec.Filter, table, q.name, err)
			}
			return fmt.Errorf("error planning the %s query on Table %s: %w", q.name, table, err)
		}
	}
	if spec.Weighted() {
		if err := s.checkWeight(ctx, tx, spec); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, spec.SQL.FirstPage, 0, 255, 0); err != nil {
		return fmt.Errorf("cannot select from Table %s; grant SELECT on it to this role: %w", table, err)
	}

	var hasIndex bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = to_regclass($1) AND c.relname = $2)`, table, sqlbucket.IndexName(spec.Table, spec.IDColumn)).Scan(&hasIndex); err != nil {
		return fmt.Errorf("error looking up bucket index: %w", err)
	}
	if !hasIndex {
		s.log().WarnContext(ctx, "riverslot: bucket index missing; per-slot selection will scan the whole table. Create it with Scheduler.CreateIndexes or sqlbucket.IndexDDL",
			slog.String("task", spec.Name), slog.String("ddl", sqlbucket.IndexDDL(spec.Schema, spec.Table, spec.IDColumn)))
	}
	return nil
}

// numericTypes are the OIDs of the types a Weight may have: int2, int4,
// int8, float4, float8 and numeric.
var numericTypes = map[uint32]bool{21: true, 23: true, 20: true, 700: true, 701: true, 1700: true}

// checkWeight checks a weighted task's Weight is a numeric expression of
// Table and plans the queries the weighted placement runs; those on the
// pins tables only when the tables exist (CreateIndexes creates them).
func (s *Scheduler) checkWeight(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec) error {
	table := spec.QualifiedTable
	sd, err := tx.Prepare(ctx, "", "SELECT ("+spec.Weight+") FROM "+table+" WHERE false")
	if err != nil {
		return fmt.Errorf("Weight %q is not a valid expression on Table %s: %w", spec.Weight, table, err)
	}
	if len(sd.Fields) != 1 || !numericTypes[sd.Fields[0].DataTypeOID] {
		return fmt.Errorf("Weight %q on Table %s is not numeric; use a column or expression of type integer, bigint, real, double precision or numeric", spec.Weight, table)
	}
	queries := []struct {
		name string
		sql  string
		args []any
	}{
		{"per-slot weights", spec.Pins.SlotWeights, nil},
		{"heaviest accounts", spec.Pins.Candidates, []any{1}},
		{"accounts of a slot kept for a giant", spec.Pins.RangeAccounts, []any{0, 1}},
	}
	var pinsExist bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
		sqlbucket.QualifiedTable(spec.Schema, taskspec.PinsTable), sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCyclesTable)).Scan(&pinsExist); err != nil {
		return fmt.Errorf("error looking up the pins tables: %w", err)
	}
	if pinsExist {
		pin := []any{spec.Name, spec.PlanID, time.Time{}}
		read := spec.PinRead(spec.Schema)
		queries = append(queries, []struct {
			name string
			sql  string
			args []any
		}{
			{"previous pins", spec.Pins.Previous, pin},
			{"pins of a page", read.PageRange, append(pin, 0, uuid.Nil, 1, uuid.Nil)},
			{"pinned first page", read.PinnedFirstPage, append(pin, 0, 1)},
			{"pinned next page", read.PinnedNextPage, append(pin, 0, 1, uuid.Nil)},
			{"pins of accounts", read.Slots, append(pin, []uuid.UUID{})},
		}...)
	} else {
		s.log().WarnContext(ctx, "riverslot: pins tables missing; the bootstrap of a weighted task fails until Scheduler.CreateIndexes creates them",
			slog.String("task", spec.Name), slog.String("table", sqlbucket.QualifiedTable(spec.Schema, taskspec.PinsTable)))
	}
	for _, q := range queries {
		if _, err := tx.Exec(ctx, "EXPLAIN "+q.sql, q.args...); err != nil {
			return fmt.Errorf("Weight %q or Filter %q is not valid on Table %s (checked in the %s query): %w", spec.Weight, spec.Filter, table, q.name, err)
		}
	}
	return nil
}

// CreateIndexes creates the bucket expression index of every task's table
// (CREATE INDEX CONCURRENTLY IF NOT EXISTS), once per distinct table, and
// for weighted tasks the pins tables in the task's Schema (see
// Task.Weight), once per schema.
func (s *Scheduler) CreateIndexes(ctx context.Context) error {
	done := make(map[string]bool)
	for _, spec := range s.specs {
		if !spec.Weighted() || done["pins:"+spec.Schema] {
			continue
		}
		done["pins:"+spec.Schema] = true
		for _, ddl := range taskspec.PinsDDL(spec.Schema) {
			if _, err := s.pool.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("error creating the pins tables in schema %q: %w", spec.Schema, err)
			}
		}
	}
	for _, spec := range s.specs {
		key := spec.QualifiedTable + "." + spec.QuotedID
		if done[key] {
			continue
		}
		done[key] = true
		if err := sqlbucket.CreateIndex(ctx, s.pool, spec.Schema, spec.Table, spec.IDColumn); err != nil {
			return err
		}
	}
	return nil
}
