package bootstrap_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestWork runs a real River client that works bootstrap jobs only (per-slot
// jobs stay in the table for inspection).
func TestWork(t *testing.T) {
	t.Parallel()

	type perSlotJob struct {
		Args        perslot.Args
		ScheduledAt time.Time
		Queue       string
		Priority    int
		State       string
	}

	setup := func(t *testing.T) (context.Context, *river.Client[pgx.Tx], <-chan *river.Event, func() []perSlotJob) {
		t.Helper()

		ctx := context.Background()
		pool := riverslottest.Pool(t)
		schema := riverslottest.Schema(ctx, t, pool)
		spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 2*time.Minute, 100) // 8 slots of 15 s
		spec.Lead = 3 * time.Second
		spec.ControlQueue, spec.ControlPriority = "slots", 1

		w := bootstrap.NewWorker(pool, riverslottest.Logger(t))
		w.AddTask(spec)
		workers := river.NewWorkers()
		require.NoError(t, w.Register(workers))
		client, events := riverslottest.StartClient(ctx, t, pool, &river.Config{
			Schema:              schema,
			SkipUnknownJobCheck: true, // per-slot jobs are inserted but not worked here
			Queues:              map[string]river.QueueConfig{"slots": {MaxWorkers: 2}},
			Workers:             workers,
		})
		perSlotJobs := func() []perSlotJob {
			t.Helper()
			rows, err := pool.Query(ctx, "SELECT args, scheduled_at, queue, priority, state FROM "+
				pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE kind = $1 ORDER BY id", perslot.Kind)
			require.NoError(t, err)
			jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[perSlotJob])
			require.NoError(t, err)
			return jobs
		}
		return ctx, client, events, perSlotJobs
	}
	waitFor := func(t *testing.T, events <-chan *river.Event, jobID int64) *river.Event {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-events:
				if ev.Job.ID == jobID {
					return ev
				}
			case <-timeout:
				t.Fatalf("job %d did not finish within 30s", jobID)
			}
		}
	}
	// A future cycle, given in another location: the same instant.
	start := time.Date(2030, 1, 1, 1, 2, 0, 0, time.FixedZone("CET", 3600))
	args := bootstrap.Args{Task: "transactions", CycleStart: start.UTC()}
	insertOpts := &river.InsertOpts{Queue: "slots"}

	t.Run("InsertsOnePerSlotJobPerSlotLeadBeforeIt", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)

		args := args
		args.Plan = planOf(t)
		res, err := client.Insert(ctx, args, insertOpts)
		require.NoError(t, err)
		ev := waitFor(t, events, res.Job.ID)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)

		got := perSlotJobs()
		require.Len(t, got, 8)
		for i, j := range got {
			require.Equal(t, i, j.Args.Slot)
			require.Equal(t, "transactions", j.Args.Task)
			require.Equal(t, args.Plan, j.Args.Plan)
			require.True(t, start.Equal(j.Args.CycleStart))
			// Slot i starts at 00:02 UTC + i*15 s; its job runs the 3 s lead before.
			want := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC).Add(time.Duration(i)*15*time.Second - 3*time.Second)
			require.True(t, want.Equal(j.ScheduledAt), "slot %d scheduled at %s, want %s", i, j.ScheduledAt, want)
			require.Equal(t, "slots", j.Queue)
			require.Equal(t, 1, j.Priority)
			require.Equal(t, "scheduled", j.State)
		}
		// The cycle's row records the late policy its fan-outs place by
		// (riverslottest.Spec: spread, LateGrace a slot of 15 s).
		var (
			policy  string
			graceUS int64
		)
		require.NoError(t, client.Driver().GetExecutor().QueryRow(ctx, "SELECT late_policy, late_grace_us FROM "+
			pgx.Identifier{client.Schema(), "riverslot_ledger"}.Sanitize()+" WHERE slot = -1").Scan(&policy, &graceUS))
		require.Equal(t, "spread", policy)
		require.Equal(t, (15 * time.Second).Microseconds(), graceUS)
	})

	t.Run("RerunAddsNothingEvenNextToADiscardedPerSlotJob", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)

		args := args
		args.Plan = planOf(t)
		first, err := client.Insert(ctx, args, &river.InsertOpts{Queue: "slots", UniqueOpts: taskspec.UniqueEveryState()})
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, first.Job.ID).Kind)
		jobs := perSlotJobs()
		require.Len(t, jobs, 8)

		// Slot 3's job failed for good; the cycle is bootstrapped again.
		var slot3 int64
		require.NoError(t, client.Driver().GetExecutor().QueryRow(ctx,
			"UPDATE "+pgx.Identifier{client.Schema(), "river_job"}.Sanitize()+
				" SET state = 'discarded', finalized_at = now() WHERE kind = $1 AND (args->>'slot')::int = 3 RETURNING id", perslot.Kind).Scan(&slot3))
		second, err := client.Insert(ctx, args, &river.InsertOpts{Queue: "slots", UniqueOpts: taskspec.UniqueEveryState()})
		require.NoError(t, err)
		require.True(t, second.UniqueSkippedAsDuplicate, "the completed bootstrap blocks a second one")

		// Even a bootstrap that bypasses its own uniqueness adds no per-slot job.
		third, err := client.Insert(ctx, args, &river.InsertOpts{Queue: "slots", Metadata: []byte(`{"rerun":true}`)})
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, third.Job.ID).Kind)
		after := perSlotJobs()
		require.Len(t, after, 8, "re-running a cycle must not add per-slot jobs")
		require.Equal(t, "discarded", after[3].State, "the failed slot is retried by an operator, not replaced")
	})

	t.Run("LedgerKeepsTheCycleAfterRiverDeletedItsJobs", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)
		exec := client.Driver().GetExecutor()
		jobs := pgx.Identifier{client.Schema(), "river_job"}.Sanitize()

		args := args
		args.Plan = planOf(t)
		first, err := client.Insert(ctx, args, &river.InsertOpts{Queue: "slots", UniqueOpts: taskspec.UniqueEveryState()})
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, first.Job.ID).Kind)
		made := perSlotJobs()
		require.Len(t, made, 8)
		rows := ledgerRows(ctx, t, client)
		require.Len(t, rows, 9, "the bootstrap's row and one per slot")
		require.Equal(t, first.Job.ID, rows[-1], "the bootstrap row names its job")

		// River's cleaner deletes the finished bootstrap and, say, slot 5's
		// per-slot job; nothing of the cycle blocks an insert any more.
		require.NoError(t, exec.Exec(ctx, "DELETE FROM "+jobs+" WHERE kind = $1 OR (kind = $2 AND (args->>'slot')::int = 5)", bootstrap.Kind, perslot.Kind))
		again, err := client.Insert(ctx, args, &river.InsertOpts{Queue: "slots", UniqueOpts: taskspec.UniqueEveryState()})
		require.NoError(t, err)
		require.False(t, again.UniqueSkippedAsDuplicate, "River no longer has the cycle's bootstrap")
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, again.Job.ID).Kind)
		after := perSlotJobs()
		require.Len(t, after, 7, "the re-run bootstrap added no per-slot job, not even for the deleted slot 5")
		for _, j := range after {
			require.NotEqual(t, 5, j.Args.Slot)
		}
		require.Equal(t, rows, ledgerRows(ctx, t, client), "the ledger is unchanged")
	})

	t.Run("TooOldCycleIsCancelled", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)

		// A 2 min cycle may be bootstrapped up to 4 x 2 min + 1 h - 2 min
		// after its start.
		old := bootstrap.Args{Task: "transactions", CycleStart: time.Now().UTC().Truncate(2 * time.Minute).Add(-70 * time.Minute), Plan: planOf(t)}
		res, err := client.Insert(ctx, old, insertOpts)
		require.NoError(t, err)
		ev := waitFor(t, events, res.Job.ID)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind)
		require.Contains(t, ev.Job.Errors[0].Error, "started more than 1h6m0s ago")
		require.Empty(t, perSlotJobs())
		require.Empty(t, ledgerRows(ctx, t, client))
	})

	t.Run("PrunesTheTasksRowsPastTheHorizon", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, _ := setup(t)
		exec := client.Driver().GetExecutor()
		table := pgx.Identifier{client.Schema(), "riverslot_ledger"}.Sanitize()

		now := time.Now().UTC().Truncate(2 * time.Minute)
		// The horizon of a 2 min cycle is 4 x 2 min + 1 h: 68 min.
		for _, r := range []struct {
			task string
			ago  time.Duration
		}{
			{"transactions", 3 * time.Hour}, {"transactions", 70 * time.Minute}, // pruned
			{"transactions", 66 * time.Minute}, {"transactions", 10 * time.Minute}, // kept
			{"reports", 3 * time.Hour}, // another task's: its own bootstraps prune it
		} {
			require.NoError(t, exec.Exec(ctx, "INSERT INTO "+table+" (task, cycle_start, plan, slot) SELECT $1, $2, 'p', s FROM generate_series(-1, 7) s", r.task, now.Add(-r.ago)))
		}
		args := bootstrap.Args{Task: "transactions", CycleStart: now, Plan: planOf(t)}
		res, err := client.Insert(ctx, args, insertOpts)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, res.Job.ID).Kind)

		var got map[string]int
		require.NoError(t, exec.QueryRow(ctx, "SELECT json_object_agg(task || ' ' || to_char(cycle_start AT TIME ZONE 'UTC', 'HH24:MI'), n) FROM (SELECT task, cycle_start, count(*) n FROM "+table+" GROUP BY 1, 2) c").Scan(&got))
		at := func(task string, ago time.Duration) string { return task + " " + now.Add(-ago).Format("15:04") }
		require.Equal(t, map[string]int{
			at("reports", 3*time.Hour):         9,
			at("transactions", 66*time.Minute): 9,
			at("transactions", 10*time.Minute): 9,
			at("transactions", 0):              9,
		}, got)
	})

	t.Run("OtherPlanRunsUnderItsOwnPlan", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)

		// Made before Cycle changed from 60 s (4 slots of 15 s) to 120 s.
		other := bootstrap.Args{Task: "transactions", CycleStart: start.UTC(), Plan: riverslottest.Key(t, "60s/4/0000000000000001")}
		res, err := client.Insert(ctx, other, insertOpts)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, waitFor(t, events, res.Job.ID).Kind)
		got := perSlotJobs()
		require.Len(t, got, 4)
		for i, j := range got {
			require.Equal(t, other.Plan, j.Args.Plan)
			want := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC).Add(time.Duration(i)*15*time.Second - 3*time.Second)
			require.True(t, want.Equal(j.ScheduledAt), "slot %d scheduled at %s, want %s", i, j.ScheduledAt, want)
		}
	})

	t.Run("UnreadablePlanOrUnknownTaskIsCancelled", func(t *testing.T) {
		t.Parallel()
		ctx, client, events, perSlotJobs := setup(t)

		for _, tt := range []struct {
			args    bootstrap.Args
			wantErr string
		}{
			{bootstrap.Args{Task: "transactions", CycleStart: start.UTC(), Plan: planText(t, "weekly")}, `plan id "weekly" is not of the form <seconds>s/<slots>/<seed>`},
			{bootstrap.Args{Task: "transactions", CycleStart: start.UTC(), Plan: planText(t, "60s/8/01")}, `has 4 slots, not 8`},
			{bootstrap.Args{Task: "reports", CycleStart: start.UTC(), Plan: planOf(t)}, `no riverslot task "reports" is registered in this process`},
		} {
			res, err := client.Insert(ctx, tt.args, insertOpts)
			require.NoError(t, err)
			ev := waitFor(t, events, res.Job.ID)
			require.Equal(t, river.EventKindJobCancelled, ev.Kind)
			require.Equal(t, rivertype.JobStateCancelled, ev.Job.State)
			require.Contains(t, ev.Job.Errors[0].Error, tt.wantErr)
		}
		require.Empty(t, perSlotJobs())
	})
}

