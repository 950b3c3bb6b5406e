package riverslot_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
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

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func noopSync(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }

func validTask() riverslot.Task {
	return riverslot.Task{Name: "transactions", Cycle: 24 * time.Hour, Table: "accounts", Sync: noopSync}
}

// lazyPool is a pool that never connects: validation needs no database.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestNewValidation(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name   string
		mutate func(*riverslot.Task)
		want   string
	}{
		{"ZeroCycle", func(x *riverslot.Task) { x.Cycle = 0 }, "Cycle must be at least 16s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got 0s"},
		{"NegativeCycle", func(x *riverslot.Task) { x.Cycle = -time.Hour }, "Cycle must be at least 16s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got -1h0m0s"},
		{"SubSecondCycle", func(x *riverslot.Task) { x.Cycle = 500 * time.Millisecond }, "Cycle must be at least 16s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got 500ms"},
		{"FractionalCycle", func(x *riverslot.Task) { x.Cycle = 20500 * time.Millisecond }, "Cycle must be a whole number of seconds, got 20.5s"},
		{"OneSlotCycle", func(x *riverslot.Task) { x.Cycle = 301 * time.Second }, "yields a single slot"},
		{"NinetyMillisCycle", func(x *riverslot.Task) { x.Cycle = 90 * time.Millisecond }, "Cycle must be at least 16s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got 90ms; use e.g. 32s"},
		{"BadFirstCycle", func(x *riverslot.Task) { x.FirstCycle = "sometimes" }, `FirstCycle must be "late", "all" or "next", got "sometimes"`},
		{"CycleShorterThanRiversTick", func(x *riverslot.Task) { x.Cycle = 8 * time.Second }, "Cycle must be at least 16s (River's scheduler promotes jobs every 5 s; slots of a shorter cycle cannot start on time), got 8s"},
		{"EmptyName", func(x *riverslot.Task) { x.Name = "" }, `Name must be 1-64 letters, digits, '_', '-' or '.', got ""`},
		{"NameWithSpace", func(x *riverslot.Task) { x.Name = "a b" }, `Name must be 1-64 letters`},
		{"MissingTable", func(x *riverslot.Task) { x.Table = "" }, "Table must be set to the table holding the accounts"},
		{"TableWithQuote", func(x *riverslot.Task) { x.Table = `acc"ounts` }, `Table must be a plain identifier without quotes, ';' or '--' (it is quoted for you), got "acc\"ounts"`},
		{"TableWithSemicolon", func(x *riverslot.Task) { x.Table = "accounts; DROP TABLE x" }, "Table must be a plain identifier"},
		{"ColumnWithComment", func(x *riverslot.Task) { x.IDColumn = "id--" }, "IDColumn must be a plain identifier"},
		{"SchemaTooLong", func(x *riverslot.Task) { x.Schema = string(make([]byte, 64)) }, "Schema must be at most 63 bytes"},
		{"WeightBreakingOut", func(x *riverslot.Task) { x.Weight = "w) FROM x; --" }, "Weight must be one balanced numeric SQL expression (a ')' closes a parenthesis it did not open)"},
		{"WeightWithSemicolon", func(x *riverslot.Task) { x.Weight = "w; DELETE FROM accounts" }, "Weight must be one balanced numeric SQL expression (';' is not allowed)"},
		{"WeightEpsilonTooLarge", func(x *riverslot.Task) { x.Weight, x.WeightEpsilon = "w", 1.5 }, "WeightEpsilon must be in (0, 1] (0.10 lets a slot carry 10% more than the mean), got 1.5"},
		{"WeightEpsilonNegative", func(x *riverslot.Task) { x.Weight, x.WeightEpsilon = "w", -0.1 }, "WeightEpsilon must be in (0, 1]"},
		{"WeightEpsilonWithoutWeight", func(x *riverslot.Task) { x.WeightEpsilon = 0.2 }, "WeightEpsilon is set (0.2) but Weight is empty; set Weight"},
		{"PinsTimeoutNegative", func(x *riverslot.Task) { x.Weight, x.PinsTimeout = "w", -time.Second }, "PinsTimeout must be at least 1ms, got -1s; leave it 0 for the default 30s"},
		{"PinsTimeoutWithoutWeight", func(x *riverslot.Task) { x.PinsTimeout = time.Second }, "PinsTimeout is set (1s) but Weight is empty"},
		{"FilterWithSemicolon", func(x *riverslot.Task) { x.Filter = "true; DELETE FROM accounts" }, "Filter must be one balanced SQL boolean expression (';' is not allowed)"},
		{"FilterBreakingOut", func(x *riverslot.Task) { x.Filter = "true) OR (true" }, "Filter must be one balanced SQL boolean expression (a ')' closes a parenthesis it did not open)"},
		{"FilterLeftOpen", func(x *riverslot.Task) { x.Filter = "(active" }, "Filter must be one balanced SQL boolean expression (1 '(' left open)"},
		{"FilterComment", func(x *riverslot.Task) { x.Filter = "active --" }, "'--' comments are not allowed"},
		{"FilterBlockComment", func(x *riverslot.Task) { x.Filter = "active /* x */" }, "'/*' comments are not allowed"},
		{"FilterBindParameter", func(x *riverslot.Task) { x.Filter = "id <> $1" }, "bind parameters such as $1 are not allowed"},
		{"FilterUnterminatedString", func(x *riverslot.Task) { x.Filter = "name = 'x" }, "unterminated '-quoted text"},
		{"BatchSizeNegative", func(x *riverslot.Task) { x.BatchSize = -1 }, "BatchSize must be between 1 and 50000, got -1"},
		{"BatchSizeTooLarge", func(x *riverslot.Task) { x.BatchSize = 50_001 }, "BatchSize must be between 1 and 50000, got 50001"},
		{"PriorityOutOfRange", func(x *riverslot.Task) { x.Priority = 5 }, "Priority must be between 1 and 4, got 5"},
		{"MaxAttemptsNegative", func(x *riverslot.Task) { x.MaxAttempts = -1 }, "MaxAttempts must be at least 1, got -1"},
		{"NegativeSyncTimeout", func(x *riverslot.Task) { x.SyncTimeout = -time.Second }, "SyncTimeout must not be negative, got -1s"},
		{"NegativeLateGrace", func(x *riverslot.Task) { x.LateGrace = -time.Second }, "LateGrace must not be negative, got -1s"},
		{"LateGraceLongerThanCycle", func(x *riverslot.Task) { x.LateGrace = 25 * time.Hour }, "LateGrace must be at most Cycle (24h0m0s), got 25h0m0s"},
		{"LeadAsLongAsSlot", func(x *riverslot.Task) { x.Lead = 11*time.Minute + 15*time.Second }, "Lead must be in (0, slot duration) = (0, 11m15s), got 11m15s; leave it 0 for the default"},
		{"UnknownLatePolicy", func(x *riverslot.Task) { x.LatePolicy = "burst" }, `LatePolicy must be "spread" or "skip", got "burst"`},
		{"MissingSync", func(x *riverslot.Task) { x.Sync = nil }, "Sync must be set to the function that syncs one account"},
		{"OffsetOutOfRange", func(x *riverslot.Task) { x.TriggerOffset = 25 * time.Hour }, "TriggerOffset must be in [0, Cycle)"},
		{"PhaseOutOfRange", func(x *riverslot.Task) { x.Phase = 1 }, "Phase must be in [0, 1) (a fraction of the cycle), got 1"},
		{"PhaseNotWholeSlots", func(x *riverslot.Task) { x.Phase = 0.001 }, "Phase × slots must be a whole number of slots, got 0.001 × 128 = 0.128; use a multiple of 1/128"},
		{"PhaseAndOpposite", func(x *riverslot.Task) { x.Phase = 0.5; x.OppositeOf = "other" }, `Phase and OppositeOf cannot both be set`},
		{"LocationWithOddCycle", func(x *riverslot.Task) { x.Cycle = 256 * time.Second; x.Location = time.UTC }, "Cycle must divide 24h when Location is set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			task := validTask()
			tt.mutate(&task)
			_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{task}})
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "at least 2s", "no error gives slotplan's minimum, which River cannot run")
			require.True(t, strings.HasPrefix(err.Error(), `Tasks[0] "`+task.Name+`": `), "every error names its task: %v", err)
		})
	}

	t.Run("BalancedFiltersAreAccepted", func(t *testing.T) {
		t.Parallel()
		for _, filter := range []string{
			"active",
			"(active AND NOT restricted) OR plan = 'pro'",
			`name <> ')' AND "odd)col" IS NOT NULL`,
			"note <> 'it''s (fine'",
			"body <> $$ ) $$",
			"a - b > 0",
		} {
			task := validTask()
			task.Filter = filter
			_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{task}})
			require.NoError(t, err, filter)
		}
	})

	t.Run("ZeroValuesMeanDefaults", func(t *testing.T) {
		t.Parallel()
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{validTask()}})
		require.NoError(t, err)
		info, err := s.Task("transactions")
		require.NoError(t, err)
		require.Equal(t, 128, info.Plan.Slots)
		require.Equal(t, riverslot.LeadMax, info.Lead, "min(10s, half of an 11m15s slot)")

		task := validTask()
		task.Cycle = 16 * time.Second // 16 slots of 1 s: the lead is half a slot
		s, err = riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{task}})
		require.NoError(t, err)
		info, err = s.Task("transactions")
		require.NoError(t, err)
		require.Equal(t, 500*time.Millisecond, info.Lead)
	})

	t.Run("Opposites", func(t *testing.T) {
		t.Parallel()
		payments := validTask()
		payments.Name, payments.Phase = "payments", 0.25 // 32 of 128 slots
		reports := validTask()
		reports.Name, reports.OppositeOf = "reports", "payments"
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{payments, reports}})
		require.NoError(t, err)
		p, err := s.Task("payments")
		require.NoError(t, err)
		r, err := s.Task("reports")
		require.NoError(t, err)
		require.Equal(t, 32, p.Shift)
		require.Equal(t, 96, r.Shift, "half the 128 slots further round")
		require.Contains(t, r.PlanID, "/+96", "the shift is part of the plan")

		// Opposite a weighted task: accepted, and it follows that task's pins
		// (Weight on the opposite task itself is refused below).
		weighted := payments
		weighted.Weight = "weight"
		_, err = riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{weighted, reports}})
		require.NoError(t, err)

		for _, tt := range []struct {
			name   string
			tasks  func() []riverslot.Task
			wanted string
		}{
			{"Unknown", func() []riverslot.Task { r := reports; r.OppositeOf = "billing"; return []riverslot.Task{payments, r} },
				`Tasks[1] "reports": OppositeOf "billing" is not a valid task of this scheduler; name one of "payments", "reports"`},
			{"Itself", func() []riverslot.Task { r := reports; r.OppositeOf = "reports"; return []riverslot.Task{payments, r} },
				`Tasks[1] "reports": OppositeOf names the task itself`},
			{"OtherCycle", func() []riverslot.Task { r := reports; r.Cycle = 12 * time.Hour; return []riverslot.Task{payments, r} },
				`Tasks[1] "reports": Cycle must equal the Cycle of task "payments" (24h0m0s) to stay opposite it, got 12h0m0s`},
			{"Chain", func() []riverslot.Task {
				p := payments
				p.Phase, p.OppositeOf = 0, "reports"
				return []riverslot.Task{p, reports}
			}, `OppositeOf "payments", which is itself OppositeOf "reports"`},
			{"OtherTriggerOffset", func() []riverslot.Task {
				r := reports
				r.TriggerOffset = time.Hour
				return []riverslot.Task{payments, r}
			},
				`Tasks[1] "reports": TriggerOffset and Location must equal those of task "payments" (0s, UTC) to stay opposite it`},
			{"OtherLocation", func() []riverslot.Task {
				r := reports
				r.Location = time.FixedZone("X", 3600)
				return []riverslot.Task{payments, r}
			},
				`Tasks[1] "reports": TriggerOffset and Location must equal those of task "payments"`},
			{"WeightOnOpposite", func() []riverslot.Task {
				p, r := payments, reports
				p.Weight, r.Weight = "weight", "weight"
				return []riverslot.Task{p, r}
			}, `Tasks[1] "reports": Weight cannot be set on a task that is OppositeOf another: it follows the placement of task "payments"`},
		} {
			_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: tt.tasks()})
			require.ErrorContains(t, err, tt.wanted, tt.name)
		}
	})

	t.Run("DuplicateNames", func(t *testing.T) {
		t.Parallel()
		_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{validTask(), validTask()}})
		require.EqualError(t, err, `Tasks[1] "transactions": Name is already used by Tasks[0]; task names must be unique`)
	})

	t.Run("NoTasks", func(t *testing.T) {
		t.Parallel()
		_, err := riverslot.New(lazyPool(t), nil)
		require.EqualError(t, err, "Config.Tasks must contain at least one task")
	})

	t.Run("NilPool", func(t *testing.T) {
		t.Parallel()
		_, err := riverslot.New(nil, &riverslot.Config{Tasks: []riverslot.Task{validTask()}})
		require.EqualError(t, err, "pool must not be nil")
	})

	t.Run("EveryProblemOfEveryTaskAtOnce", func(t *testing.T) {
		t.Parallel()
		// An invalid cycle must not hide the task's other errors.
		_, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: []riverslot.Task{
			{Name: "x", Cycle: 301 * time.Second, Filter: "a)"},
			{Name: "y", Cycle: 120 * time.Second, Table: "accounts", Priority: 9, Sync: noopSync},
		}})
		require.Error(t, err)
		lines := strings.Split(err.Error(), "\n")
		require.Contains(t, lines, `Tasks[0] "x": Table must be set to the table holding the accounts`)
		require.Contains(t, lines, `Tasks[0] "x": Sync must be set to the function that syncs one account`)
		require.Contains(t, lines, `Tasks[1] "y": Priority must be between 1 and 4, got 9`)
		require.Contains(t, err.Error(), `Tasks[0] "x": invalid cycle: Cycle 5m1s is an odd number of seconds`)
		require.Contains(t, err.Error(), `Tasks[0] "x": Filter must be one balanced SQL boolean expression`)
	})
}

