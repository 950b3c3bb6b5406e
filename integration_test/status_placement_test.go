package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// TestStatusPlacement runs a real weighted cycle whose giant account (2.5
// times a mean slot) gets a slot of its own, so that slot's other accounts
// are pinned elsewhere, together with a task OppositeOf it, which follows
// those pins shifted by half the slots. Status of either task expects in
// each slot exactly the sync jobs the fan-out inserted there (not the hash
// slot's count) and says on track; a scheduler that knows the opposite task
// alone, as riverslot status does, finds its cycles under the shifted plan.
// Sync jobs completed without calling Sync (a stale one, one too soon after
// a previous sync) are counted by reason, and a done slot that selected
// fewer accounts than it now should is in the verdict.
func TestStatusPlacement(t *testing.T) {
	parallel(t)

	ctx, b := setup(t, 0)
	accounts := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	_, err := b.pool.Exec(ctx, "ALTER TABLE "+accounts+" ADD COLUMN weight double precision NOT NULL DEFAULT 1")
	require.NoError(t, err)
	const cycle = 16 * time.Second // 16 slots of 1 s, 16 buckets each
	plan, err := slotplan.New(cycle)
	require.NoError(t, err)
	insertWeighted(ctx, t, b, 3_200, 0, 255, 1)
	insertWeighted(ctx, t, b, 1, 0, 255, 600)
	const n = 3_201

	transactions := riverslot.Task{Name: "transactions", Cycle: cycle, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 500, Sync: b.recordSync()}
	reports := transactions
	reports.Name, reports.Weight, reports.OppositeOf = "reports", "", "transactions"
	scheduler := newScheduler(t, b, transactions, reports)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	reportsPlan := taskInfo(t, scheduler, "reports").PlanID
	require.True(t, strings.HasSuffix(reportsPlan, "/+8"), reportsPlan)

	start := taskInfo(t, scheduler, "transactions").Schedule.Next(time.Now().Add(time.Hour)).UTC()
	for _, task := range []string{"transactions", "reports"} {
		_, err := scheduler.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "both tasks' per-slot jobs", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == 2*int64(plan.Slots)
	})
	_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1", perslot.Kind)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "every per-slot job to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", perslot.Kind) == 2*int64(plan.Slots)
	})

	// What the fan-outs really inserted, per task and slot, and the hash
	// slots' counts (bucket / 16; reports half the slots further).
	inserted := map[string][]int64{"transactions": make([]int64, plan.Slots), "reports": make([]int64, plan.Slots)}
	rows, err := b.pool.Query(ctx, "SELECT args->>'task', (args->>'slot')::int, count(*) FROM "+jobs+" WHERE kind = $1 GROUP BY 1, 2", syncjob.Kind)
	require.NoError(t, err)
	var (
		task  string
		slot  int
		count int64
	)
	_, err = pgx.ForEachRow(rows, []any{&task, &slot, &count}, func() error {
		inserted[task][slot] = count
		return nil
	})
	require.NoError(t, err)
	hash := make([]int64, plan.Slots)
	for s := range hash {
		hash[s] = b.count(ctx, t, "SELECT count(*) FROM "+accounts+" WHERE active AND get_byte(uuid_send(id), 15) / 16 = $1", s)
	}
	// Slots whose hash count is off from what was inserted by more than
	// Status's tolerance: the pins moved accounts there, so expecting the
	// hash count would fail below.
	moved := 0
	for s := range hash {
		if d := inserted["transactions"][s] - hash[s]; d > max(10, hash[s]/10) || -d > max(10, hash[s]/10) {
			moved++
		}
	}
	require.Positive(t, moved, "the pins move accounts between slots, or the test shows nothing")

	check := func(t *testing.T, s *riverslot.Scheduler, task, plan string) *riverslot.CycleStatus {
		t.Helper()
		st, err := s.StatusAt(ctx, task, start)
		require.NoError(t, err)
		c := st.Current
		require.Equal(t, plan, c.Plan)
		require.Equal(t, riverslot.PlacementPinned, c.Placement)
		require.Equal(t, "transactions", c.PinsTask)
		var total int64
		for _, p := range c.PerSlot {
			require.Equal(t, inserted[task][p.Slot], p.Expected, "%s slot %d: expected = sync jobs the fan-out inserted", task, p.Slot)
			require.Equal(t, inserted[task][p.Slot], p.Enqueued, "%s slot %d", task, p.Slot)
			total += p.Expected
		}
		require.EqualValues(t, n, total)
		require.EqualValues(t, n, c.AccountsExpected)
		require.Equal(t, 16, c.SlotsDone)
		require.Equal(t, "on track", c.Verdict)
		require.True(t, c.OnTrack)
		require.Zero(t, c.OffSlots)
		return c
	}

	t.Run("WeightedTask", func(t *testing.T) {
		c := check(t, scheduler, "transactions", taskInfo(t, scheduler, "transactions").PlanID)
		require.Zero(t, c.PinsShift)
	})

	t.Run("OppositeTask", func(t *testing.T) {
		c := check(t, scheduler, "reports", reportsPlan)
		require.Equal(t, plan.Slots/2, c.PinsShift)
	})

	// riverslot status describes the task alone, from its flags: no
	// OppositeOf, no Weight. The cycle is found under the plan its jobs
	// carry, and placed by the pins they name.
	t.Run("OppositeTaskAlone", func(t *testing.T) {
		alone := newScheduler(t, b, riverslot.Task{Name: "reports", Cycle: cycle, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync()})
		require.NoError(t, alone.Configure(&river.Config{Schema: b.schema}))
		require.NotEqual(t, reportsPlan, taskInfo(t, alone, "reports").PlanID)
		st, err := alone.Status(ctx, "reports")
		require.NoError(t, err)
		require.True(t, st.Current.CycleStart.Equal(start), "the latest cycle, %s", st.Current.CycleStart)
		check(t, alone, "reports", reportsPlan)
	})

	// Sync jobs completed without calling Sync, run by the real sync
	// worker and counted by it in the cycle's ledger row: three made stale
	// (their NotAfter passed), two whose account is gone (filtered out).
	// Status reads the counts there, after River deleted the jobs too.
	t.Run("SkippedSyncs", func(t *testing.T) {
		rows, err := b.pool.Query(ctx, "SELECT id, args->>'account_id' FROM "+jobs+" WHERE kind = $1 AND args->>'task' = 'transactions' ORDER BY id LIMIT 5", syncjob.Kind)
		require.NoError(t, err)
		type picked struct {
			ID      int64
			Account string
		}
		sample, err := pgx.CollectRows(rows, pgx.RowToStructByPos[picked])
		require.NoError(t, err)
		require.Len(t, sample, 5)
		stale, gone := sample[:3], sample[3:]
		accountsTable := pgx.Identifier{b.schema, "accounts"}.Sanitize()
		for _, j := range stale {
			_, err := b.pool.Exec(ctx, "UPDATE "+jobs+" SET args = jsonb_set(args, '{not_after}', to_jsonb('2020-01-01T00:00:00Z'::text)) WHERE id = $1", j.ID)
			require.NoError(t, err)
		}
		for _, j := range gone {
			_, err := b.pool.Exec(ctx, "UPDATE "+accountsTable+" SET active = false WHERE id = $1", j.Account)
			require.NoError(t, err)
		}
		ids := []int64{stale[0].ID, stale[1].ID, stale[2].ID, gone[0].ID, gone[1].ID}
		_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET queue = $2, scheduled_at = now(), state = 'available' WHERE id = ANY($1)", ids, river.QueueDefault)
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "the five sync jobs to complete", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE id = ANY($1) AND state = 'completed'", ids) == 5
		})
		require.EqualValues(t, 3, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE id = ANY($1) AND metadata->'output'->>'riverslot_skipped' = 'stale'", ids), "the worker skipped the stale jobs")
		require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+pgx.Identifier{b.schema, "synced"}.Sanitize()), "Sync was never called")
		// River's retention deletes them.
		_, err = b.pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE id = ANY($1)", ids)
		require.NoError(t, err)

		// The worker writes its counts every ledger.TallyInterval.
		var st *riverslot.TaskStatus
		waitFor(t, 30*time.Second, "the counts in the ledger", func() bool {
			st, err = scheduler.StatusAt(ctx, "transactions", start)
			require.NoError(t, err)
			return st.Current.SkippedStale+st.Current.Gone >= 5
		})
		require.EqualValues(t, 3, st.Current.SkippedStale)
		require.EqualValues(t, 2, st.Current.Gone)
		require.EqualValues(t, 5, st.Current.Completed)
		require.Zero(t, st.Current.Synced)
		st, err = scheduler.StatusAt(ctx, "reports", start)
		require.NoError(t, err)
		require.Zero(t, st.Current.SkippedStale+st.Current.Gone, "another task's skips are not this one's")
		for _, j := range gone {
			_, err := b.pool.Exec(ctx, "UPDATE "+accountsTable+" SET active = true WHERE id = $1", j.Account)
			require.NoError(t, err)
		}
	})

	// Accounts added to slot 0's buckets after it fanned out: slot 0 of
	// transactions (and slot 8 of reports) selected fewer than it should
	// now, and the verdict says so. A fresh scheduler: Status caches its
	// counts for a minute.
	t.Run("VerdictUsesExpected", func(t *testing.T) {
		lo, hi := plan.BucketRange(0)
		insertWeighted(ctx, t, b, 40, byte(lo), byte(hi), 1)
		fresh := newScheduler(t, b, transactions, reports)
		require.NoError(t, fresh.Configure(&river.Config{Schema: b.schema}))
		for _, tt := range []struct {
			task string
			slot int
		}{{"transactions", 0}, {"reports", plan.Slots / 2}} {
			st, err := fresh.StatusAt(ctx, tt.task, start)
			require.NoError(t, err)
			c := st.Current
			require.Equal(t, inserted[tt.task][tt.slot]+40, c.PerSlot[tt.slot].Expected, tt.task)
			require.False(t, c.OnTrack, tt.task)
			require.Equal(t, 1, c.OffSlots, tt.task)
			require.Equal(t, tt.slot, c.OffSlot, tt.task)
			require.True(t, strings.HasPrefix(c.Verdict, "slot "), c.Verdict)
			require.Contains(t, c.Verdict, " accounts, ", c.Verdict)
		}
	})
}
