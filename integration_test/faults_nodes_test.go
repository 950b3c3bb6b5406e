package integration

import (
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
	"github.com/riverslot/riverslot/slotplan"
)

// TestThreeNodes runs three worker processes with the periodic trigger on one
// database through two full 40 s cycles (after the partial cycle their
// RunOnStart enqueues), and stops the leader's process in the middle of the
// first full cycle.
func TestThreeNodes(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 3)

	const (
		accounts = 3000
		cycle    = 40 * time.Second
	)
	ctx, b := setup(t, accounts)
	markSchemaAsDemos(ctx, t, b.pool, b.schema) // riverslot worker serves only the demo's schemas
	schedule, err := slotplan.NewSchedule(cycle, 0, nil)
	require.NoError(t, err)
	plan, _ := slotplan.New(cycle)

	args := []string{"--cycle", cycle.String(), "--task", "transactions", "--periodic", "--workers", "10"}
	nodes := map[string]*worker{}
	for _, id := range []string{"node1", "node2", "node3"} {
		nodes[id] = startWorker(t, b.schema, id, args...)
	}
	// RunOnStart bootstraps the cycle that starts within a trigger lead
	// (12.5 s here): the current one, partly late, or the next, depending
	// on when the leader's trigger ran. The ledger says which (a guess
	// from the clock here failed once on a busy machine, the trigger
	// running just past the boundary).
	led := pgx.Identifier{b.schema, "riverslot_ledger"}.Sanitize()
	waitFor(t, 60*time.Second, "RunOnStart's bootstrap", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+led+" WHERE slot = -1") > 0
	})
	var partial time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT min(cycle_start) FROM "+led+" WHERE slot = -1").Scan(&partial))
	partial = partial.UTC()
	require.True(t, schedule.Start(partial).Equal(partial), "a cycle start of the task's schedule")
	c1 := partial.Add(cycle)
	c2 := c1.Add(cycle)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	leaderTable := pgx.Identifier{b.schema, "river_leader"}.Sanitize()

	time.Sleep(time.Until(c1.Add(cycle / 2))) // run into the middle of the first full cycle
	var leader string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT leader_id FROM "+leaderTable).Scan(&leader))
	require.Contains(t, nodes, leader)
	nodes[leader].stop(t)
	stoppedAt := time.Now()

	// The trigger keeps enqueuing later cycles; wait for these three.
	waitFor(t, time.Until(c2.Add(cycle))+90*time.Second, "two full cycles to finish", func() bool {
		return !time.Now().Before(c2.Add(cycle)) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE state NOT IN ('completed', 'cancelled', 'discarded') AND (args->>'cycle_start')::timestamptz = ANY($1)",
				[]time.Time{partial, c1, c2}) == 0
	})
	var newLeader string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT leader_id FROM "+leaderTable).Scan(&newLeader))
	require.NotEqual(t, leader, newLeader)

	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	for _, start := range []time.Time{partial, c1, c2} {
		bootstraps := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", bootstrap.Kind, start)
		perSlot := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, start)
		perSlotDistinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'slot') FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, start)
		m := b.measure(ctx, t, "transactions", start)
		calls := b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE cycle_start = $1", start)
		byClients := b.count(ctx, t, "SELECT count(DISTINCT attempted_by[1]) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, start)
		t.Logf("cycle %s: bootstraps=%d per_slot=%d/%d accounts=%d synced_once=%d missed=%d duplicated=%d sync_calls=%d skipped=%d peak_pending=%d accounts/slots=%d worked_by_clients=%d",
			start.Format(time.RFC3339), bootstraps, perSlot, plan.Slots, m.Accounts, m.SyncedOnce, m.Missed, m.Duplicated, calls, m.Skipped, m.PeakPending, accounts/plan.Slots, byClients)

		require.EqualValues(t, 1, bootstraps, "one bootstrap per cycle")
		require.EqualValues(t, plan.Slots, perSlot, "one per-slot job per slot")
		require.EqualValues(t, plan.Slots, perSlotDistinct)
		// River runs a job at least once: a Sync whose job then failed to
		// complete (a timeout on a busy machine) runs again on the retry, so
		// extra calls are bounded by the extra attempts, never more.
		distinct := b.count(ctx, t, "SELECT count(DISTINCT account_id) FROM "+synced+" WHERE cycle_start = $1", start)
		retries := b.count(ctx, t, "SELECT coalesce(sum(attempt - 1), 0) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, start)
		require.LessOrEqual(t, calls-distinct, retries, "a second Sync call for an account only on a retry of its job")
		if start.Equal(partial) {
			// Slots more than half a cycle late when the nodes started are
			// skipped (counted in their per-slot jobs' output): the next
			// cycle covers them.
			lateSkipped := b.count(ctx, t, "SELECT coalesce(sum((metadata->'output'->>'skipped')::bigint), 0) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, start)
			b.requireSyncedOnce(ctx, t, m, "transactions", lateSkipped)
			continue
		}
		b.requireSyncedOnce(ctx, t, m, "transactions", 0)
		require.GreaterOrEqual(t, byClients, int64(2), "work spread over more than one client")
	}
	t.Logf("leader %s stopped at %s (mid cycle %s); new leader %s enqueued cycle %s",
		leader, stoppedAt.Format(time.RFC3339), c1.Format(time.RFC3339), newLeader, c2.Format(time.RFC3339))
}

// TestDuplicateTriggers enqueues the same cycle's bootstrap five ways at once
// (two clients' EnqueueCycle, repeated, and a trigger-style insert) and, as a
// worst case, two bootstrap jobs inserted without uniqueness at all: the
// cycle still gets exactly one per-slot job per slot.
func TestDuplicateTriggers(t *testing.T) {
	parallel(t)

	ctx, b := setup(t, 100)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 120 * time.Second, Schema: b.schema, Table: "accounts", Sync: b.recordSync(),
	})
	info := taskInfo(t, scheduler, "transactions")
	plan := info.Plan
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // far ahead: per-slot jobs stay scheduled
	bootstrapArgs := bootstrap.Args{Task: "transactions", CycleStart: start, Plan: riverslottest.Key(t, info.PlanID)}

	var clients []*river.Client[pgx.Tx]
	for range 2 {
		c, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := scheduler.EnqueueCycle(ctx, clients[i%2], "transactions", start)
			errs <- err
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// What the periodic trigger inserts for the same nominal time.
		_, err := clients[0].Insert(ctx, bootstrapArgs, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
		errs <- err
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Bypass bootstrap uniqueness entirely (an operator's manual re-run).
	for range 2 {
		_, err := clients[1].Insert(ctx, bootstrapArgs, nil)
		require.NoError(t, err)
	}

	startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	waitFor(t, 30*time.Second, "every runnable bootstrap to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", bootstrap.Kind) == 3
	})
	uniqueBootstraps := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND unique_key IS NOT NULL", bootstrap.Kind)
	perSlot := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind)
	distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'slot') FROM "+jobs+" WHERE kind = $1", perslot.Kind)
	t.Logf("unique bootstraps=%d (5 enqueue attempts), non-unique bootstraps worked=2, per-slot jobs=%d for %d slots", uniqueBootstraps, perSlot, plan.Slots)
	require.EqualValues(t, 1, uniqueBootstraps)
	require.EqualValues(t, plan.Slots, perSlot)
	require.EqualValues(t, plan.Slots, distinct)
}