func TestConfigure(t *testing.T) {
	t.Parallel()

	scheduler := func(t *testing.T, tasks ...riverslot.Task) *riverslot.Scheduler {
		t.Helper()
		if len(tasks) == 0 {
			tasks = []riverslot.Task{validTask()}
		}
		s, err := riverslot.New(lazyPool(t), &riverslot.Config{Tasks: tasks})
		require.NoError(t, err)
		return s
	}

	t.Run("FillsDefaults", func(t *testing.T) {
		t.Parallel()
		config := &river.Config{}
		require.NoError(t, scheduler(t).Configure(config))
		require.NotNil(t, config.Workers)
		require.Len(t, config.PeriodicJobs, 1)
		require.Equal(t, 2*time.Minute, config.RescueStuckJobsAfter, "longest timeout (1m) + 1m")
		require.Zero(t, config.CompletedJobRetentionPeriod, "River's default stands: the ledger keeps cycles unique")
		require.Zero(t, config.CancelledJobRetentionPeriod)
		require.Zero(t, config.DiscardedJobRetentionPeriod)
		// River accepts what Configure built.
		_, err := river.NewClient(riverpgxv5.New(nil), config)
		require.NoError(t, err)
	})

	t.Run("LeavesRetentionAlone", func(t *testing.T) {
		t.Parallel()
		task := validTask()
		task.Location = time.UTC
		for _, retention := range []time.Duration{time.Minute, time.Hour, -1} {
			config := &river.Config{CompletedJobRetentionPeriod: retention, CancelledJobRetentionPeriod: retention, DiscardedJobRetentionPeriod: retention}
			require.NoError(t, scheduler(t, task).Configure(config), "retention %s for a 24 h cycle", retention)
			require.Equal(t, retention, config.CompletedJobRetentionPeriod)
			require.Equal(t, retention, config.CancelledJobRetentionPeriod)
			require.Equal(t, retention, config.DiscardedJobRetentionPeriod)
			_, err := river.NewClient(riverpgxv5.New(nil), config)
			require.NoError(t, err)
		}
	})

	t.Run("RescueCoversTheAppsJobTimeout", func(t *testing.T) {
		t.Parallel()
		config := &river.Config{JobTimeout: 10 * time.Minute}
		require.NoError(t, scheduler(t).Configure(config))
		require.Equal(t, 11*time.Minute, config.RescueStuckJobsAfter, "River requires it above JobTimeout")
		_, err := river.NewClient(riverpgxv5.New(nil), config)
		require.NoError(t, err)
	})

	t.Run("RefusesRescueShorterThanATimeout", func(t *testing.T) {
		t.Parallel()
		err := scheduler(t).Configure(&river.Config{RescueStuckJobsAfter: 30 * time.Second})
		require.EqualError(t, err, "RescueStuckJobsAfter 30s is shorter than the longest riverslot job timeout (1m0s); running jobs would be rescued and run twice: leave it 0 for 2m0s or raise it")
		config := &river.Config{RescueStuckJobsAfter: time.Hour}
		require.NoError(t, scheduler(t).Configure(config))
		require.Equal(t, time.Hour, config.RescueStuckJobsAfter, "a longer value is the app's choice")
	})

	t.Run("RefusesWorkersAlreadyRegistered", func(t *testing.T) {
		t.Parallel()
		config := &river.Config{}
		require.NoError(t, scheduler(t).Configure(config))
		err := scheduler(t).Configure(config)
		require.ErrorContains(t, err, "error registering bootstrap worker")
	})

	t.Run("KeepsTheAppsOwnWorkersAndPeriodicJobs", func(t *testing.T) {
		t.Parallel()
		workers := river.NewWorkers()
		river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[appArgs]) error { return nil }))
		own := river.NewPeriodicJob(river.PeriodicInterval(time.Hour), func() (river.JobArgs, *river.InsertOpts) { return appArgs{}, nil }, nil)
		config := &river.Config{Workers: workers, PeriodicJobs: []*river.PeriodicJob{own}}
		require.NoError(t, scheduler(t).Configure(config))
		require.Same(t, workers, config.Workers)
		require.Len(t, config.PeriodicJobs, 2)
		require.Same(t, own, config.PeriodicJobs[0])
	})
}

