package integration

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// seedJumbos fills a 16-slot (16 s) layout: 13 slots of 500 accounts of
// weight 1, 3 slots of 40 accounts of weight 250 (jumbos, pinned
// elsewhere), and one giant of weight 1,500 in slot 0 (about two thirds of
// a mean slot: it gets a slot of its own, its neighbours are evacuated).
func seedJumbos(ctx context.Context, t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{b.schema, "accounts"}.Sanitize()+" ADD COLUMN weight double precision NOT NULL DEFAULT 1")
	require.NoError(t, err)
	plan, err := slotplan.New(16 * time.Second)
	require.NoError(t, err)
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		if slot < 13 {
			insertWeighted(ctx, t, b, 500, byte(lo), byte(hi), 1)
		} else {
			insertWeighted(ctx, t, b, 40, byte(lo), byte(hi), 250)
		}
	}
	insertWeighted(ctx, t, b, 1, 0, 15, 1500)
	rows, err := b.pool.Query(ctx, "SELECT id FROM "+pgx.Identifier{b.schema, "accounts"}.Sanitize())
	require.NoError(t, err)
	b.ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Len(t, b.ids, 13*500+3*40+1)
}

// runCycles enqueues the cycles starting at starts through each scheduler
// (an hour ahead: their sync jobs stay parked at their targets), waits for
// the bootstraps, makes every per-slot job run now, in the order the
// schedulers are given, and waits for them.
func (b *testBundle) runCycles(ctx context.Context, t *testing.T, client *river.Client[pgx.Tx], cycles ...cycleRun) {
	t.Helper()
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	for _, c := range cycles {
		slots := taskInfo(t, c.scheduler, c.task).Plan.Slots
		before := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind)
		_, err := c.scheduler.EnqueueCycle(ctx, client, c.task, c.start)
		require.NoError(t, err)
		waitFor(t, 60*time.Second, "the cycle's per-slot jobs", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == before+int64(slots)
		})
		_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND state = 'scheduled'"+
			" AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz = $3", perslot.Kind, c.task, c.start)
		require.NoError(t, err)
		waitFor(t, 120*time.Second, "the cycle's per-slot jobs completed", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", perslot.Kind) == before+int64(slots)
		})
	}
}

// cycleRun is one cycle for runCycles: a task's cycle enqueued through a
// scheduler (of that plan).
type cycleRun struct {
	scheduler *riverslot.Scheduler
	task      string
	start     time.Time
}

