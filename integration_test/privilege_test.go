package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// leastPrivilegeGrants are the statements of the README's "Least privilege"
// section, for River's tables in riverSchema and the accounts table (and a
// weighted task's pins tables) in appSchema.
func leastPrivilegeGrants(riverSchema, appSchema, role string) []string {
	ident := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	return []string{
		"GRANT USAGE ON SCHEMA " + ident(riverSchema) + " TO " + ident(role),
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + ident(riverSchema) + " TO " + ident(role),
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + ident(riverSchema) + " TO " + ident(role),
		"GRANT USAGE ON SCHEMA " + ident(appSchema) + " TO " + ident(role),
		"GRANT SELECT ON " + ident(appSchema, "accounts") + " TO " + ident(role),
		// Weighted tasks only: the pins tables CreateIndexes made.
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + ident(appSchema, "riverslot_pin_cycles") + " TO " + ident(role),
		"GRANT SELECT, INSERT, DELETE ON " + ident(appSchema, "riverslot_pins") + " TO " + ident(role),
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + ident(appSchema, "riverslot_pin_census") + " TO " + ident(role),
		"GRANT SELECT, INSERT, DELETE ON " + ident(appSchema, "riverslot_pin_census_candidates") + " TO " + ident(role),
	}
}

// TestLeastPrivilege runs a real cycle of a weighted task with a role that
// has exactly the grants of the README's "Least privilege" section
// (leastPrivilegeGrants): River's tables in one schema, the accounts table
// read-only and the pins tables in another; the schema owner created
// River's tables, the accounts, the bucket index and the pins tables
// (Scheduler.CreateIndexes). The role checks the task, bootstraps the cycle
// (pins computed, recorded and pruned), fans it out and syncs every account
// exactly once, without a single job error, and reads the cycle's status;
// it cannot write the accounts table.
func TestLeastPrivilege(t *testing.T) {
	parallel(t)

	const (
		// 16 slots of 3 s: a sync goes stale only if it starts half a cycle
		// (24 s) late, which a loaded CI machine reached with 16 s cycles.
		cycle        = 48 * time.Second
		light, heavy = 400, 6
	)
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	riverSchema := riverslottest.Schema(ctx, t, pool)
	appSchema := riverslottest.EmptySchema(ctx, t, pool)
	ident := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	accounts := ident(appSchema, "accounts")
	ids := riverslottest.CreateAccounts(ctx, t, pool, appSchema, "accounts", light+heavy)
	_, err := pool.Exec(ctx, "ALTER TABLE "+accounts+" ADD COLUMN weight double precision NOT NULL DEFAULT 1")
	require.NoError(t, err)
	// Each heavy account outweighs the mean slot (40 against 39.6): a giant
	// pinned to a slot of its own.
	_, err = pool.Exec(ctx, "UPDATE "+accounts+" SET weight = 40 WHERE id = ANY($1)", ids[:heavy])
	require.NoError(t, err)
	// The test's record of syncs, written as the owner: what an app's Sync
	// writes is the app's business, not riverslot's.
	auditSchema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateSyncedTable(ctx, t, pool, auditSchema)

	task := riverslot.Task{
		Name: "transactions", Cycle: cycle, Schema: appSchema, Table: "accounts", Filter: "active", Weight: "weight",
		Sync: riverslottest.RecordSync(pool, auditSchema),
	}
	owner, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{task}})
	require.NoError(t, err)
	require.NoError(t, owner.CreateIndexes(ctx))

	role := riverSchema + "_app"
	_, err = pool.Exec(ctx, "CREATE ROLE "+ident(role)+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+ident(role))
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+ident(role))
	})
	for _, stmt := range leastPrivilegeGrants(riverSchema, appSchema, role) {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	cfg := pool.Config().Copy()
	cfg.ConnConfig.User = role
	cfg.ConnConfig.Password = ""
	appPool, err := riverslottest.NewPool(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(appPool.Close) // after the client stops (cleanups run last-in first-out)

	// The role cannot write the accounts table.
	for _, stmt := range []string{
		"INSERT INTO " + accounts + " (id) VALUES (gen_random_uuid())",
		"UPDATE " + accounts + " SET active = false",
		"DELETE FROM " + accounts,
		"TRUNCATE " + accounts,
	} {
		_, err := appPool.Exec(ctx, stmt)
		require.ErrorContains(t, err, "permission denied for table accounts", stmt)
	}

	app := &testBundle{ids: ids, pool: appPool, schema: riverSchema}
	scheduler := newScheduler(t, app, task)
	require.NoError(t, scheduler.Check(ctx))
	client := startClient(ctx, t, app, scheduler, false, river.QueueDefault)
	info := taskInfo(t, scheduler, "transactions")
	start := info.Schedule.Next(time.Now().Add(8 * time.Second))
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)

	jobs := ident(riverSchema, "river_job")
	synced := ident(auditSchema, "synced")
	waitFor(t, time.Until(start)+cycle+90*time.Second, "every account synced by the least-privileged role", func() bool {
		// A permission the role lacks fails a job's first attempt: stop
		// there, with Postgres' message.
		rows, err := pool.Query(ctx, "SELECT kind || ': ' || (errors[array_length(errors, 1)]->>'error') FROM "+jobs+" WHERE errors IS NOT NULL")
		require.NoError(t, err)
		failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, failed, "jobs failed as the least-privileged role:\n%s", strings.Join(failed, "\n"))
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = ANY($1) AND state <> 'completed'", []string{perslot.Kind, syncjob.Kind}) == 0 &&
			riverslottest.Count(ctx, t, pool, "SELECT count(DISTINCT account_id) FROM "+synced) == int64(len(ids))
	})

	require.EqualValues(t, len(ids), riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+synced), "every account synced exactly once")
	require.EqualValues(t, len(ids), riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind))
	require.EqualValues(t, info.Plan.Slots, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind))
	pinned := riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+ident(appSchema, "riverslot_pins")+" WHERE task = $1 AND cycle_start = $2", "transactions", start)
	require.GreaterOrEqual(t, pinned, int64(heavy), "the role's bootstrap pinned the giants")

	status, err := scheduler.StatusAt(ctx, "transactions", start)
	require.NoError(t, err, "the role reads the cycle's status")
	require.NotNil(t, status)
}