type appArgs struct{}

func (appArgs) Kind() string { return "app_job" }

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

	check := func(ctx context.Context, t *testing.T, bundle *checkBundle, mutate func(*riverslot.Task)) error {
		t.Helper()
		task := validTask()
		task.Schema = bundle.schema
		mutate(&task)
		s, err := riverslot.New(bundle.pool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: riverslottest.Logger(t)})
		require.NoError(t, err)
		return s.Check(ctx)
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		require.NoError(t, check(ctx, t, bundle, func(x *riverslot.Task) { x.Filter = "active" }))
	})

	t.Run("UnknownTable", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.Table = "nope" })
		require.EqualError(t, err, `task "transactions": Table "`+bundle.schema+`"."nope" does not exist or is not visible to this role; create it, fix Table/Schema, or grant USAGE on its schema`)
	})

	t.Run("UnknownColumn", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.IDColumn = "account_id" })
		require.ErrorContains(t, err, `IDColumn "account_id" does not exist in Table`)
	})

	t.Run("ColumnNotUUID", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.Table = "text_ids" })
		require.ErrorContains(t, err, `IDColumn "id" of Table "`+bundle.schema+`"."text_ids" has type text; it must be uuid`)
	})

	t.Run("FilterSyntaxError", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.Filter = "active AND AND" })
		require.ErrorContains(t, err, `Filter "active AND AND" is not a valid boolean condition on Table`)
	})

	t.Run("WeightValid", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		_, err := bundle.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{bundle.schema, "accounts"}.Sanitize()+" ADD COLUMN seats int, ADD COLUMN plan text")
		require.NoError(t, err)
		// Before CreateIndexes (no pins tables) and after.
		require.NoError(t, check(ctx, t, bundle, func(x *riverslot.Task) { x.Weight = "seats * 2 + 1"; x.Filter = "active" }))
		task := validTask()
		task.Schema, task.Weight = bundle.schema, "seats"
		s, err := riverslot.New(bundle.pool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: riverslottest.Logger(t)})
		require.NoError(t, err)
		require.NoError(t, s.CreateIndexes(ctx))
		require.NoError(t, s.Check(ctx))
		require.EqualValues(t, 1, riverslottest.Count(ctx, t, bundle.pool, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'riverslot_pins'", bundle.schema))

		err = check(ctx, t, bundle, func(x *riverslot.Task) { x.Weight = "plan" })
		require.ErrorContains(t, err, `Weight "plan" on Table "`+bundle.schema+`"."accounts" is not numeric; use a column or expression of type`)
		err = check(ctx, t, bundle, func(x *riverslot.Task) { x.Weight = "nope" })
		require.ErrorContains(t, err, `Weight "nope" is not a valid expression on Table`)
	})

	t.Run("FilterUnknownColumn", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.Filter = "restricted" })
		require.ErrorContains(t, err, `Filter "restricted" is not a valid boolean condition`)
	})

	t.Run("FilterNotBoolean", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) { x.Filter = "42" })
		require.ErrorContains(t, err, `Filter "42" is not a valid boolean condition`)
	})

	t.Run("WritingFilterLeavesDatabaseUnchanged", func(t *testing.T) {
		t.Parallel()
		ctx, bundle := setupCheck(t)
		err := check(ctx, t, bundle, func(x *riverslot.Task) {
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
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{task}})
	require.NoError(t, err)

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)

	start := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC)
	first, err := s.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	require.False(t, first.UniqueSkippedAsDuplicate)
	second, err := s.EnqueueCycle(ctx, client, "transactions", start.In(time.FixedZone("X", 3600)))
	require.NoError(t, err)
	require.True(t, second.UniqueSkippedAsDuplicate, "same cycle in another location is the same cycle")
	require.Equal(t, first.Job.ID, second.Job.ID)

	// Even once it failed for good, the cycle's bootstrap is not replaced.
	_, err = client.JobCancel(ctx, first.Job.ID)
	require.NoError(t, err)
	third, err := s.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)
	require.True(t, third.UniqueSkippedAsDuplicate)

	job := rivertest.RequireInserted(ctx, t, riverpgxv5.New(pool), bootstrap.Args{}, &rivertest.RequireInsertedOpts{
		Schema: schema, Priority: 1, Queue: river.QueueDefault, State: rivertype.JobStateCancelled,
	})
	require.Equal(t, "transactions", job.Args.Task)
	require.Equal(t, []any{2 * time.Minute, 8}, []any{job.Args.Plan.Cycle, job.Args.Plan.Slots}, "cycle and slots in the plan id")
	require.True(t, start.Equal(job.Args.CycleStart))

	_, err = s.EnqueueCycle(ctx, client, "transactions", start.Add(time.Second))
	require.EqualError(t, err, `cycleStart 2030-01-01T00:02:01Z is not a cycle start of task "transactions" (cycle 2m0s); the cycle containing it starts at 2030-01-01T00:02:00Z`)
	// A cycle that started more than 3 cycles + 1 h ago (the ledger's
	// horizon less a cycle) is refused: its ledger rows may be pruned.
	old := time.Now().UTC().Truncate(2 * time.Minute).Add(-70 * time.Minute)
	_, err = s.EnqueueCycle(ctx, client, "transactions", old)
	require.ErrorContains(t, err, `of task "transactions" started more than 1h6m0s ago (the ledger's horizon for a cycle of 2m0s, 4 cycles + 1 h, less a cycle): too old to re-run`)
	_, err = s.EnqueueCycle(ctx, client, "transactions", old.Add(6*time.Minute))
	require.NoError(t, err, "64 min ago is within it")
	_, err = s.EnqueueCycle(ctx, client, "nope", start)
	require.EqualError(t, err, `no task named "nope"; the scheduler has "transactions"`)
}

