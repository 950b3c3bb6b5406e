package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestKillMidFanOutAccountsDatabase keeps the accounts in a second database
// (riverslot_test_accounts, same schema name, no accounts table in River's)
// and SIGKILLs a `riverslot worker --accounts-database-url` process in the
// middle of a per-slot fan-out; a second process resumes it from the cursor
// River's database holds. Every account gets exactly one sync job, and the
// syncs' existence check reads the accounts database: the accounts deleted
// there after the fan-out are not synced, every other one is, once.
//
// The kill lands mid fan-out by construction (holdSyncInsertsAfter), as in
// TestKillMidFanOut; one trial, one slot of a 16 s cycle.
func TestKillMidFanOutAccountsDatabase(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 4) // node A, then node B, each with a pool on both databases

	const (
		accounts  = 12_000 // all in slot 0
		batchSize = 500
		killAfter = 5_000
		deleted   = 10
	)
	ctx, b := setup(t, 0)
	markSchemaAsDemos(ctx, t, b.pool, b.schema)
	// Nothing of the accounts in River's database: a read that went there
	// would fail.
	_, err := b.pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{b.schema, "accounts"}.Sanitize())
	require.NoError(t, err)

	accountsPool, accountsURL := riverslottest.AccountsPool(t)
	ids := createAccountsElsewhere(ctx, t, accountsPool, b.schema, accounts, 0, 15) // cycle 16s: slot 0 = buckets 0..15

	args := []string{"--accounts-database-url", accountsURL, "--cycle", "16s", "--batch-size", fmt.Sprint(batchSize),
		"--sync-queue", "parked", "--rescue-after", "9s", "--per-slot-timeout", "8s", "--sync-timeout", "4s",
		"--task", "transactions", "--periodic=false"}
	scheduler, err := riverslot.New(b.pool, &riverslot.Config{
		AccountsPool: accountsPool, Logger: riverslottest.Logger(t),
		Tasks: []riverslot.Task{{Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync()}},
	})
	require.NoError(t, err)
	require.NoError(t, scheduler.Check(ctx), "Check reads the accounts database")
	plan, err := taskspec.ParsePlanKey(taskInfo(t, scheduler, "transactions").PlanID)
	require.NoError(t, err)

	release := b.holdSyncInsertsAfter(ctx, t, killAfter)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	a := startWorker(t, b.schema, "nodeA", append(args, "--work-sync=false")...)
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	cycleStart := time.Now().Truncate(16 * time.Second).Add(time.Hour)
	res, err := insertOnly.Insert(ctx, perslot.Args{Task: "transactions", CycleStart: cycleStart, Slot: 0, Plan: plan}, nil)
	require.NoError(t, err)

	countSync := func() int64 {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
	}
	held := int64((killAfter + batchSize - 1) / batchSize * batchSize)
	waitFor(t, 120*time.Second, fmt.Sprintf("%d sync jobs before the kill", held), func() bool { return countSync() >= held })
	a.kill(t)
	release()
	atKill := countSync()
	job, err := insertOnly.JobGet(ctx, res.Job.ID)
	require.NoError(t, err)
	requireLeftByKill(t, job)
	require.Equal(t, held, atKill, "nothing committed while the fan-out was held")
	require.Less(t, atKill, int64(accounts), "killed before the fan-out finished")

	startWorker(t, b.schema, "nodeB", args...)
	waitFor(t, 180*time.Second, "the orphaned per-slot job to be rescued and completed", func() bool {
		job, err = insertOnly.JobGet(ctx, res.Job.ID)
		require.NoError(t, err)
		return job.State == rivertype.JobStateCompleted
	})
	total := countSync()
	distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
	require.EqualValues(t, accounts, total, "one sync job per account")
	require.EqualValues(t, accounts, distinct, "no account enqueued twice")
	require.GreaterOrEqual(t, job.Attempt, 2)

	// The syncs run now (their slot is an hour ahead): the ones whose
	// account was deleted from the accounts database complete without
	// syncing.
	_, err = accountsPool.Exec(ctx, "DELETE FROM "+pgx.Identifier{b.schema, "accounts"}.Sanitize()+" WHERE id = ANY($1)", ids[:deleted])
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now() WHERE kind = $1 AND state = 'scheduled'", syncjob.Kind)
	require.NoError(t, err)
	waitFor(t, 180*time.Second, "every sync job to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", syncjob.Kind) == accounts
	})
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	require.EqualValues(t, accounts-deleted, b.count(ctx, t, "SELECT count(*) FROM "+synced))
	require.EqualValues(t, accounts-deleted, b.count(ctx, t, "SELECT count(DISTINCT account_id) FROM "+synced))
	require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE account_id = ANY($1)", ids[:deleted]), "deleted accounts are not synced")
	t.Logf("accounts=%d committed_at_kill=%d sync_jobs=%d distinct=%d attempts=%d synced=%d (deleted %d)",
		accounts, atKill, total, distinct, job.Attempt, accounts-deleted, deleted)
}

// createAccountsElsewhere creates schema.accounts in pool's database (the
// accounts database; the schema is dropped at cleanup) with its bucket
// index and n active accounts whose last byte lies in [lo, hi].
func createAccountsElsewhere(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, n int, lo, hi byte) []uuid.UUID {
	t.Helper()
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("error dropping schema %s in the accounts database: %v", schema, err)
		}
	})
	_, err = pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)")
	require.NoError(t, err)
	ids := make([]uuid.UUID, n)
	rows := make([][]any, n)
	span := int(hi-lo) + 1
	for i := range ids {
		ids[i] = uuid.New()
		ids[i][15] = lo + byte(i%span)
		rows[i] = []any{ids[i], true}
	}
	_, err = pool.CopyFrom(ctx, pgx.Identifier{schema, "accounts"}, []string{"id", "active"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
	return ids
}
