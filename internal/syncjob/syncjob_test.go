package syncjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

func TestArgsJSON(t *testing.T) {
	t.Parallel()

	id := uuid.MustParse("0b7c2a4e-5d1f-4c8e-9a3b-6f2d1e0c9b8a")
	start := time.Date(2030, 1, 1, 1, 0, 0, 0, time.FixedZone("CET", 3600))
	args := syncjob.NewArgs("transactions", id, start, 3)
	require.Equal(t, "riverslot_sync", args.Kind())

	data, err := json.Marshal(args)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	require.Equal(t, map[string]any{
		"task":        "transactions",
		"account_id":  "0b7c2a4e-5d1f-4c8e-9a3b-6f2d1e0c9b8a",
		"cycle_start": "2030-01-01T00:00:00Z",
		"slot":        float64(3),
	}, m)
}

// TestWork runs sync jobs through a real River client and checks which ones
// reach the application's SyncFunc: an account that exists and matches the
// filter does; one deleted or filtered out since fan-out completes without a
// call; a job without an account or for an unknown task is cancelled; a
// SyncFunc error is a job error.
func TestWork(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 3)
	active, inactive, failing := ids[0], ids[1], ids[2]
	deleted := uuid.New()
	_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" SET active = false WHERE id = $1", inactive)
	require.NoError(t, err)

	var (
		mu    sync.Mutex
		calls []uuid.UUID
	)
	spec := riverslottest.Spec(t, "reports", schema, "accounts", "active", 2*time.Minute, 100)
	spec.SyncTimeout = 7 * time.Second
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(_ context.Context, id uuid.UUID, job *river.Job[syncjob.Args]) error {
		mu.Lock()
		calls = append(calls, id)
		mu.Unlock()
		if id != job.Args.AccountID {
			return errors.New("SyncFunc got another account than the job's")
		}
		if id == failing {
			return errors.New("upstream said no")
		}
		return nil
	})
	require.Equal(t, 7*time.Second, w.Timeout(&river.Job[syncjob.Args]{Args: syncjob.Args{Task: "reports"}}))

	client, events := startWorker(ctx, t, pool, schema, w, 4)

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		args    syncjob.Args
		want    river.EventKind
		wantErr string
	}{
		"active":       {args: syncjob.NewArgs("reports", active, start, 0), want: river.EventKindJobCompleted},
		"inactive":     {args: syncjob.NewArgs("reports", inactive, start, 0), want: river.EventKindJobCompleted},
		"deleted":      {args: syncjob.NewArgs("reports", deleted, start, 0), want: river.EventKindJobCompleted},
		"failing":      {args: syncjob.NewArgs("reports", failing, start, 0), want: river.EventKindJobFailed, wantErr: "upstream said no"},
		"no account":   {args: syncjob.NewArgs("reports", uuid.Nil, start, 0), want: river.EventKindJobCancelled, wantErr: "sync job has no account_id"},
		"unknown task": {args: syncjob.NewArgs("billing", active, start, 0), want: river.EventKindJobCancelled, wantErr: `no riverslot task "billing" is registered in this process`},
	}
	byJob := map[int64]string{}
	for name, tc := range cases {
		res, err := client.Insert(ctx, tc.args, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		byJob[res.Job.ID] = name
	}

	timeout := time.After(30 * time.Second)
	for len(byJob) > 0 {
		select {
		case ev := <-events:
			name, ok := byJob[ev.Job.ID]
			require.True(t, ok, "unexpected job %d", ev.Job.ID)
			delete(byJob, ev.Job.ID)
			tc := cases[name]
			require.Equal(t, tc.want, ev.Kind, name)
			if tc.wantErr != "" {
				require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, tc.wantErr, name)
			}
		case <-timeout:
			t.Fatalf("jobs still unfinished after 30s: %v", byJob)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []uuid.UUID{active, failing}, calls,
		"only accounts that exist and match the filter reach the SyncFunc, each once")
}

