package inspect

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
)

// CheckRiverSchema returns an *InputError unless schema holds River's job
// table and riverslot's ledger: the schema of the app's River tables.
func CheckRiverSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var jobs, led bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		riverjob.QualifiedTable(schema), ledger.New(schema).QualifiedTable()).Scan(&jobs, &led); err != nil {
		return fmt.Errorf("error looking for River's tables: %w", err)
	}
	switch {
	case !jobs:
		return inputErr("--schema %q has no river_job table; give the schema of the app's River tables (river.Config.Schema)", schema)
	case !led:
		return inputErr("--schema %q has River's tables but no riverslot ledger (%s); run riverslot.Migrate on it, or give the schema of the app's River tables", schema, ledger.Table)
	}
	current, err := ledger.New(schema).Current(ctx, pool)
	if err != nil {
		return err
	}
	if !current {
		return inputErr("--schema %q: %v", schema, ledger.ErrOutdated)
	}
	return nil
}