// insertRecorder is a River insert middleware that records the result of
// every bootstrap insert the client makes, the periodic trigger's included.
type insertRecorder struct {
	river.MiddlewareDefaults

	mu         sync.Mutex
	duplicates []bool // UniqueSkippedAsDuplicate of each bootstrap insert, in order
	cycles     []time.Time
}

func (r *insertRecorder) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	results, err := doInner(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range results {
		if res.Job.Kind == bootstrap.Kind {
			var args bootstrap.Args
			if err := json.Unmarshal(res.Job.EncodedArgs, &args); err == nil {
				r.duplicates = append(r.duplicates, res.UniqueSkippedAsDuplicate)
				r.cycles = append(r.cycles, args.CycleStart)
			}
		}
	}
	return results, err
}

func (r *insertRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.duplicates)
}

// TestPeriodicTriggerOnePerCycle makes two clients fire the trigger for the
// same cycle, one after the other as each becomes leader, and checks that
// the second firing's insert is skipped as a duplicate: exactly one
// bootstrap job exists, anchored at a cycle start.
func TestPeriodicTriggerOnePerCycle(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	task := validTask()
	task.Cycle = time.Hour // long enough that the test stays inside one cycle
	task.Schema = schema
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)

	recorder := &insertRecorder{}
	for i := range 2 {
		// Trigger-only clients (no queue works the bootstrap): it stays in
		// the table for inspection. Each is leader in turn; the first
		// resigns when it stops.
		config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{"unused": {MaxWorkers: 1}}, TestOnly: true,
			Logger: riverslottest.Logger(t), Middleware: []rivertype.Middleware{recorder}}
		require.NoError(t, s.Configure(config))
		client, err := river.NewClient(riverpgxv5.New(pool), config)
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		riverslottest.WaitFor(t, 60*time.Second, "the trigger's insert on a new leader", func() bool { return recorder.count() == i+1 })
		require.NoError(t, client.Stop(ctx))
	}

	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	require.Equal(t, []bool{false, true}, recorder.duplicates, "the second leader's insert for the same cycle is a duplicate")
	require.True(t, recorder.cycles[0].Equal(recorder.cycles[1]))
	jobs := rivertest.RequireManyInserted(ctx, t, riverpgxv5.New(pool), []rivertest.ExpectedJob{
		{Args: bootstrap.Args{}, Opts: &rivertest.RequireInsertedOpts{Schema: schema}},
	})
	require.Len(t, jobs, 1)
	var args bootstrap.Args
	require.NoError(t, json.Unmarshal(jobs[0].EncodedArgs, &args))
	info, err := s.Task("transactions")
	require.NoError(t, err)
	require.True(t, info.Schedule.Start(args.CycleStart).Equal(args.CycleStart), "bootstrap anchored at a cycle start: %s", args.CycleStart)
	require.True(t, recorder.cycles[0].Equal(args.CycleStart))
}