// planOf is the plan id of the fixture task, written out: 120 s, 8 slots,
// the FNV-1a seed of "transactions".
// planText returns the key job args decode from the plan id text, as a
// job made by another version carries it.
func planText(t *testing.T, text string) taskspec.PlanKey {
	t.Helper()
	var k taskspec.PlanKey
	require.NoError(t, k.UnmarshalText([]byte(text)))
	return k
}

func planOf(t *testing.T) taskspec.PlanKey {
	t.Helper()
	return riverslottest.Spec(t, "transactions", "s", "accounts", "", 2*time.Minute, 1).Key
}

// ledgerRows returns the job id of every ledger row of the client's
// schema, by slot (-1: the bootstrap), for the fixture's one cycle.
func ledgerRows(ctx context.Context, t *testing.T, client *river.Client[pgx.Tx]) map[int]int64 {
	t.Helper()
	var bySlot map[string]int64
	require.NoError(t, client.Driver().GetExecutor().QueryRow(ctx, "SELECT coalesce(json_object_agg(slot, coalesce(job_id, 0)), '{}') FROM "+
		pgx.Identifier{client.Schema(), "riverslot_ledger"}.Sanitize()).Scan(&bySlot))
	out := make(map[int]int64)
	for k, id := range bySlot {
		slot, err := strconv.Atoi(k)
		require.NoError(t, err)
		require.NotZero(t, id, "slot %d has no job id", slot)
		out[slot] = id
	}
	return out
}

