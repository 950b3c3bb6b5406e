package syncjob_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// TestSkippedSyncs runs sync jobs through a real River client and checks
// that a stale one (started after its NotAfter) completes without calling
// Sync, and that a fresh one and one without NotAfter (made before it was
// recorded) call it.
func TestSkippedSyncs(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 2)
	stale, fresh := ids[0], ids[1]

	var (
		mu    sync.Mutex
		calls = map[string]int{}
		heard = map[string]string{} // OnSkip's account → reason
	)
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(riverslottest.Spec(t, "reports", schema, "accounts", "active", 2*time.Minute, 100), func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error {
		mu.Lock()
		defer mu.Unlock()
		calls[id.String()]++
		return nil
	})
	w.OnSkip("reports", func(_ context.Context, id uuid.UUID, job *river.Job[syncjob.Args], reason string) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, id, job.Args.AccountID)
		heard[id.String()] += reason
	})
	client, events := startWorker(ctx, t, pool, schema, w, 4)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	args := func(id uuid.UUID, notAfter time.Time) syncjob.Args {
		a := syncjob.NewArgs("reports", id, start, 0)
		a.NotAfter = notAfter
		return a
	}
	insert := func(a syncjob.Args) int64 {
		res, err := client.Insert(ctx, a, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		return res.Job.ID
	}
	skipped := func(id int64) string {
		t.Helper()
		var reason *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->'output'->>'"+syncjob.OutputSkipped+"' FROM "+jobs+" WHERE id = $1", id).Scan(&reason))
		if reason == nil {
			return ""
		}
		return *reason
	}

	staleJob := insert(args(stale, time.Now().Add(-time.Minute)))
	freshJob := insert(args(fresh, time.Now().Add(time.Hour)))
	legacyJob := insert(syncjob.NewArgs("reports", stale, start, 0)) // no NotAfter
	waitCompleted(t, events, staleJob, freshJob, legacyJob)
	require.Equal(t, syncjob.SkippedStale, skipped(staleJob))
	require.Empty(t, skipped(freshJob))
	require.Empty(t, skipped(legacyJob))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{
		stale.String(): 1, // the legacy job only
		fresh.String(): 1,
	}, calls)
	require.Equal(t, map[string]string{stale.String(): syncjob.SkippedStale}, heard, "OnSkip hears of the stale job once, and of nothing else")
}

// TestOutcomesCounted runs sync jobs of one cycle that end every way
// (synced, account gone, stale, failed for good, cancelled; one retried
// then synced, one snoozed then synced) and checks that the cycle's ledger
// row counts each as it ended, once, with the synced ones' lateness, and
// still does after River deletes the jobs; a job of another cycle, and
// one without its plan's tag, count nowhere.
func TestOutcomesCounted(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 9)
	synced, gone, stale, failed, cancelled, retried, snoozed, untagged, otherCycle := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6], ids[7], ids[8]

	const cycle = 2 * time.Minute
	spec := riverslottest.Spec(t, "reports", schema, "accounts", "active", cycle, 100)
	_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" SET active = false WHERE id = $1", gone)
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		attempts = map[uuid.UUID]int{}
	)
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[id]++
		switch {
		case id == failed:
			return errors.New("the bank said no")
		case id == cancelled:
			return river.JobCancel(errors.New("the account was closed upstream"))
		case id == retried && attempts[id] == 1:
			return errors.New("a blip")
		case id == snoozed && attempts[id] == 1:
			return river.JobSnooze(0)
		}
		return nil
	})
	client, _ := startWorker(ctx, t, pool, schema, w, 4)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()

	// The cycle's row, as its bootstrap makes it; syncs are due now.
	start := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	led := ledger.New(schema)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for _, s := range []time.Time{start, start.Add(-cycle)} {
		_, err = led.ClaimBootstrap(ctx, tx, spec.Name, spec.PlanID, s, 1)
		require.NoError(t, err)
		require.NoError(t, led.RecordCycle(ctx, tx, ledger.Cycle{Task: spec.Name, Plan: spec.Key, Start: s, End: s.Add(cycle),
			Deadline: s.Add(2 * cycle), KeepUntil: s.Add(time.Hour), Placement: "hash"}))
	}
	require.NoError(t, tx.Commit(ctx))

	tags := []string{taskspec.PlanTag(spec.PlanID)}
	insert := func(id uuid.UUID, cycleStart time.Time, notAfter time.Time, tags []string, maxAttempts int) int64 {
		a := syncjob.NewArgs(spec.Name, id, cycleStart, 0)
		a.NotAfter = notAfter
		res, err := client.Insert(ctx, a, &river.InsertOpts{MaxAttempts: maxAttempts, Tags: tags})
		require.NoError(t, err)
		return res.Job.ID
	}
	later := time.Now().Add(time.Hour)
	all := []int64{
		insert(synced, start, later, tags, 1),
		insert(gone, start, later, tags, 1),
		insert(stale, start, time.Now().Add(-time.Minute), tags, 1),
		insert(failed, start, later, tags, 1),
		insert(cancelled, start, later, tags, 3),
		insert(retried, start, later, tags, 2),
		insert(snoozed, start, later, tags, 1),
		insert(untagged, start, later, nil, 1),
		insert(otherCycle, start.Add(-cycle), later, tags, 1),
	}
	// The retried job waits out River's backoff: make it due at once.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now() WHERE id = ANY($1) AND state IN ('retryable', 'scheduled')", all)
		require.NoError(t, err)
		var unfinished int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+jobs+" WHERE id = ANY($1) AND finalized_at IS NULL", all).Scan(&unfinished))
		if unfinished == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d jobs unfinished after 60s", unfinished)
	}
	require.NoError(t, w.FlushOutcomes(ctx))
	// River's retention deletes them: the counts stay in the ledger.
	_, err = pool.Exec(ctx, "DELETE FROM "+jobs)
	require.NoError(t, err)

	rec, ok, err := led.CycleRecord(ctx, pool, spec.Name, spec.PlanID, start)
	require.NoError(t, err)
	require.True(t, ok)
	o := rec.Outcomes
	require.EqualValues(t, 3, o.Synced(), "synced, retried and snoozed called Sync and succeeded")
	require.EqualValues(t, 1, o.Gone())
	require.EqualValues(t, 1, o.Stale())
	require.EqualValues(t, 1, o.Failed(), "a failure River retries is not an end; the last attempt's is")
	require.EqualValues(t, 1, o.Cancelled())
	require.Zero(t, o.Upstream())
	require.EqualValues(t, 3, o.Lateness.Count(), "lateness of the synced ones only")
	p50, known := o.Lateness.Quantile(0.5)
	require.True(t, known)
	require.Less(t, p50, time.Minute, "the syncs were due a second before they were inserted")

	rec, ok, err = led.CycleRecord(ctx, pool, spec.Name, spec.PlanID, start.Add(-cycle))
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, rec.Outcomes.Synced(), "the other cycle's sync counts in its own row")
	require.EqualValues(t, 1, rec.Outcomes.Ended())
}

