package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// markDemoSchema marks a test's schema as created by riverslot demo, as the
// demo does, so that `riverslot worker` runs on it.
func markDemoSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	_, err := pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+demo.SchemaComment+"'")
	require.NoError(t, err)
}

// TestWorkerRefusesAppSchema points the worker at a schema the demo did not
// create, an app's, with River's tables, accounts and queued sync jobs due
// now: it exits 2 with one line saying why and what to run instead, before
// any River client starts, and every job is as it was.
func TestWorkerRefusesAppSchema(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)

	type testBundle struct {
		jobs   string
		schema string
	}
	setup := func(t *testing.T, comment string) *testBundle {
		t.Helper()

		schema := riverslottest.Schema(ctx, t, pool)
		ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 50)
		riverslottest.CreateSyncedTable(ctx, t, pool, schema)
		if comment != "" {
			_, err := pool.Exec(ctx, "COMMENT ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" IS '"+comment+"'")
			require.NoError(t, err)
		}
		insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
		require.NoError(t, err)
		start := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: riverslot.SyncArgs{Task: "demo", AccountID: id, CycleStart: start}}
		}
		_, err = insertOnly.InsertMany(ctx, params)
		require.NoError(t, err)
		return &testBundle{jobs: pgx.Identifier{schema, "river_job"}.Sanitize(), schema: schema}
	}
	// jobRows is every job as River keeps it, for before/after comparison.
	jobRows := func(t *testing.T, b *testBundle) []string {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT concat_ws(' ', id, kind, state, attempt, attempted_at, attempted_by, finalized_at, errors) FROM "+b.jobs+" ORDER BY id")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}

	for _, tt := range []struct {
		name    string
		comment string
	}{
		{"NoComment", ""},
		{"OtherComment", "billing app"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, tt.comment)
			before := jobRows(t, b)
			require.Len(t, before, 50)
			require.EqualValues(t, 50, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+b.jobs+" WHERE kind = 'riverslot_sync' AND state = 'available'"))

			code, stdout, stderr := runWorkerOrFail(t, "--database-url", riverslottest.DatabaseURL(), "--schema", b.schema, "--max-conns", "3")
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			require.Equal(t, "riverslot worker: --schema "+b.schema+`: schema "`+b.schema+`" was not created by riverslot demo; nothing was started. `+
				"The worker's built-in sync only records syncs for the demo, so on an app's schema it would complete the app's sync jobs without running them. "+
				"Run the app's own workers (Scheduler.Configure) to work its jobs, and riverslot status --schema "+b.schema+" or the app's metrics to observe them\n", stderr)

			require.Equal(t, before, jobRows(t, b), "every job untouched")
			require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "river_leader"}.Sanitize()), "no River client started")
			require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "synced"}.Sanitize()))
		})
	}

	t.Run("Absent", func(t *testing.T) {
		t.Parallel()

		schema := newDemoSchemaName(t, pool)
		code, stdout, stderr := runWorkerOrFail(t, "--database-url", riverslottest.DatabaseURL(), "--schema", schema)
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		require.Equal(t, "riverslot worker: --schema "+schema+`: schema "`+schema+`" does not exist; nothing was started. `+
			"Create it with riverslot demo --schema "+schema+" (the worker runs only on a schema the demo created)\n", stderr)
		state, err := demo.QuerySchemaState(ctx, pool, schema)
		require.NoError(t, err)
		require.Equal(t, demo.SchemaAbsent, state)
	})

	// The same app schema, once marked as the demo's, is served.
	t.Run("DemoSchema", func(t *testing.T) {
		t.Parallel()

		b := setup(t, "")
		markDemoSchema(ctx, t, pool, b.schema)
		stdout, stderr, stop := startWorkerCmd(t, "--database-url", riverslottest.DatabaseURL(), "--schema", b.schema, "--max-conns", "3", "--periodic=false")
		riverslottest.WaitFor(t, time.Minute, "the queued syncs worked", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "synced"}.Sanitize()) == 50
		})
		require.Equal(t, 0, stop(), stderr.String())
		require.Contains(t, stdout.String(), "stopped")
	})
}

// runWorkerOrFail runs `riverslot worker` with args and returns its exit
// code, stdout and stderr; a worker that starts instead of exiting fails the
// test (and is stopped).
func runWorkerOrFail(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	defer reserveCmdConns(t, append([]string{"worker"}, args...))()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &signalWriter{started: make(chan struct{})}
	started := stdout.started
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"worker"}, args...), stdout, &stderr) }()
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-started:
		cancel()
		<-done
		t.Fatalf("the worker started:\n%s", strings.TrimSpace(stderr.String()))
		return 0, "", ""
	}
}