// TestWeightedFallbackThenCensusJob: the bootstrap of a weighted task's
// first cycle cannot take its weight census within PinsTimeout (5 s; the
// test holds the accounts table locked while it runs, so the census steps
// wait on it until their statement_timeout cancels them, by construction):
// the cycle falls back to hash placement and the bootstrap enqueues the
// census job of that cycle to carry the census on. The census job's first
// attempt, still locked out, snoozes to a fresh attempt (river.JobSnooze);
// once the lock is released it finishes the census, and the next cycle's
// bootstrap computes real pins from it without a census step of its own,
// and enqueues the census of the cycle after.
func TestWeightedFallbackThenCensusJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := weightedAccounts(ctx, t)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 16*time.Second, 100) // 16 slots
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	// 5 s: cycle 2 computes its pins from the census within it even on a
	// loaded machine (a 1 s budget fell back there in one CI run).
	spec.PinsTimeout, spec.BootstrapTimeout = 5*time.Second, 10*time.Second
	spec.BuildSQL()

	client := bootstrapClient(ctx, t, pool, schema, true, spec)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	censusTable := pgx.Identifier{schema, taskspec.PinCensusTable}.Sanitize()
	first := spec.Schedule.Next(time.Now().Add(time.Hour))
	second := spec.Schedule.Next(first)

	// finish waits for job id to leave the running states and returns its
	// state and output.
	finish := func(id int64) (string, bootstrap.Output) {
		t.Helper()
		var (
			state string
			out   []byte
		)
		riverslottest.WaitFor(t, 60*time.Second, "the job to finish", func() bool {
			require.NoError(t, pool.QueryRow(ctx, "SELECT state, coalesce(metadata->'output', 'null') FROM "+jobs+" WHERE id = $1", id).Scan(&state, &out))
			return state == "completed" || state == "retryable" || state == "discarded" || state == "cancelled"
		})
		var o bootstrap.Output
		require.NoError(t, json.Unmarshal(out, &o))
		return state, o
	}
	censusJobs := func() map[time.Time]int64 {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT (args->>'cycle_start')::timestamptz, id FROM "+jobs+" WHERE kind = $1", bootstrap.CensusKind)
		require.NoError(t, err)
		got := map[time.Time]int64{}
		var (
			start time.Time
			id    int64
		)
		_, err = pgx.ForEachRow(rows, []any{&start, &id}, func() error { got[start.UTC()] = id; return nil })
		require.NoError(t, err)
		return got
	}

	// Cycle 1, the table locked while its bootstrap runs.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE "+accounts+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	res, err := client.Insert(ctx, bootstrap.NewArgs(spec, first), spec.BootstrapOpts())
	require.NoError(t, err)
	state, out := finish(res.Job.ID)
	require.Equal(t, "completed", state)
	require.Equal(t, perslot.PlacementHash, out.Placement)
	require.Equal(t, "hash", out.Fallback, "no census finished: the cycle falls back")
	pending := censusJobs()
	require.Len(t, pending, 1, "one census job: the one carrying the first cycle's census on")
	id, ok := pending[first.UTC()]
	require.True(t, ok, "the census job is the first cycle's: %v", pending)

	// The census job's first attempt waits on the lock too: its step is
	// cancelled at three quarters of its 10 s timeout and the job snoozes
	// to a fresh attempt; once the lock is gone it finishes the census.
	riverslottest.WaitFor(t, 60*time.Second, "the census job to snooze", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND (metadata->>'snoozes')::int >= 1", id) == 1
	})
	// The stalled attempt is recorded (Status shows it) and the job backs
	// off instead of retrying at once.
	riverslottest.WaitFor(t, 10*time.Second, "the census's stall recorded", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+censusTable+" WHERE cycle_start = $1 AND stalls >= 1 AND stalled_since IS NOT NULL", first) == 1
	})
	riverslottest.WaitFor(t, 30*time.Second, "the stalled census job to wait (snoozed to at least 2 s after its attempt; River makes a 0 s snooze available at once)", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'scheduled' AND scheduled_at >= attempted_at + interval '1500 milliseconds'", id) == 1
	})
	require.NoError(t, lock.Rollback(ctx))
	state, _ = finish(id)
	require.Equal(t, "completed", state)
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND errors IS NULL", id), "snoozed, never failed")
	var (
		steps    int
		finished bool
	)
	var stalls int
	require.NoError(t, pool.QueryRow(ctx, "SELECT steps, finished_at IS NOT NULL, stalls FROM "+censusTable+" WHERE cycle_start = $1", first).Scan(&steps, &finished, &stalls))
	require.True(t, finished)
	require.Zero(t, stalls, "progress clears the stall")
	require.Positive(t, steps)
	require.LessOrEqual(t, steps, taskspec.CensusSteps)

	// Cycle 2: real pins, from that census.
	res, err = client.Insert(ctx, bootstrap.NewArgs(spec, second), spec.BootstrapOpts())
	require.NoError(t, err)
	state, out = finish(res.Job.ID)
	require.Equal(t, "completed", state)
	require.Empty(t, out.Fallback, "the next cycle has pins of its own")
	require.Equal(t, perslot.PlacementPinned, out.Placement)
	require.Equal(t, 60, out.Pinned)
	require.NotNil(t, out.Pins)
	require.True(t, out.Pins.CycleStart.IsZero(), "its own pins, not a previous cycle's")
	require.EqualValues(t, 60, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()+" WHERE cycle_start = $1", second))
	// No census of its own: it used the first cycle's. (The census job of
	// the third cycle, enqueued to run at once, may have begun its own.)
	third := spec.Schedule.Next(second)
	var censuses string // every census row, for the message
	require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(string_agg(cycle_start::text || ' steps ' || steps || ' finished ' || (finished_at IS NOT NULL)::text || ' stalls ' || stalls, '; ' ORDER BY cycle_start), '') FROM "+censusTable).Scan(&censuses))
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+censusTable+" WHERE cycle_start <> $1", third),
		"no census of its own: it used the first cycle's (first %s, second %s, third %s; censuses: %s)", first, second, third, censuses)
	require.Zero(t, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+censusTable+" WHERE cycle_start = $1", second))
	// It enqueued the census of the cycle after, ahead.
	id, ok = censusJobs()[third.UTC()]
	require.True(t, ok, "the census of the third cycle is enqueued")
	state, _ = finish(id)
	require.Equal(t, "completed", state)
}