// TestDerivedNotAfter runs sync jobs that are tagged with their plan and
// carry no NotAfter, as the fan-out makes every sync at its regular time: the worker
// derives the NotAfter from the plan, the slot and the account's offset,
// with the cycle's end from its ledger record, and a sync that starts past
// it completes as stale, recording the NotAfter it was judged by. A
// late-spread sync's own NotAfter wins.
func TestDerivedNotAfter(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 7)
	old, current, recorded, spread, untagged, foreign, graced := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]

	const cycle = 2 * time.Minute
	spec := riverslottest.Spec(t, "reports", schema, "accounts", "active", cycle, 100)
	var (
		mu     sync.Mutex
		synced = map[uuid.UUID]bool{}
	)
	w := syncjob.NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec, func(_ context.Context, id uuid.UUID, _ *river.Job[syncjob.Args]) error {
		mu.Lock()
		defer mu.Unlock()
		synced[id] = true
		return nil
	})
	client, events := startWorker(ctx, t, pool, schema, w, 4)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()

	// The regular time of an account in slot 3 of the cycle at start: the
	// slot's start plus the account's seeded offset in the slot.
	const slot = 3
	plan := spec.Plan
	regular := func(start time.Time, id uuid.UUID) time.Time {
		return start.Add(time.Duration(slot)*plan.SlotDuration + slotplan.OffsetIn(slotplan.Hash(spec.Seed, id), plan.SlotDuration))
	}
	now := time.Now().Truncate(cycle)
	oldStart := now.Add(-3 * cycle)      // its syncs' NotAfter passed 1.5 cycles ago
	currentStart := now.Add(cycle)       // the next cycle: not stale
	recordedStart := now.Add(-2 * cycle) // on its own grid, its record says it ended 5 cycles later
	recordedEnd := recordedStart.Add(5 * cycle)
	// A cycle of the usual length whose bootstrap ran with a LateGrace of
	// an hour (its recorded deadline says so: end + cycle/2 + LateGrace):
	// its syncs keep that grace whatever this node's LateGrace.
	gracedStart := now.Add(-4 * cycle)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	led := ledger.New(schema)
	for _, c := range []ledger.Cycle{
		{Task: spec.Name, Plan: spec.Key, Start: recordedStart, End: recordedEnd, Deadline: recordedEnd.Add(cycle), KeepUntil: recordedEnd.Add(cycle), Placement: "hash"},
		{Task: spec.Name, Plan: spec.Key, Start: gracedStart, End: gracedStart.Add(cycle), Deadline: gracedStart.Add(cycle + cycle/2 + time.Hour), KeepUntil: gracedStart.Add(2 * time.Hour), Placement: "hash"},
	} {
		_, err = led.ClaimBootstrap(ctx, tx, spec.Name, spec.PlanID, c.Start, 1)
		require.NoError(t, err)
		require.NoError(t, led.RecordCycle(ctx, tx, c))
	}
	require.NoError(t, tx.Commit(ctx))

	args := func(start time.Time, id uuid.UUID) syncjob.Args {
		return syncjob.NewArgs(spec.Name, id, start, slot)
	}
	lateSpread := args(oldStart, spread)
	lateSpread.NotAfter = time.Now().Add(time.Hour)
	// Another plan of the task (another seed: another offset in the slot),
	// as a node of a rolling deploy made it.
	foreignPlan := taskspec.PlanID(spec.Plan, spec.Seed+1, 0)
	var ids64 []int64
	for _, j := range []struct {
		a    syncjob.Args
		tags []string
	}{
		// Tagged with the plan, as the fan-out tags every sync job.
		{args(oldStart, old), []string{"app-tag", taskspec.PlanTag(spec.PlanID)}},
		{args(currentStart, current), []string{taskspec.PlanTag(spec.PlanID)}},
		{args(recordedStart, recorded), []string{taskspec.PlanTag(spec.PlanID)}},
		{lateSpread, []string{taskspec.PlanTag(spec.PlanID)}},
		{args(oldStart, untagged), nil}, // made by hand: no limit
		{args(oldStart, foreign), []string{taskspec.PlanTag(foreignPlan)}},
		{args(gracedStart, graced), []string{taskspec.PlanTag(spec.PlanID)}},
	} {
		res, err := client.Insert(ctx, j.a, &river.InsertOpts{MaxAttempts: 1, Tags: j.tags})
		require.NoError(t, err)
		ids64 = append(ids64, res.Job.ID)
	}
	waitCompleted(t, events, ids64...)

	staleAt := func(jobID int64) time.Time {
		t.Helper()
		var reason, notAfter *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->'output'->>'"+syncjob.OutputSkipped+"', metadata->'output'->>'"+syncjob.OutputNotAfter+"' FROM "+jobs+" WHERE id = $1", jobID).Scan(&reason, &notAfter))
		require.NotNil(t, reason, "job %d: an old cycle's sync started past its derived NotAfter", jobID)
		require.Equal(t, syncjob.SkippedStale, *reason)
		require.NotNil(t, notAfter)
		got, err := time.Parse(time.RFC3339Nano, *notAfter)
		require.NoError(t, err)
		return got
	}
	// Half a cycle before the account's regular time in the next cycle.
	want := regular(oldStart, old).Add(cycle - cycle/2)
	require.True(t, want.Equal(staleAt(ids64[0])), "recorded NotAfter %s, want %s", staleAt(ids64[0]), want)
	// The foreign plan's own offset, not this node's.
	foreignRegular := oldStart.Add(time.Duration(slot)*plan.SlotDuration + slotplan.OffsetIn(slotplan.Hash(spec.Seed+1, foreign), plan.SlotDuration))
	require.NotEqual(t, regular(oldStart, foreign), foreignRegular, "the case: the two seeds place the account apart")
	require.True(t, foreignRegular.Add(cycle-cycle/2).Equal(staleAt(ids64[5])), "a foreign plan's sync is judged by that plan")

	mu.Lock()
	defer mu.Unlock()
	require.False(t, synced[old])
	require.True(t, synced[current], "a sync of the current cycle runs")
	require.True(t, synced[recorded], "the cycle's record (a cycle 5 times as long) gives the NotAfter, not the plan's length")
	require.True(t, synced[spread], "a late-spread sync's own NotAfter wins over the derived one")
	require.True(t, synced[untagged], "a sync job without the plan's tag has no NotAfter")
	require.False(t, synced[foreign])
	require.True(t, synced[graced], "the cycle's own LateGrace (an hour, from its record) keeps its sync fresh")
}

// waitCompleted waits for the jobs' events, each of which must be a
// completion, for at most a minute.
func waitCompleted(t *testing.T, events <-chan *river.Event, ids ...int64) {
	t.Helper()
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	timeout := time.After(60 * time.Second)
	for len(want) > 0 {
		select {
		case ev := <-events:
			if want[ev.Job.ID] {
				require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job %d", ev.Job.ID)
				delete(want, ev.Job.ID)
			}
		case <-timeout:
			t.Fatalf("jobs %v unfinished after 60s", want)
		}
	}
}
