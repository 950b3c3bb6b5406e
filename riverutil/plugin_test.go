package riverutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/syncjob"
)

func noopSync(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil }

func validTask() riverutil.Task {
	return riverutil.Task{Name: "transactions", Cycle: 24 * time.Hour, Table: "accounts", Sync: noopSync}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()

	pool := riverslottest.Pool(t)

	for _, tt := range []struct {
		name   string
		mutate func(*riverutil.Task)
		want   string
	}{
		{"ZeroCycle", func(x *riverutil.Task) { x.Cycle = 0 }, "Cycle must be at least 2s, got 0s"},
		{"NegativeCycle", func(x *riverutil.Task) { x.Cycle = -time.Hour }, "Cycle must be at least 2s, got -1h0m0s"},
		{"SubSecondCycle", func(x *riverutil.Task) { x.Cycle = 500 * time.Millisecond }, "Cycle must be at least 2s, got 500ms"},
		{"FractionalCycle", func(x *riverutil.Task) { x.Cycle = 2500 * time.Millisecond }, "Cycle must be a whole number of seconds, got 2.5s"},
		{"OneSlotCycle", func(x *riverutil.Task) { x.Cycle = 3 * time.Second }, "yields a single slot"},
		{"EmptyName", func(x *riverutil.Task) { x.Name = "" }, `Name must be 1-64 letters, digits, '_', '-' or '.', got ""`},
		{"NameWithSpace", func(x *riverutil.Task) { x.Name = "a b" }, `Name must be 1-64 letters`},
		{"MissingTable", func(x *riverutil.Task) { x.Table = "" }, "Table must be set to the table holding the accounts"},
		{"TableWithQuote", func(x *riverutil.Task) { x.Table = `acc"ounts` }, `Table must be a plain identifier without quotes, ';' or '--' (it is quoted for you), got "acc\"ounts"`},
		{"TableWithSemicolon", func(x *riverutil.Task) { x.Table = "accounts; DROP TABLE x" }, "Table must be a plain identifier"},
		{"ColumnWithComment", func(x *riverutil.Task) { x.IDColumn = "id--" }, "IDColumn must be a plain identifier"},
		{"SchemaTooLong", func(x *riverutil.Task) { x.Schema = string(make([]byte, 64)) }, "Schema must be at most 63 bytes"},
		{"FilterWithSemicolon", func(x *riverutil.Task) { x.Filter = "true; DELETE FROM accounts" }, "Filter must be a single SQL boolean expression without ';'"},
		{"BatchSizeNegative", func(x *riverutil.Task) { x.BatchSize = -1 }, "BatchSize must be between 1 and 50000, got -1"},
		{"BatchSizeTooLarge", func(x *riverutil.Task) { x.BatchSize = 50_001 }, "BatchSize must be between 1 and 50000, got 50001"},
		{"PriorityOutOfRange", func(x *riverutil.Task) { x.Priority = 5 }, "Priority must be between 1 and 4, got 5"},
		{"MaxAttemptsNegative", func(x *riverutil.Task) { x.MaxAttempts = -1 }, "MaxAttempts must be at least 1, got -1"},
		{"NegativeSyncTimeout", func(x *riverutil.Task) { x.SyncTimeout = -time.Second }, "SyncTimeout must not be negative, got -1s"},
		{"NegativeLateGrace", func(x *riverutil.Task) { x.LateGrace = -time.Second }, "LateGrace must not be negative, got -1s"},
		{"UnknownLatePolicy", func(x *riverutil.Task) { x.LatePolicy = "burst" }, `LatePolicy must be "spread" or "skip", got "burst"`},
		{"MissingSync", func(x *riverutil.Task) { x.Sync = nil }, "Sync must be set to the function that syncs one account"},
		{"OffsetOutOfRange", func(x *riverutil.Task) { x.TriggerOffset = 25 * time.Hour }, "TriggerOffset must be in [0, Cycle)"},
		{"LocationWithOddCycle", func(x *riverutil.Task) { x.Cycle = 256 * time.Second; x.Location = time.UTC }, "Cycle must divide 24h when Location is set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			task := validTask()
			tt.mutate(&task)
			_, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{task}})
			require.ErrorContains(t, err, tt.want)
		})
	}

	t.Run("BatchSizeZeroMeansDefault", func(t *testing.T) {
		t.Parallel()

		task := validTask()
		task.BatchSize = 0
		_, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{task}})
		require.NoError(t, err)
	})

	t.Run("DuplicateNames", func(t *testing.T) {
		t.Parallel()

		_, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{validTask(), validTask()}})
		require.EqualError(t, err, `Tasks[1]: Name "transactions" is used by another task; task names must be unique`)
	})

	t.Run("NoTasks", func(t *testing.T) {
		t.Parallel()

		_, err := riverutil.New(pool, nil)
		require.EqualError(t, err, "riverslot: Config.Tasks must contain at least one task")
	})

	t.Run("NilPool", func(t *testing.T) {
		t.Parallel()

		_, err := riverutil.New(nil, &riverutil.Config{Tasks: []riverutil.Task{validTask()}})
		require.EqualError(t, err, "riverslot: pool must not be nil")
	})

	t.Run("AllProblemsReported", func(t *testing.T) {
		t.Parallel()

		_, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{{Name: "x", Cycle: 120 * time.Second}}})
		require.ErrorContains(t, err, "Table must be set")
		require.ErrorContains(t, err, "Sync must be set")
	})
}

