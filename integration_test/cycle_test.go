package integration

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// TestTwoFullCycles runs a real River client, wired as an app wires it
// (Configure, the periodic trigger), through two consecutive compressed
// cycles (48 s: 16 slots of 3 s) over 5,000 accounts, a tenth of them
// filtered out, and checks every promise of the pipeline against the
// database.
func TestTwoFullCycles(t *testing.T) {
	parallel(t)

	const (
		accounts = 5000
		cycle    = 48 * time.Second
	)
	ctx, b := setup(t, accounts)
	inactive := map[uuid.UUID]bool{}
	for i, id := range b.ids {
		if i%10 == 0 {
			inactive[id] = true
		}
	}
	_, err := b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "accounts"}.Sanitize()+" SET active = false WHERE id = ANY($1)", keys(inactive))
	require.NoError(t, err)
	active := accounts - len(inactive)

	// The first cycle starts 11 s from now: the trigger's RunOnStart (which
	// looks one trigger lead, 11.5 s, plus a second ahead) bootstraps it,
	// and the periodic trigger the next one, 11.5 s before it starts.
	offset, first := offsetForStartIn(cycle, 11*time.Second)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
		BatchSize: 1000, Sync: b.recordSync(),
	})
	info := taskInfo(t, scheduler, "transactions")
	plan := info.Plan
	require.Equal(t, 16, plan.Slots)
	require.Equal(t, 1500*time.Millisecond, info.Lead, "half a 3 s slot")
	require.Equal(t, 11500*time.Millisecond, info.TriggerLead)
	second := first.Add(cycle)

	startClient(ctx, t, b, scheduler, true, river.QueueDefault)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	// lateSkipped is what the cycle's fan-outs skipped as past their late
	// window (their per-slot jobs' output): no sync job is made for those
	// accounts, the next cycle covers them.
	lateSkipped := func(start time.Time) int64 {
		return b.count(ctx, t, "SELECT coalesce(sum((metadata->'output'->>'skipped')::bigint), 0) FROM "+jobs+
			" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, start)
	}
	// The deadline is for work still queued after the second cycle ends,
	// not a speed bound. Each account of both cycles has its sync job
	// completed, or was skipped by a fan-out that ran past its window: a
	// CI run beside other tests saw River's scheduler time out for 30 s,
	// its per-slot jobs then ran more than half a cycle late and skipped
	// their slots' accounts, and a wait for every sync job never ended.
	waitFor(t, time.Until(second.Add(cycle))+180*time.Second, "both cycles' sync jobs to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'cycle_start')::timestamptz IN ($2, $3)",
			syncjob.Kind, first, second)+lateSkipped(first)+lateSkipped(second) >= int64(2*active)
	})
	require.EqualValues(t, 2, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz IN ($2, $3)", bootstrap.Kind, first, second),
		"one bootstrap per cycle: RunOnStart's and the trigger's")
	require.Zero(t, b.count(ctx, t, "SELECT count(*) - count(DISTINCT args->>'cycle_start') FROM "+jobs+" WHERE kind = $1", bootstrap.Kind))

	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	offsets := make([]map[uuid.UUID]time.Duration, 2)
	spread := make([]int64, 2)
	for i, start := range []time.Time{first, second} {
		m := b.measure(ctx, t, "transactions", start)
		t.Logf("cycle %d (%s): accounts=%d slots=%d synced_once=%d missed=%d duplicated=%d peak_pending=%d accounts/slots=%d lateness_p50=%s p99=%s",
			i+1, start.Format(time.RFC3339), m.Accounts, plan.Slots, m.SyncedOnce, m.Missed, m.Duplicated, m.PeakPending,
			m.Accounts/int64(plan.Slots), m.LatenessP50, m.LatenessP99)

		require.EqualValues(t, active, m.Accounts)
		// A fan-out skips accounts only past its window: more than half a
		// cycle after its slot's start (a second's margin: the fan-out
		// reads the clock after River's attempted_at). What was skipped
		// is missed, and nothing else.
		var skippedInTime int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT coalesce(sum((metadata->'output'->>'skipped')::bigint) FILTER (WHERE attempted_at <= $2::timestamptz + ((args->>'slot')::int * $3::interval) + $4::interval - interval '1 second'), 0)
			FROM `+jobs+` WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2`, perslot.Kind, start, plan.SlotDuration, cycle/2).Scan(&skippedInTime))
		require.Zero(t, skippedInTime, "a fan-out that ran within half a cycle of its slot's start spreads its late accounts")
		late := lateSkipped(start)
		b.requireSyncedOnce(ctx, t, m, "transactions", late)
		require.EqualValues(t, int64(active)-late, m.Completed)
		require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'account_id')::uuid = ANY($2)", syncjob.Kind, keys(inactive)),
			"no filtered-out account is enqueued")

		// The application's own side effect: one call per account, less the
		// syncs that started so late they were stale (past half a cycle
		// after their time: the next cycle covers them). How on time syncs
		// start is a measurement (riverslot demo, docs/performance.md: p99
		// 0.26 s on a quiet machine), not this test's, which runs beside the
		// package's other real-cycle tests on 2 CPUs (a fresh-clone CI run
		// on a loaded machine measured p50 21.6 s, p99 26.7 s, and 839
		// syncs went stale). What holds on any machine is the rule itself:
		// every sync that called Sync started by its NotAfter, half a cycle
		// after its time; every skipped one after it.
		require.EqualValues(t, int64(active)-m.Skipped-late, b.count(ctx, t, "SELECT count(DISTINCT account_id) FROM "+synced+" WHERE cycle_start = $1", start))
		require.EqualValues(t, int64(active)-m.Skipped-late, b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE cycle_start = $1", start))
		// How many went stale is the machine's: the rule is checked per
		// sync below (skipped exactly when it started after a NotAfter
		// computed here from the account's regular time), so a NotAfter
		// that made every sync stale fails there, on any machine.

		// Peak pending near accounts/slots, not the fleet: a sync job is
		// pending from its insert, Lead before its slot, until it starts,
		// its lateness after its time. So at most (1 + (lead + lateness
		// p99)/slot) slots' worth, plus the 1% later than p99. Lateness is
		// the machine's (a loaded run measured p99 10.3 s and a peak of
		// 1,321 for 281 a slot; a CI run at p99 26.7 s a peak of 2,408).
		// Whatever the lateness, the bound stays under three quarters of
		// the cycle's accounts (3,375): a fan-out that enqueued the cycle
		// at once holds all 4,500.
		perSlot := float64(active) / float64(plan.Slots)
		bound := min((1+float64(info.Lead+m.LatenessP99)/float64(plan.SlotDuration))*perSlot+0.01*float64(active), 0.75*float64(active))
		require.LessOrEqual(t, float64(m.PeakPending), bound, "peak pending %d vs accounts/slots %.0f", m.PeakPending, perSlot)

		// Each sync job is scheduled inside its account's slot window, at
		// the same offset from the cycle start every cycle.
		// Its NotAfter is half a cycle after its time, and a sync called
		// Sync exactly when it started by then. The fan-out writes it into
		// the args of late-spread syncs only; the worker derives the
		// others' and records it in a stale sync's output.
		// Every sync job is tagged with its plan, from which the worker
		// derives a NotAfter the args do not carry.
		var untagged int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND NOT $3 = ANY(tags)",
			syncjob.Kind, start, taskspec.PlanTag(info.PlanID)).Scan(&untagged))
		require.Zero(t, untagged, "sync jobs without their plan's tag")
		// Each slot's fan-out, when its per-slot job ran once: it saw a
		// clock between the job's start and its end, so an account whose
		// regular time plus LateGrace (a slot) is before the start was
		// late at the fan-out, and one whose is after the end was not.
		fanouts := map[int][2]time.Time{}
		frows, err := b.pool.Query(ctx, "SELECT (args->>'slot')::int, attempted_at, finalized_at FROM "+jobs+
			" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND state = 'completed' AND attempt = 1", perslot.Kind, start)
		require.NoError(t, err)
		for frows.Next() {
			var (
				slot             int
				began, finalized time.Time
			)
			require.NoError(t, frows.Scan(&slot, &began, &finalized))
			fanouts[slot] = [2]time.Time{began, finalized}
		}
		require.NoError(t, frows.Err())
		rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, scheduled_at, args->>'not_after', attempted_at, "+
			"coalesce(metadata->'output' ? '"+syncjob.OutputSkipped+"', false), metadata->'output'->>'"+syncjob.OutputNotAfter+"' FROM "+jobs+
			" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, start)
		require.NoError(t, err)
		offsets[i] = map[uuid.UUID]time.Duration{}
		for rows.Next() {
			var (
				id                        uuid.UUID
				scheduledAt               time.Time
				argsNotAfter, outNotAfter *string
				attemptedAt               *time.Time
				skipped                   bool
			)
			require.NoError(t, rows.Scan(&id, &scheduledAt, &argsNotAfter, &attemptedAt, &skipped, &outNotAfter))
			// Its regular time: slot start + offset, by definition.
			slot := int(id[15]) / (256 / plan.Slots) // bucket → slot
			windowStart := start.Add(time.Duration(slot) * (cycle / time.Duration(plan.Slots)))
			regular := info.Plan.Target(start, info.Seed, id)
			require.False(t, regular.Before(windowStart), "account %s: regular %s before its slot %d window %s", id, regular, slot, windowStart)
			require.True(t, regular.Before(windowStart.Add(plan.SlotDuration)), "account %s: regular %s after its slot %d window", id, regular, slot)
			// NotAfter: half a cycle after its regular time (never less
			// than LateGrace after the time it was scheduled for).
			// (scheduled_at is stored to the microsecond, NotAfter to the nanosecond)
			wantNotAfter := regular.Add(cycle / 2)
			if grace := scheduledAt.Add(plan.SlotDuration); grace.After(wantNotAfter) {
				wantNotAfter = grace
			}
			onTime := scheduledAt.Sub(regular).Abs() <= time.Microsecond
			require.Equal(t, onTime, argsNotAfter == nil, "account %s: a NotAfter in the args of a sync %s", id, map[bool]string{true: "at its regular time", false: "moved by the late policy"}[onTime])
			if argsNotAfter != nil {
				notAfter, err := time.Parse(time.RFC3339Nano, *argsNotAfter) // as the worker reads it: to the nanosecond
				require.NoError(t, err)
				require.WithinDuration(t, wantNotAfter, notAfter, time.Microsecond, "account %s: NotAfter, regular %s, scheduled %s", id, regular, scheduledAt)
			}
			require.NotNil(t, attemptedAt, "account %s: completed sync job never attempted", id)
			require.Equal(t, attemptedAt.After(wantNotAfter), skipped, "account %s started %s, NotAfter %s: skipped %t", id, *attemptedAt, wantNotAfter, skipped)
			if skipped {
				require.NotNil(t, outNotAfter, "account %s: a stale sync records its NotAfter", id)
				notAfter, err := time.Parse(time.RFC3339Nano, *outNotAfter)
				require.NoError(t, err)
				require.WithinDuration(t, wantNotAfter, notAfter, time.Microsecond, "account %s: NotAfter judged by", id)
			}
			if f, ok := fanouts[slot]; ok {
				lateAfter := regular.Add(plan.SlotDuration) // LateGrace: a slot
				if f[0].After(lateAfter) {
					require.False(t, onTime, "account %s: its slot's fan-out started %s, after its regular time %s plus LateGrace, yet it kept its regular time", id, f[0], regular)
				}
				if f[1].Before(lateAfter) {
					require.True(t, onTime, "account %s: its slot's fan-out ended %s, before its regular time %s plus LateGrace, yet it was moved to %s", id, f[1], regular, scheduledAt)
				}
			}
			if onTime {
				offsets[i][id] = scheduledAt.Sub(start) // on time: at its regular time
				continue
			}
			// Its fan-out ran later than LateGrace (a slot) past its time
			// (a per-slot job started late on a busy machine: River
			// promotes scheduled jobs every 5 s, and slots are 3 s): spread
			// after it, within the late window.
			spread[i]++
			require.True(t, scheduledAt.After(regular.Add(plan.SlotDuration)), "account %s: moved from %s to %s though not late", id, regular, scheduledAt)
			require.True(t, scheduledAt.Before(windowStart.Add(cycle/2)), "account %s: spread to %s, past its late window", id, scheduledAt)
		}
		require.NoError(t, rows.Err())
		require.NotEmpty(t, fanouts, "cycle %d: no per-slot job ran once (every fan-out retried?)", i+1)
	}

	// Every account on time in both cycles is at the same offset in each.
	require.NotEmpty(t, offsets[1])
	for id, off := range offsets[0] {
		if off1, ok := offsets[1][id]; ok {
			require.Equal(t, off, off1, "account %s moved between cycles", id)
		}
		require.Equal(t, info.Plan.Target(first, info.Seed, id), first.Add(off))
	}
	t.Logf("accounts spread by a late fan-out: %d in cycle 1, %d in cycle 2", spread[0], spread[1])
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestFanOutRetryResumes makes a per-slot job fail in the middle of its
// second batch (a real database error raised by a trigger while River's COPY
// inserts sync jobs), lets River retry it, and checks the retry resumed after
// the last committed batch: every account of the slot has exactly one sync
// job and no batch was inserted twice.
func TestFanOutRetryResumes(t *testing.T) {
	parallel(t)

	const (
		accounts  = 6000 // all in slot 0
		batchSize = 1000
		failAtRow = 1500 // second batch
	)
	ctx, b := setup(t, 0)
	b.ids = insertAccountsInSlot(ctx, t, b, accounts, 0, 15) // 16 slots: slot 0 = buckets 0..15
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts",
		BatchSize: batchSize, Queue: "parked", ControlQueue: river.QueueDefault, Sync: b.recordSync(),
	})
	plan := taskInfo(t, scheduler, "transactions").Plan

	// One failure, then never again: sequences are not rolled back.
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	seq := pgx.Identifier{b.schema, "sync_rows"}.Sanitize()
	_, err := b.pool.Exec(ctx, "CREATE SEQUENCE "+seq)
	require.NoError(t, err)
	b.failSyncInserts(ctx, t, "nextval('"+seq+"') = "+itoa(failAtRow), "injected failure at sync row "+itoa(failAtRow))

	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault) // "parked" is not worked: sync jobs stay
	b.enqueueFutureCycle(ctx, t, scheduler, client)
	perSlotID := b.runSlots(ctx, t, 25, 0)[0] // slot 0 now; the others stay an hour ahead

	var job *rivertype.JobRow
	waitFor(t, 60*time.Second, "per-slot job to complete after its retry", func() bool {
		job, err = client.JobGet(ctx, perSlotID)
		require.NoError(t, err)
		require.NotEqual(t, rivertype.JobStateDiscarded, job.State)
		return job.State == rivertype.JobStateCompleted
	})
	require.Equal(t, 2, job.Attempt)
	require.Len(t, job.Errors, 1)
	require.Contains(t, job.Errors[0].Error, "injected failure at sync row 1500")

	var want int
	for _, id := range b.ids {
		if plan.SlotOf(id) == 0 {
			want++
		}
	}
	require.Greater(t, want, 2*batchSize, "slot must span several batches")

	total := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync'")
	distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = 'riverslot_sync'")
	wrongSlot := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync' AND get_byte(uuid_send((args->>'account_id')::uuid), 15) / $1 <> 0", plan.BucketsPerSlot)
	var rowsSeen int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT last_value FROM "+seq).Scan(&rowsSeen))
	t.Logf("slot 0: accounts=%d sync_jobs=%d distinct=%d rows_attempted=%d (first attempt: %d committed + %d rolled back)",
		want, total, distinct, rowsSeen, batchSize, failAtRow-batchSize)

	require.EqualValues(t, want, total, "one sync job per account of the slot")
	require.EqualValues(t, want, distinct, "no account enqueued twice")
	require.Zero(t, wrongSlot)
	// The retry inserted only what the first attempt had not committed.
	require.EqualValues(t, failAtRow+(want-batchSize), rowsSeen, "retry must resume after the committed batch, not restart")

	var out perslot.Result
	require.NoError(t, json.Unmarshal(job.Output(), &out))
	require.EqualValues(t, want, out.Inserted)
}

// TestSeveralTasksOneClient runs two tasks with different names, cycles,
// sync kinds and queues on one River client.
func TestSeveralTasksOneClient(t *testing.T) {
	parallel(t)

	const accounts = 400
	ctx, b := setup(t, accounts)
	var reports atomic.Int64
	scheduler := newScheduler(t, b,
		riverslot.Task{Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Queue: "sync", Sync: b.recordSync()},
		riverslot.Task{Name: "reports", Cycle: 32 * time.Second, Schema: b.schema, Table: "accounts", Queue: "reports", ControlQueue: "sync",
			Sync: func(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				reports.Add(1)
				return b.recordSync()(ctx, id, job)
			}},
	)
	client := startClient(ctx, t, b, scheduler, false, "sync", "reports")

	// Cycles far enough ahead that their per-slot jobs are queued before
	// River's scheduler must promote them.
	txStart := taskInfo(t, scheduler, "transactions").Schedule.Next(time.Now().Add(8 * time.Second))
	repStart := taskInfo(t, scheduler, "reports").Schedule.Next(time.Now().Add(8 * time.Second))
	_, err := scheduler.EnqueueCycle(ctx, client, "transactions", txStart)
	require.NoError(t, err)
	_, err = scheduler.EnqueueCycle(ctx, client, "reports", repStart)
	require.NoError(t, err)

	// Every account's sync job of each cycle completes: it called Sync, or,
	// when a busy machine started it less than half a cycle (8 s or 16 s
	// here) before the account's next regular sync, it completed as stale
	// without calling Sync (syncjob.TestSkippedSyncs covers the rule).
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	waitFor(t, 90*time.Second, "both tasks' sync jobs to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'task', (args->>'cycle_start')::timestamptz) IN (('transactions', $2::timestamptz), ('reports', $3::timestamptz))",
			syncjob.Kind, txStart, repStart) >= 2*accounts
	})

	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	var syncCalls, skipped int64
	for _, tt := range []struct {
		task, queue string
		start       time.Time
		slots       int
	}{{"transactions", "sync", txStart, 16}, {"reports", "reports", repStart, 32}} {
		m := b.measure(ctx, t, tt.task, tt.start)
		t.Logf("%s: synced_once=%d completed=%d skipped as stale=%d", tt.task, m.SyncedOnce, m.Completed, m.Skipped)
		b.requireSyncedOnce(ctx, t, m, tt.task, 0)
		require.EqualValues(t, accounts, m.Completed, tt.task)
		require.LessOrEqual(t, m.Skipped*2, int64(accounts), "%s: most syncs run", tt.task)
		skipped += m.Skipped
		if tt.task == "reports" {
			require.EqualValues(t, accounts-m.Skipped, reports.Load(), "the reports task's Sync ran once per account it did not skip")
		}
		syncCalls += b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE task = $1 AND cycle_start = $2", tt.task, tt.start)
		require.EqualValues(t, accounts, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND queue = $2 AND args->>'task' = $3", syncjob.Kind, tt.queue, tt.task))
		require.EqualValues(t, tt.slots, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND args->>'task' = $2", perslot.Kind, tt.task))
	}
	require.EqualValues(t, 2*accounts-skipped, syncCalls, "one Sync call per sync job not skipped")
}

// TestAccountGoneBeforeSync: a sync job whose account was deleted, or no
// longer matches the filter, completes without calling Sync.
func TestAccountGoneBeforeSync(t *testing.T) {
	parallel(t)

	ctx, b := setup(t, 3)
	var calls atomic.Int64
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Sync: func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { calls.Add(1); return nil },
	})
	accounts := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	_, err := b.pool.Exec(ctx, "DELETE FROM "+accounts+" WHERE id = $1", b.ids[0])
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE "+accounts+" SET active = false WHERE id = $1", b.ids[1])
	require.NoError(t, err)

	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	var ids []int64
	for _, id := range b.ids {
		res, err := client.Insert(ctx, syncjob.NewArgs("transactions", id, time.Now().Truncate(16*time.Second), 0), nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	for _, id := range ids {
		waitFor(t, 30*time.Second, "sync job to finish", func() bool {
			job, err := client.JobGet(ctx, id)
			require.NoError(t, err)
			return job.State == rivertype.JobStateCompleted
		})
		job, _ := client.JobGet(ctx, id)
		require.Empty(t, job.Errors)
	}
	require.EqualValues(t, 1, calls.Load(), "only the remaining active account is synced")
}

func itoa(n int) string { return strconv.Itoa(n) }
