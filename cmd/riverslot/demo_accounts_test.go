package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoAccountsDatabase runs a weighted demo cycle (32 s: 16 slots of 2 s,
// so a loaded machine does not make slots half a cycle late) with
// --accounts-database-url: the accounts table, its bucket index and the
// pins live in the second database, in a schema of the demo's name; River's
// database holds River's tables and nothing of the accounts (the report's
// measurement copy is dropped). Every account is synced exactly once.
func TestDemoAccountsDatabase(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	accountsPool, accountsURL := riverslottest.AccountsPool(t)
	schema := newDemoSchemaName(t, pool)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := accountsPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("error dropping schema %s in the accounts database: %v", schema, err)
		}
	})
	const accounts = 800
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--accounts-database-url", accountsURL,
		"--schema", schema, "--accounts", fmt.Sprint(accounts), "--cycle", "32s", "--weights", "pareto", "--workers", "10", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)

	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)
	require.EqualValues(t, accounts, s.Accounts)
	require.Len(t, s.PerTask, 1)
	requireDemoSynced(t, &s, accounts)
	require.NotNil(t, s.Pinned)

	exists := func(p interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, table string) bool {
		var ok bool
		require.NoError(t, p.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, table}.Sanitize()).Scan(&ok))
		return ok
	}
	for _, table := range []string{"accounts", demo.MeasuredTableName, "riverslot_pins", "riverslot_pin_cycles"} {
		require.False(t, exists(pool, table), "River's database holds no %s", table)
	}
	require.True(t, exists(pool, "river_job"), "River's tables are in River's database")
	for _, table := range []string{"accounts", "riverslot_pins", "riverslot_pin_cycles"} {
		require.True(t, exists(accountsPool, table), "the accounts database holds %s", table)
	}
	require.False(t, exists(accountsPool, "river_job"), "the accounts database holds nothing of River")
	var n int64
	require.NoError(t, accountsPool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "accounts"}.Sanitize()).Scan(&n))
	require.EqualValues(t, accounts, n)
	t.Logf("accounts=%d synced=%d missed=%d duplicates=%d pinned=%d peak=%d", s.Accounts, s.PerTask[0].Synced, s.PerTask[0].Missed,
		s.PerTask[0].Duplicates, *s.Pinned, s.PerTask[0].PeakQueueDepth)
}