// TestWeightedSmallFleetNoCensusJob: a weighted task of at most DirectMax
// accounts has its pins computed in the bootstrap and enqueues no census
// job; above DirectMax the bootstrap enqueues the next cycle's census.
func TestWeightedSmallFleetNoCensusJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := weightedAccounts(ctx, t)
	newSpec := func(name string, directMax int64) *taskspec.Spec {
		spec := riverslottest.Spec(t, name, schema, "accounts", "", 16*time.Second, 100)
		spec.Weight, spec.WeightEpsilon = "weight", 0.1
		spec.PinsTimeout, spec.BootstrapTimeout = 10*time.Second, 20*time.Second
		spec.DirectMax = directMax
		spec.BuildSQL()
		return spec
	}
	small, large := newSpec("small", 2060), newSpec("large", 2059)
	client := bootstrapClient(ctx, t, pool, schema, false, small, large)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	first := small.Schedule.Next(time.Now().Add(time.Hour))
	for _, spec := range []*taskspec.Spec{small, large} {
		res, err := client.Insert(ctx, bootstrap.NewArgs(spec, first), spec.BootstrapOpts())
		require.NoError(t, err)
		out := completedOutput(ctx, t, pool, schema, res.Job.ID)
		require.Empty(t, out.Fallback, spec.Name)
		require.Equal(t, 60, out.Pinned, spec.Name)
	}
	census := "SELECT count(*) FROM " + jobs + " WHERE kind = $1 AND args->>'task' = $2"
	require.Zero(t, riverslottest.Count(ctx, t, pool, census, bootstrap.CensusKind, "small"), "2,060 accounts, DirectMax 2,060: no census job")
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, census+" AND (args->>'cycle_start')::timestamptz = $3",
		bootstrap.CensusKind, "large", large.Schedule.Next(first)), "DirectMax 2,059: the next cycle's census job")
}

