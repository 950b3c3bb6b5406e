package bootstrap_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/slotplan"
)

func testTask(t *testing.T) bootstrap.Task {
	t.Helper()
	plan, err := slotplan.New(2 * time.Minute) // 8 slots of 15 s
	require.NoError(t, err)
	return bootstrap.Task{Name: "transactions", Plan: plan, Queue: "slots", Priority: 2}
}

func TestPerSlotParams(t *testing.T) {
	t.Parallel()

	task := testTask(t)
	// A cycle start given in another location is the same instant; args are
	// normalized to UTC so the unique key does not depend on the location.
	start := time.Date(2030, 1, 1, 1, 2, 0, 0, time.FixedZone("CET", 3600))
	params := task.PerSlotParams(start)
	require.Len(t, params, 8)
	for i, p := range params {
		args, ok := p.Args.(perslot.Args)
		require.True(t, ok)
		require.Equal(t, "transactions", args.Task)
		require.Equal(t, i, args.Slot)
		require.Equal(t, time.UTC, args.CycleStart.Location())
		require.True(t, start.Equal(args.CycleStart))

		want := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC).Add(time.Duration(i) * 15 * time.Second)
		require.True(t, want.Equal(p.InsertOpts.ScheduledAt), "slot %d scheduled at %s, want %s", i, p.InsertOpts.ScheduledAt, want)
		require.Equal(t, "slots", p.InsertOpts.Queue)
		require.Equal(t, 2, p.InsertOpts.Priority)
		require.True(t, p.InsertOpts.UniqueOpts.ByArgs)
	}
}

func TestAddTaskDuplicate(t *testing.T) {
	t.Parallel()

	w := bootstrap.NewWorker(nil, nil)
	require.NoError(t, w.AddTask(testTask(t)))
	require.EqualError(t, w.AddTask(testTask(t)), `bootstrap worker already serves task "transactions"`)
}

// TestWork runs a real River client that works bootstrap jobs only (per-slot
// jobs stay in the table for inspection) and checks that one cycle gets one
// set of per-slot jobs even when its bootstrap runs twice, and that a
// bootstrap for a task this process does not serve is cancelled.
func TestWork(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	task := testTask(t)

	w := bootstrap.NewWorker(pool, riverslottest.Logger(t))
	require.NoError(t, w.AddTask(task))
	workers := river.NewWorkers()
	require.NoError(t, w.Register(workers))
	client, events := riverslottest.StartClient(ctx, t, pool, &river.Config{
		Schema:              schema,
		SkipUnknownJobCheck: true, // per-slot jobs are inserted but not worked here
		Queues:              map[string]river.QueueConfig{"slots": {MaxWorkers: 2}},
		Workers:             workers,
	})

	waitFor := func(jobID int64) *river.Event {
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
	perSlotJobs := func() []perslot.Args {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT args FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
			" WHERE kind = $1 ORDER BY id", perslot.Kind)
		require.NoError(t, err)
		jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Args perslot.Args }])
		require.NoError(t, err)
		out := make([]perslot.Args, len(jobs))
		for i, j := range jobs {
			out[i] = j.Args
		}
		return out
	}

	// A future cycle, bootstrapped now: its per-slot jobs stay scheduled.
	start := time.Date(2030, 1, 1, 0, 2, 0, 0, time.UTC)
	opts := task.InsertOpts(start)
	require.True(t, start.Equal(opts.ScheduledAt))
	opts.ScheduledAt = time.Time{}
	first, err := client.Insert(ctx, bootstrap.NewArgs(task.Name, start), opts)
	require.NoError(t, err)
	ev := waitFor(first.Job.ID)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
	got := perSlotJobs()
	require.Len(t, got, 8)
	var stillScheduled int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE kind = $1 AND state = 'scheduled' AND scheduled_at >= $2", perslot.Kind, start).Scan(&stillScheduled))
	require.Equal(t, 8, stillScheduled)
	for i, a := range got {
		require.Equal(t, i, a.Slot)
		require.True(t, start.Equal(a.CycleStart))
	}

	// The same cycle bootstrapped again (a manual re-run that bypassed the
	// bootstrap's own uniqueness) adds no per-slot job.
	again := *opts
	again.UniqueOpts = river.UniqueOpts{}
	second, err := client.Insert(ctx, bootstrap.NewArgs(task.Name, start), &again)
	require.NoError(t, err)
	require.NotEqual(t, first.Job.ID, second.Job.ID)
	require.Equal(t, river.EventKindJobCompleted, waitFor(second.Job.ID).Kind)
	require.Len(t, perSlotJobs(), 8, "a second bootstrap of the same cycle must not add per-slot jobs")

	unknown, err := client.Insert(ctx, bootstrap.NewArgs("reports", start), opts)
	require.NoError(t, err)
	ev = waitFor(unknown.Job.ID)
	require.Equal(t, river.EventKindJobCancelled, ev.Kind)
	require.Equal(t, rivertype.JobStateCancelled, ev.Job.State)
	require.Contains(t, ev.Job.Errors[0].Error, `no riverslot task "reports" is registered in this process`)
	require.Len(t, perSlotJobs(), 8)
}