// TestCreateIndexesBadTable: in the README's order, CreateIndexes runs
// before Check; a missing table, a missing id column or a text id column
// gets the same error Check gives, naming the field and the fix, before
// any DDL runs (not PostgreSQL's raw error).
func TestCreateIndexesBadTable(t *testing.T) {
	t.Parallel()
	ctx, bundle := setupCheck(t)
	for _, tt := range []struct {
		name   string
		mutate func(*riverslot.Task)
		want   string
	}{
		{"MissingTable", func(x *riverslot.Task) { x.Table = "nope" }, `Table "` + bundle.schema + `"."nope" does not exist or is not visible to this role; create it, fix Table/Schema`},
		{"MissingColumn", func(x *riverslot.Task) { x.IDColumn = "account_id" }, `IDColumn "account_id" does not exist in Table`},
		{"TextIDs", func(x *riverslot.Task) { x.Table = "text_ids" }, `IDColumn "id" of Table "` + bundle.schema + `"."text_ids" has type text; it must be uuid`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			task := validTask()
			task.Schema = bundle.schema
			tt.mutate(&task)
			s, err := riverslot.New(bundle.pool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: riverslottest.Logger(t)})
			require.NoError(t, err)
			err = s.CreateIndexes(ctx)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, `task "transactions": `)
			require.Zero(t, riverslottest.Count(ctx, t, bundle.pool, "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE '%riverslot_bucket%'", bundle.schema), "no index made")
		})
	}
}
