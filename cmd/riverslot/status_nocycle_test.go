package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusNoCycleNamesNoFlagPlan: riverslot status on a task the ledger
// has no cycle of says so, naming the task and no plan: the task is built
// from the flags (here their defaults), whose plan the app may never have
// had. Before the fix it named the flags' "plan 120s/8/...".
func TestStatusNoCycleNamesNoFlagPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)

	code, stdout, stderr := runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "hourly")
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Equal(t, `riverslot status: task "hourly" has no cycle yet: riverslot's ledger records no bootstrapped cycle of the task, under any plan`+"\n", stderr)
	require.NotContains(t, stderr, "120s")
}
