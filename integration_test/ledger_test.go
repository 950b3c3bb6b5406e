package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestExactlyOnceWithShortRetention runs three real 24 s cycles (8 slots
// of 3 s) with River keeping completed jobs for one second: River's job
// cleaner (every 30 s on the leader) deletes each cycle's finished
// bootstrap, per-slot and sync jobs during the run, which the test waits
// for and asserts. Every account is still synced exactly once per cycle
// (the app's own record, the synced table), the ledger holds what each
// fan-out did, and a duplicate trigger or an EnqueueCycle of a cycle whose
// jobs River deleted adds no per-slot job and no sync.
func TestExactlyOnceWithShortRetention(t *testing.T) {
	parallel(t)

	const (
		accounts = 400
		cycle    = 24 * time.Second
		cycles   = 3
	)
	ctx, b := setup(t, accounts)
	offset, first := offsetForStartIn(cycle, 11*time.Second)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts",
		Sync: b.recordSync(),
	})
	starts := make([]time.Time, cycles)
	for i := range starts {
		starts[i] = first.Add(time.Duration(i) * cycle)
	}

	config := &river.Config{
		Schema:                      b.schema,
		Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 40}},
		Logger:                      riverslottest.Logger(t),
		FetchPollInterval:           200 * time.Millisecond,
		TestOnly:                    true,
		CompletedJobRetentionPeriod: time.Second,
	}
	require.NoError(t, scheduler.Configure(config))
	require.Equal(t, time.Second, config.CompletedJobRetentionPeriod, "Configure leaves River's retention alone")
	client, err := river.NewClient(riverpgxv5.New(b.pool), config)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, client.Stop(stopCtx))
		})
	}
	t.Cleanup(stop)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	ledger := pgx.Identifier{b.schema, "riverslot_ledger"}.Sanitize()
	last := starts[cycles-1]
	waitFor(t, time.Until(last.Add(cycle))+60*time.Second, "every cycle's accounts synced", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE cycle_start = ANY($1)", starts) >= cycles*accounts
	})
	// River's cleaner really deleted the cycles' finished jobs: every job
	// of the first two cycles is gone while their ledger rows stay.
	waitFor(t, 70*time.Second, "River's cleaner to delete the first two cycles' jobs", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE (args->>'cycle_start')::timestamptz = ANY($1)", starts[:2]) == 0
	})

	for i, start := range starts {
		require.EqualValues(t, accounts, b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE cycle_start = $1", start), "cycle %d: one sync per account", i+1)
		require.EqualValues(t, accounts, b.count(ctx, t, "SELECT count(DISTINCT account_id) FROM "+synced+" WHERE cycle_start = $1", start), "cycle %d: every account", i+1)
		require.EqualValues(t, 1, b.count(ctx, t, "SELECT count(*) FROM "+ledger+" WHERE cycle_start = $1 AND slot = -1", start), "cycle %d: one bootstrap row", i+1)
		require.EqualValues(t, 8, b.count(ctx, t, "SELECT count(*) FROM "+ledger+" WHERE cycle_start = $1 AND slot >= 0 AND finished_at IS NOT NULL", start), "cycle %d: every slot recorded finished", i+1)
		require.EqualValues(t, accounts, b.count(ctx, t, "SELECT sum(inserted) FROM "+ledger+" WHERE cycle_start = $1 AND slot >= 0", start), "cycle %d: the ledger's sync jobs", i+1)
	}

	// Cycle 1's jobs are gone: re-running it through EnqueueCycle inserts
	// a bootstrap job (nothing in River blocks it), which adds nothing.
	res, err := scheduler.EnqueueCycle(ctx, client, "transactions", starts[0])
	require.NoError(t, err)
	require.False(t, res.UniqueSkippedAsDuplicate, "River no longer has cycle 1's bootstrap")
	// A duplicate trigger of cycle 2, as a second leader's RunOnStart would
	// insert once River deleted the first.
	info := taskInfo(t, scheduler, "transactions")
	dup, err := client.Insert(ctx, bootstrap.Args{Task: "transactions", CycleStart: starts[1], Plan: riverslottest.Key(t, info.PlanID)}, &river.InsertOpts{})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the re-run bootstraps to finish", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE id = ANY($1) AND state = 'completed'", []int64{res.Job.ID, dup.Job.ID}) == 2
	})
	stop()
	require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = ANY($1) AND (args->>'cycle_start')::timestamptz = ANY($2)",
		[]string{perslot.Kind, syncjob.Kind}, starts[:2]), "no per-slot or sync job of a re-run cycle")
	for i, start := range starts[:2] {
		require.EqualValues(t, accounts, b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE cycle_start = $1", start), "cycle %d synced no account again", i+1)
		require.EqualValues(t, 9, b.count(ctx, t, "SELECT count(*) FROM "+ledger+" WHERE cycle_start = $1", start))
	}

	// Status reads the deleted cycles from the ledger and never counts the
	// accounts table once a cycle has recorded its slots: with the table
	// renamed away, a fresh scheduler (no cached count) still describes
	// cycle 2, expecting what cycle 1's fan-outs counted.
	_, err = b.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{b.schema, "accounts"}.Sanitize()+" RENAME TO accounts_away")
	require.NoError(t, err)
	fresh := newScheduler(t, b, riverslot.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Sync: b.recordSync()})
	require.NoError(t, fresh.Configure(&river.Config{Schema: b.schema}))
	st, err := fresh.StatusAt(ctx, "transactions", starts[1])
	require.NoError(t, err)
	c := st.Current
	require.Equal(t, 8, c.SlotsDone, "every slot done, from the ledger")
	require.EqualValues(t, accounts, c.Enqueued)
	require.EqualValues(t, accounts, c.AccountsExpected)
	require.True(t, c.OnTrack, c.Verdict)
	require.NotNil(t, st.Previous)
	require.Equal(t, 8, st.Previous.SlotsDone)
	latest, err := fresh.Status(ctx, "transactions")
	require.NoError(t, err)
	require.False(t, latest.Current.CycleStart.Before(last), "the latest cycle is at least the third")
}
