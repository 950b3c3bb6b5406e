package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

const migrateAbout = `Prepares a database for riverslot without writing Go: River's tables and
riverslot's (its ledger, shard maps and upstream limiter) in --schema, as
riverslot.Migrate does, and, with --table, the accounts table's bucket
index (as Scheduler.CreateIndexes does, CONCURRENTLY). It says what it
created and what was already there. Safe to run again: it changes only
what is missing or outdated. A new shard's database is prepared this way
before "riverslot shards set" names it.

  riverslot migrate --database-url URL --schema river [--table accounts --accounts-schema public --id-column id --buckets 256]

Exit codes: 0 done, 1 a migration failed, 2 bad flags or an unreachable
database.
`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", migrateAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	schema := fs.String("schema", "river", "River's schema (river.Config.Schema): River's and riverslot's tables go there; created when missing")
	table := fs.String("table", "", "the accounts table whose bucket index to create (default: none)")
	accountsSchema := fs.String("accounts-schema", "public", "the accounts table's schema (Task.Schema)")
	idColumn := fs.String("id-column", riverslot.IDColumnDefault, "the accounts table's uuid column (Task.IDColumn)")
	buckets := fs.Int("buckets", slotplan.Buckets, "the task's buckets (Task.Buckets): 256, or 65536 for a two-byte index")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkSchemaName("--schema", *schema); err != nil {
		return err
	}
	if *table != "" {
		if err := checkSchemaName("--accounts-schema", *accountsSchema); err != nil {
			return err
		}
		if err := checkSchemaName("--table", *table); err != nil {
			return err
		}
		if err := checkSchemaName("--id-column", *idColumn); err != nil {
			return err
		}
	}
	if *buckets != slotplan.Buckets && *buckets != slotplan.BucketsTwoByte {
		return usageErr("--buckets must be %d or %d (Task.Buckets), got %d", slotplan.Buckets, slotplan.BucketsTwoByte, *buckets)
	}
	pool, err := connect(ctx, databaseURL(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *table != "" {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{*accountsSchema, *table}.Sanitize()).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return usageErr("--table: no table %s.%s in this database; give the accounts table (and --accounts-schema), or leave --table out", *accountsSchema, *table)
		}
	}

	tables := []string{riverjob.Table, ledger.Table, ledger.ShardsTable, upstream.PlacesTable}
	before, err := existing(ctx, pool, *schema, tables)
	if err != nil {
		return err
	}
	if err := riverslot.Migrate(ctx, pool, *schema); err != nil {
		return err
	}
	after, err := existing(ctx, pool, *schema, tables)
	if err != nil {
		return err
	}
	for _, t := range tables {
		switch {
		case before[t]:
			fmt.Fprintf(stdout, "%s.%s: already there (brought up to date)\n", *schema, t)
		case after[t]:
			fmt.Fprintf(stdout, "%s.%s: created\n", *schema, t)
		}
	}
	if *table == "" {
		return nil
	}
	index := sqlbucket.IndexNameFor(*table, *idColumn, *buckets)
	had, err := existing(ctx, pool, *accountsSchema, []string{index})
	if err != nil {
		return err
	}
	if err := sqlbucket.CreateIndexFor(ctx, pool, *accountsSchema, *table, *idColumn, *buckets); err != nil {
		return err
	}
	if had[index] {
		fmt.Fprintf(stdout, "%s.%s: already there\n", *accountsSchema, index)
	} else {
		fmt.Fprintf(stdout, "%s.%s: created (the bucket index of %s.%s)\n", *accountsSchema, index, *accountsSchema, *table)
	}
	return nil
}

// existing says which of names (tables or indexes) exist in schema.
func existing(ctx context.Context, pool *pgxpool.Pool, schema string, names []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, n := range names {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, n}.Sanitize()).Scan(&ok); err != nil {
			return nil, fmt.Errorf("error looking for %s.%s: %w", schema, n, err)
		}
		out[n] = ok
	}
	return out, nil
}