// bootstrapClient starts a River client in schema that works the
// bootstrap jobs of specs (and their census jobs when census); per-slot
// jobs are inserted but not worked.
func bootstrapClient(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, census bool, specs ...*taskspec.Spec) *river.Client[pgx.Tx] {
	t.Helper()
	w := bootstrap.NewWorker(pool, riverslottest.Logger(t))
	c := bootstrap.NewCensusWorker(pool, riverslottest.Logger(t))
	for _, spec := range specs {
		w.AddTask(spec)
		c.AddTask(spec)
	}
	workers := river.NewWorkers()
	require.NoError(t, w.Register(workers))
	if census {
		require.NoError(t, c.Register(workers))
	}
	client, _ := riverslottest.StartClient(ctx, t, pool, &river.Config{
		Schema:              schema,
		SkipUnknownJobCheck: true, // per-slot (and census) jobs are inserted but not worked here
		Queues:              map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:             workers,
	})
	return client
}

// completedOutput waits for the bootstrap job id to complete and returns
// its output.
func completedOutput(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) bootstrap.Output {
	t.Helper()
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 60*time.Second, "the bootstrap to complete", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'completed'", id) == 1
	})
	var (
		out bootstrap.Output
		raw []byte
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->'output' FROM "+jobs+" WHERE id = $1", id).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

// weightedAccounts creates a schema with River's tables, an accounts table
// of 2,000 accounts of weight 1 and 60 of 150 (the 60 are jumbos), and the
// pins tables.
func weightedAccounts(ctx context.Context, t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, weight float8 NOT NULL)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+accounts+" SELECT gen_random_uuid(), CASE WHEN g <= 60 THEN 150 ELSE 1 END FROM generate_series(1, 2060) g")
	require.NoError(t, err)
	for _, ddl := range taskspec.PinsDDL(schema) {
		_, err := pool.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	return pool, schema
}