// TestWorkAccountsDatabaseUnreachable: with the accounts database down (a
// pool to a port nothing listens on), a sync job that cannot check its
// account waits, snoozed without using an attempt, never calling Sync
// and never failing; once its NotAfter passes it completes as stale
// (the next cycle covers the account). With MaxAttempts 1, an attempt
// used by the outage would discard it.
func TestWorkAccountsDatabaseUnreachable(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 1)
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(down.Close)

	spec := riverslottest.Spec(t, "reports", schema, "accounts", "active", 2*time.Minute, 100)
	spec.AccountsPool = down
	var calls atomic.Int64
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error {
		calls.Add(1)
		return nil
	})
	client, events := startWorker(ctx, t, pool, schema, w, 2)
	args := syncjob.NewArgs("reports", ids[0], time.Now().Truncate(time.Second), 0)
	args.NotAfter = time.Now().Add(4 * time.Second).UTC()
	res, err := client.Insert(ctx, args, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)

	select {
	case ev := <-events:
		require.Equal(t, res.Job.ID, ev.Job.ID)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "completed, not failed: errors %v", ev.Job.Errors)
		require.Empty(t, ev.Job.Errors, "the outage is not the job's error")
		require.False(t, ev.Job.FinalizedAt.Before(args.NotAfter), "it waited until its NotAfter")
		var md struct {
			Output  map[string]string `json:"output"`
			Snoozes int               `json:"snoozes"`
		}
		require.NoError(t, json.Unmarshal(ev.Job.Metadata, &md))
		require.Equal(t, syncjob.SkippedStale, md.Output[syncjob.OutputSkipped], "stale once NotAfter passed")
		require.Positive(t, md.Snoozes, "it waited snoozed")
	case <-time.After(60 * time.Second):
		t.Fatal("the sync job did not finish within 60 s")
	}
	require.Zero(t, calls.Load(), "Sync is never called for an account that could not be checked")
}

// startWorker registers w and starts a River client in schema that works
// the default queue with maxWorkers workers; it returns the client and its
// job events.
func startWorker(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, w *syncjob.Worker, maxWorkers int) (*river.Client[pgx.Tx], <-chan *river.Event) {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, w.Register(workers))
	return riverslottest.StartClient(ctx, t, pool, &river.Config{
		Schema:  schema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
	})
}

// TestBreakerCountsUpstreamFailuresOnly: with FailureThreshold 2, two syncs
// failing with errors marked NotUpstream, a cancelled one and a snoozed
// one leave their upstream's breaker closed; two plain failures open it.
func TestBreakerCountsUpstreamFailuresOnly(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 6)
	spec := riverslottest.Spec(t, "reports", schema, "accounts", "", 2*time.Minute, 100)
	spec.Upstream = "'bank'"
	spec.Limits = upstream.Limits{FailureThreshold: 2}.WithDefaults()
	errs := map[uuid.UUID]error{
		ids[0]: syncjob.NotUpstream(errors.New("our own database is down")),
		ids[1]: syncjob.NotUpstream(errors.New("our own database is down")),
		ids[2]: river.JobCancel(errors.New("the app gave up")),
		ids[3]: river.JobSnooze(time.Hour),
		ids[4]: errors.New("bank answered 500"),
		ids[5]: errors.New("bank answered 500"),
	}
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error { return errs[id] })
	client, _ := startWorker(ctx, t, pool, schema, w, 1)
	lim := upstream.New(schema)
	breaker := func() string {
		t.Helper()
		list, err := lim.List(ctx, pool, "reports", "", 10)
		require.NoError(t, err)
		require.Len(t, list, 1)
		return list[0].Breaker
	}
	run := func(id uuid.UUID) {
		t.Helper()
		args := syncjob.NewArgs("reports", id, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), 0)
		args.Upstream = "bank"
		res, err := client.Insert(ctx, args, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		// Finished, or snoozed (an hour away): its outcome is recorded.
		riverslottest.WaitFor(t, 30*time.Second, "the sync job to finish or snooze", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				" WHERE id = $1 AND (finalized_at IS NOT NULL OR state = 'scheduled')", res.Job.ID) == 1
		})
	}
	for _, id := range ids[:4] {
		run(id)
	}
	require.Equal(t, "closed", breaker(), "errors that are not the upstream's do not count")
	run(ids[4])
	require.Equal(t, "closed", breaker())
	run(ids[5])
	require.Equal(t, "open", breaker(), "two upstream failures in a row open it")
}
