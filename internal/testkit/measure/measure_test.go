package measure_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }

// TestMissedSkippedCountsFanOutSkips: an account missed because its
// fan-out skipped it (late, counted in the ledger) has a reason, as one
// whose sync job completed as stale; one missed with no job beyond the
// ledger's count has none. (A resumed demo's late fan-outs skipped 57
// accounts, and the report called them missed with no reason.)
func TestMissedSkippedCountsFanOutSkips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateSyncedTable(ctx, t, pool, schema)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	const task = "t"
	start := time.Now().UTC().Truncate(time.Second)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	synced := pgx.Identifier{schema, "synced"}.Sanitize()

	// ids[0:6] synced; ids[6] its sync job stale; ids[7:10] no job (the
	// fan-out's skips, as many as the ledger below says).
	for i, id := range ids[:7] {
		output := `{}`
		if i == 6 {
			output = `{"output": {"` + syncjob.OutputSkipped + `": "stale"}}`
		}
		_, err := pool.Exec(ctx, "INSERT INTO "+jobs+" (kind, args, state, metadata, max_attempts, attempt, attempted_at, finalized_at, scheduled_at)"+
			" VALUES ($1, jsonb_build_object('task', $2::text, 'account_id', $3::uuid, 'cycle_start', $4::timestamptz), 'completed', $5::jsonb, 25, 1, $4, $4, $4)",
			syncjob.Kind, task, id, start, output)
		require.NoError(t, err)
		if i < 6 {
			_, err = pool.Exec(ctx, "INSERT INTO "+synced+" (task, account_id, cycle_start) VALUES ($1, $2, $3)", task, id, start)
			require.NoError(t, err)
		}
	}
	target := measure.Target{RiverSchema: schema, AccountsTable: pgx.Identifier{schema, "accounts"}.Sanitize(), IDColumn: "id",
		SyncKind: syncjob.Kind, Task: task, SyncedTable: synced}
	for _, tt := range []struct {
		ledgerSkipped int64 // over two slots
		wantSkipped   int64
	}{
		{0, 1}, // no fan-out skipped any: only the stale one has a reason
		{2, 3}, // two of the three without a job
		{3, 4}, // all three
		{5, 4}, // never more than the accounts without a job
	} {
		_, err := pool.Exec(ctx, "DELETE FROM "+ledger.New(schema).QualifiedTable())
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+ledger.New(schema).QualifiedTable()+" (task, cycle_start, plan, slot, skipped) VALUES ($1, $2, 'p', 0, $3), ($1, $2, 'p', 1, $4), ($1, $2, 'p', -1, 99)",
			task, start, tt.ledgerSkipped/2, tt.ledgerSkipped-tt.ledgerSkipped/2)
		require.NoError(t, err)
		c, err := measure.MeasureCycle(ctx, pool, target, start)
		require.NoError(t, err)
		require.EqualValues(t, 10, c.Accounts)
		require.EqualValues(t, 6, c.SyncedOnce)
		require.EqualValues(t, 4, c.Missed)
		require.Equal(t, tt.ledgerSkipped, c.FanOutSkipped)
		require.Equal(t, tt.wantSkipped, c.MissedSkipped, "ledger skipped %d", tt.ledgerSkipped)
	}
	// Another cycle's skips do not count.
	c, err := measure.MeasureCycle(ctx, pool, target, start.Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, c.FanOutSkipped)
}