type checkBundle struct {
	pool   *pgxpool.Pool
	schema string
}

func setupCheck(t *testing.T) (context.Context, *checkBundle) {
	t.Helper()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "text_ids"}.Sanitize()+" (id text PRIMARY KEY)")
	require.NoError(t, err)
	return ctx, &checkBundle{pool: pool, schema: schema}
}

func TestCheck(t *testing.T) {
	t.Parallel()

	check := func(ctx context.Context, t *testing.T, bundle *checkBundle, mutate func(*riverutil.Task)) error {
		t.Helper()
		task := validTask()
		task.Schema = bundle.schema
		mutate(&task)
		plugin, err := riverutil.New(bundle.pool, &riverutil.Config{Tasks: []riverutil.Task{task}})
		require.NoError(t, err)
		return plugin.Check(ctx)
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		require.NoError(t, check(ctx, t, bundle, func(x *riverutil.Task) { x.Filter = "active" }))
	})

	t.Run("UnknownTable", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverutil.Task) { x.Table = "nope" })
		require.ErrorContains(t, err, `Table "`+bundle.schema+`"."nope" does not exist or is not visible to this role`)
	})

	t.Run("UnknownColumn", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverutil.Task) { x.IDColumn = "account_id" })
		require.ErrorContains(t, err, `IDColumn "account_id" does not exist in Table`)
	})

	t.Run("ColumnNotUUID", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverutil.Task) { x.Table = "text_ids" })
		require.ErrorContains(t, err, `IDColumn "id" of Table "`+bundle.schema+`"."text_ids" has type text; it must be uuid`)
	})

	t.Run("FilterSyntaxError", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverutil.Task) { x.Filter = "active AND AND" })
		require.ErrorContains(t, err, `Filter "active AND AND" is not a valid boolean condition on Table`)
	})

	t.Run("FilterUnknownColumn", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverutil.Task) { x.Filter = "restricted" })
		require.ErrorContains(t, err, `Filter "restricted" is not a valid boolean condition`)
	})

	t.Run("FilterInjectionLeavesDatabaseUnchanged", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		// Breaks out of the parentheses and tries a data-modifying CTE-free
		// write; the check only EXPLAINs, in a read-only transaction.
		err := check(ctx, t, bundle, func(x *riverutil.Task) {
			x.Filter = "true) OR (SELECT count(*) FROM pg_sleep(0)) > 0 OR (true"
		})
		require.NoError(t, err, "a convoluted but valid read-only filter is accepted")

		err = check(ctx, t, bundle, func(x *riverutil.Task) {
			x.Filter = "(SELECT true FROM (DELETE FROM accounts RETURNING 1) d LIMIT 1)"
		})
		require.Error(t, err)
		var n int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{bundle.schema, "accounts"}.Sanitize()).Scan(&n))
		require.Equal(t, 10, n, "no account deleted")
	})
}