// TestWeightedAccountsDatabaseUnreachable: a weighted task whose accounts
// (and pins) live in a database that is down (a pool to a port nothing
// listens on) still gets its cycle: the bootstrap falls back to hash
// placement, as on a PinsTimeout with no earlier pins, records it in its
// output and in the cycle's ledger row, and inserts every per-slot job.
func TestWeightedAccountsDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, schema := weightedAccounts(ctx, t)
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(down.Close)
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "", 16*time.Second, 100)
	spec.Weight, spec.WeightEpsilon = "weight", 0.1
	spec.PinsTimeout, spec.BootstrapTimeout = 5*time.Second, 10*time.Second
	spec.AccountsPool = down
	spec.BuildSQL()

	client := bootstrapClient(ctx, t, pool, schema, false, spec)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	start := spec.Schedule.Next(time.Now().Add(time.Hour))
	res, err := client.Insert(ctx, bootstrap.NewArgs(spec, start), spec.BootstrapOpts())
	require.NoError(t, err)
	out := completedOutput(ctx, t, pool, schema, res.Job.ID)
	require.Equal(t, perslot.PlacementHash, out.Placement)
	require.Equal(t, "hash", out.Fallback)
	require.EqualValues(t, spec.Plan.Slots, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND args->>'placement' = 'hash'", perslot.Kind))
	require.EqualValues(t, 1, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()+
		" WHERE slot = -1 AND placement = 'hash' AND fallback = 'hash'"))
}