// parkedSyncs returns every sync job's scheduled time by task and account.
func (b *testBundle) parkedSyncs(ctx context.Context, t *testing.T) map[string]map[uuid.UUID][]time.Time {
	t.Helper()
	rows, err := b.pool.Query(ctx, "SELECT args->>'task', (args->>'account_id')::uuid, scheduled_at FROM "+
		pgx.Identifier{b.schema, "river_job"}.Sanitize()+" WHERE kind = $1 ORDER BY scheduled_at", syncjob.Kind)
	require.NoError(t, err)
	out := map[string]map[uuid.UUID][]time.Time{}
	var (
		task string
		id   uuid.UUID
		at   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&task, &id, &at}, func() error {
		if out[task] == nil {
			out[task] = map[uuid.UUID][]time.Time{}
		}
		out[task][id] = append(out[task][id], at)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestOppositeOfWeightedTask: a task OppositeOf a weighted task follows its
// pins shifted by half the slots, so the two never meet on an account,
// jumbos and the giant's evacuated neighbours included: every account's two
// syncs are at least half a cycle minus a slot apart on the cycle circle.
func TestOppositeOfWeightedTask(t *testing.T) {
	parallel(t)
	ctx, b := setup(t, 0)
	seedJumbos(ctx, t, b)
	payments := riverslot.Task{Name: "payments", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 400, Sync: b.recordSync()}
	reports := payments
	reports.Name, reports.OppositeOf, reports.Weight = "reports", "payments", ""
	scheduler := newScheduler(t, b, payments, reports)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	require.NoError(t, scheduler.Check(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	info := taskInfo(t, scheduler, "payments")
	start := info.Schedule.Next(time.Now().Add(time.Hour))
	// reports first: its bootstrap computes the pins of payments' cycle.
	b.runCycles(ctx, t, client, cycleRun{scheduler, "reports", start}, cycleRun{scheduler, "payments", start})

	plan := info.Plan
	syncs := b.parkedSyncs(ctx, t)
	var moved int
	closest := plan.Cycle
	for _, id := range b.ids {
		require.Len(t, syncs["payments"][id], 1, "account %s: one payments sync", id)
		require.Len(t, syncs["reports"][id], 1, "account %s: one reports sync", id)
		p, r := syncs["payments"][id][0], syncs["reports"][id][0]
		if !p.Equal(plan.Target(start, info.Seed, id)) {
			moved++
		}
		d := ((r.Sub(p) % plan.Cycle) + plan.Cycle) % plan.Cycle
		d = min(d, plan.Cycle-d)
		closest = min(closest, d)
		require.GreaterOrEqual(t, d, plan.Cycle/2-plan.SlotDuration, "account %s: payments at %s, reports at %s", id, p, r)
	}
	t.Logf("%d accounts, %d moved from their hash slot by payments' pins; closest two syncs of one account %s on the circle (at least %s)",
		len(b.ids), moved, closest, plan.Cycle/2-plan.SlotDuration)
	require.Greater(t, moved, 100, "the case pins jumbos and evacuates the giant's slot: reports must follow them")
}

// TestPlanChangeWeighted changes a weighted task's Cycle from 32 s to 16 s
// at a cycle start: the old cycle runs under its plan and pins, the two new
// cycles inside it leave to it every account it syncs near them, judged at
// the old cycle's real (pinned) times. No account is synced twice less than
// half the new cycle apart, nor twice in one new cycle, and every account is
// synced in the old cycle's span.
func TestPlanChangeWeighted(t *testing.T) {
	parallel(t)
	ctx, b := setup(t, 0)
	seedJumbos(ctx, t, b)
	task := riverslot.Task{Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 400, Sync: b.recordSync()}
	longer := task
	longer.Cycle = 32 * time.Second
	scheduler, old := newScheduler(t, b, task), newScheduler(t, b, longer)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	start := taskInfo(t, old, "transactions").Schedule.Next(time.Now().Add(time.Hour))
	b.runCycles(ctx, t, client,
		cycleRun{old, "transactions", start},
		cycleRun{scheduler, "transactions", start},
		cycleRun{scheduler, "transactions", start.Add(16 * time.Second)})

	syncs := b.parkedSyncs(ctx, t)["transactions"]
	pins := pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()
	oldPinned := b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE plan = $1 AND cycle_start = $2", taskInfo(t, old, "transactions").PlanID, start)
	require.Positive(t, oldPinned, "the old cycle pins accounts away from their hash slots")
	for _, id := range b.ids {
		ts := syncs[id]
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		require.NotEmpty(t, ts, "account %s never synced", id)
		perNew := map[int]int{}
		for i, at := range ts {
			perNew[int(at.Sub(start)/(16*time.Second))]++
			if i > 0 {
				require.GreaterOrEqual(t, at.Sub(ts[i-1]), 8*time.Second, "account %s synced twice %s apart: %v", id, at.Sub(ts[i-1]), ts)
			}
		}
		for k, n := range perNew {
			require.LessOrEqual(t, n, 1, "account %s synced %d times in new cycle %d: %v", id, n, k, ts)
		}
		require.True(t, !ts[0].Before(start) && ts[0].Before(start.Add(32*time.Second)), "account %s not synced in the old cycle's span: %v", id, ts)
	}
	t.Logf("%d accounts over one 32 s and two 16 s cycles; %d pinned in the old cycle", len(b.ids), oldPinned)
}