func TestEnqueueCycle(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	task := validTask()
	task.Cycle = 120 * time.Second
	task.Schema = schema
	plugin, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{task}})
	require.NoError(t, err)

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)

	start := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC)
	first, err := plugin.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	require.False(t, first.UniqueSkippedAsDuplicate)
	second, err := plugin.EnqueueCycle(ctx, client, "transactions", start.In(time.FixedZone("X", 3600)))
	require.NoError(t, err)
	require.True(t, second.UniqueSkippedAsDuplicate, "same cycle in another location is the same cycle")
	require.Equal(t, first.Job.ID, second.Job.ID)

	job := rivertest.RequireInserted(ctx, t, riverpgxv5.New(pool), bootstrap.Args{}, &rivertest.RequireInsertedOpts{
		Schema: schema, Priority: 1, Queue: river.QueueDefault, State: rivertype.JobStateAvailable,
	})
	require.Equal(t, "transactions", job.Args.Task)
	require.True(t, start.Equal(job.Args.CycleStart))

	_, err = plugin.EnqueueCycle(ctx, client, "transactions", start.Add(time.Second))
	require.ErrorContains(t, err, "is not a cycle start of task \"transactions\" (cycle 2m0s); the cycle containing it starts at 2030-01-01T00:02:00Z")
	_, err = plugin.EnqueueCycle(ctx, client, "nope", start)
	require.EqualError(t, err, `riverslot: no task named "nope"`)
}

// TestPeriodicTriggerOnePerCycle starts two clients with RunOnStart triggers
// against one schema and checks that exactly one bootstrap job exists for
// the current cycle, anchored at the nominal cycle start.
func TestPeriodicTriggerOnePerCycle(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	task := validTask()
	task.Cycle = time.Hour // long enough that the test stays inside one cycle
	task.Schema = schema
	plugin, err := riverutil.New(pool, &riverutil.Config{Tasks: []riverutil.Task{task}})
	require.NoError(t, err)

	for range 2 {
		// Trigger-only clients (no workers running jobs): the bootstrap stays
		// in the table for inspection. Each is briefly leader in turn.
		workers := river.NewWorkers()
		require.NoError(t, plugin.AddWorkers(workers))
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Schema:       schema,
			PeriodicJobs: plugin.PeriodicJobs(),
			Queues:       map[string]river.QueueConfig{"unused": {MaxWorkers: 1}},
			Workers:      workers,
			TestOnly:     true,
		})
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE kind = $1", bootstrap.Kind).Scan(&n))
			return n >= 1
		}, 20*time.Second, 50*time.Millisecond)
		require.NoError(t, client.Stop(ctx))
	}

	schedule, _ := plugin.Schedule("transactions")
	wantStart := schedule.Start(time.Now().Add(riverutil.TriggerTolerance))
	jobs := rivertest.RequireManyInserted(ctx, t, riverpgxv5.New(pool), []rivertest.ExpectedJob{
		{Args: bootstrap.Args{}, Opts: &rivertest.RequireInsertedOpts{Schema: schema}},
	})
	require.Len(t, jobs, 1)
	var args bootstrap.Args
	require.NoError(t, jsonUnmarshal(jobs[0].EncodedArgs, &args))
	require.True(t, wantStart.Equal(args.CycleStart), "bootstrap anchored at %s, want %s", args.CycleStart, wantStart)
	require.Equal(t, perslot.Kind, perslot.Args{}.Kind())
}
