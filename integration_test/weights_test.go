package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// TestWeightedCycle runs every slot of a weighted cycle whose hash placement
// puts 4.4 times the mean weight in each of three slots, and checks: every
// account is enqueued exactly once, in the slot the cycle's pins (or its
// hash, unpinned) say; the per-slot weight of what was enqueued is within
// 1 + WeightEpsilon of the mean.
//
// Then what the weighted bootstrap promises across cycles:
//
//   - Nothing changed, so the next cycle pins exactly the same accounts to
//     the same slots (none moved, none added, none dropped), and running
//     all of its slots syncs every account in the slot it had.
//   - A cycle's pins are computed once: some pinned accounts are deleted,
//     then the next cycle's bootstrap is retried (as after a crash). It
//     reuses the pins it committed, the same rows (same xmin, deleted
//     accounts included) under the same riverslot_pin_cycles row (same
//     created_at), instead of placing the changed table again.
//   - Its pins after the change do differ (the deleted accounts are gone),
//     which is what a second computation would have stored; every account
//     still pinned there keeps its slot (a deletion only frees room).
func TestWeightedCycle(t *testing.T) {
	parallel(t)
	ctx, b := setup(t, 0)
	accounts := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	_, err := b.pool.Exec(ctx, "ALTER TABLE "+accounts+" ADD COLUMN weight double precision NOT NULL DEFAULT 1")
	require.NoError(t, err)
	plan, err := slotplan.New(16 * time.Second)
	require.NoError(t, err)
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		if slot < 13 {
			insertWeighted(ctx, t, b, 2_000, byte(lo), byte(hi), 1)
		} else {
			insertWeighted(ctx, t, b, 160, byte(lo), byte(hi), 250)
		}
	}
	const n = 13*2_000 + 3*160

	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 500, Sync: b.recordSync(),
	})
	require.NoError(t, scheduler.CreateIndexes(ctx))
	require.NoError(t, scheduler.Check(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	start := b.enqueueFutureCycle(ctx, t, scheduler, client)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	pins := pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()
	cycles := pgx.Identifier{b.schema, "riverslot_pin_cycles"}.Sanitize()
	slots := make([]int, plan.Slots)
	for s := range slots {
		slots[s] = s
	}
	b.runSlots(ctx, t, 5, slots...)
	waitFor(t, 60*time.Second, "every per-slot job completed", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", perslot.Kind) == int64(plan.Slots)
	})

	total := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
	distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
	misplaced := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" j JOIN "+accounts+" a ON a.id = (j.args->>'account_id')::uuid LEFT JOIN "+pins+
		" p ON p.account_id = a.id AND p.cycle_start = $2 WHERE j.kind = $1 AND (j.args->>'slot')::int <> coalesce(p.slot, get_byte(uuid_send(a.id), 15) / 16)",
		syncjob.Kind, start)
	pinned := b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1", start)
	var heaviest, mean, hashHeaviest float64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT max(w), avg(w) FROM (SELECT (j.args->>'slot')::int, sum(a.weight) AS w FROM "+jobs+" j JOIN "+accounts+
		" a ON a.id = (j.args->>'account_id')::uuid WHERE j.kind = $1 GROUP BY 1) s", syncjob.Kind).Scan(&heaviest, &mean))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT max(w) FROM (SELECT get_byte(uuid_send(id), 15) / 16, sum(weight) AS w FROM "+accounts+" GROUP BY 1) s").Scan(&hashHeaviest))
	t.Logf("sync jobs %d, distinct %d, misplaced %d, pinned %d; per-slot weight max/mean %.3f (hash-only %.3f)", total, distinct, misplaced, pinned, heaviest/mean, hashHeaviest/mean)
	require.EqualValues(t, n, total, "one sync job per account")
	require.EqualValues(t, n, distinct)
	require.Zero(t, misplaced, "every account in its pinned or hash slot")
	require.Positive(t, pinned)
	require.Greater(t, hashHeaviest/mean, 2.0, "the case is unbalanced without weights")
	require.LessOrEqual(t, heaviest/mean, 1+riverslot.WeightEpsilonDefault)
	servedA := syncSlots(ctx, t, b, start)
	require.Len(t, servedA, n)

	// The next cycle, nothing changed: the same pins, compared both ways.
	next := start.Add(16 * time.Second)
	res, err := scheduler.EnqueueCycle(ctx, client, "transactions", next)
	require.NoError(t, err)
	nextBootstrap := res.Job.ID
	waitFor(t, 30*time.Second, "the next cycle's bootstrap completed", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", bootstrap.Kind) == 2
	})
	pinsA, pinsB := cyclePins(ctx, t, b, start), cyclePins(ctx, t, b, next)
	d := comparePins(pinsA, pinsB)
	requireNone(t, d.dropped, "pinned in the first cycle, not in the next, with nothing changed")
	requireNone(t, d.added, "pinned in the next cycle, not in the first, with nothing changed")
	requireNone(t, d.moved, "pinned to another slot in the next cycle, with nothing changed")
	var cycleCreated time.Time
	var cycleXmin string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at, xmin::text FROM "+cycles+" WHERE task = 'transactions' AND cycle_start = $1", next).
		Scan(&cycleCreated, &cycleXmin))

	// Change the table under the next cycle (delete ten of its pinned
	// accounts), then run its bootstrap again: it must reuse its pins.
	var gone []uuid.UUID
	for id := range pinsB {
		if len(gone) < 10 {
			gone = append(gone, id)
		}
	}
	_, err = b.pool.Exec(ctx, "DELETE FROM "+accounts+" WHERE id = ANY($1)", gone)
	require.NoError(t, err)
	_, err = client.JobRetry(ctx, nextBootstrap)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the next cycle's bootstrap to run again", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'completed' AND attempt = 2", nextBootstrap) == 1
	})
	d = comparePins(pinsB, cyclePins(ctx, t, b, next))
	requireNone(t, d.dropped, "pins of the cycle gone after its bootstrap ran again")
	requireNone(t, d.added, "pins of the cycle added when its bootstrap ran again")
	requireNone(t, d.moved, "pins of the cycle moved when its bootstrap ran again")
	requireNone(t, d.rewritten, "pins of the cycle written again (another xmin) when its bootstrap ran again")
	var createdAgain time.Time
	var xminAgain string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at, xmin::text FROM "+cycles+" WHERE task = 'transactions' AND cycle_start = $1", next).
		Scan(&createdAgain, &xminAgain))
	require.True(t, cycleCreated.Equal(createdAgain), "the pinned cycle was recorded again: created_at %s, then %s", cycleCreated, createdAgain)
	require.Equal(t, cycleXmin, xminAgain, "the pinned cycle's row was rewritten")

	// Its slots follow those pins: every remaining account once, in the
	// slot it had in the first cycle.
	runCycleSlots(ctx, t, b, next, plan.Slots)
	waitFor(t, 60*time.Second, "every per-slot job of the next cycle completed", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'cycle_start')::timestamptz = $2",
			perslot.Kind, next) == int64(plan.Slots)
	})
	servedB := syncSlots(ctx, t, b, next)
	require.Len(t, servedB, n-len(gone), "one sync per remaining account")
	for _, id := range gone {
		require.NotContains(t, servedB, id, "a deleted account was enqueued")
	}
	moved := 0
	for id, slot := range servedB {
		if servedA[id] != slot {
			moved++
		}
	}
	require.Zero(t, moved, "accounts served in another slot than the cycle before")

	// A fresh computation after the change: the deleted accounts are no
	// longer pinned (so a second computation of the next cycle would have
	// stored other pins), and every account pinned in both keeps its slot.
	third := next.Add(16 * time.Second)
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", third)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the third cycle's bootstrap completed", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", bootstrap.Kind) == 3
	})
	pinsC := cyclePins(ctx, t, b, third)
	for _, id := range gone {
		require.NotContains(t, pinsC, id, "a deleted account is pinned in a cycle computed after its deletion")
		delete(pinsB, id)
	}
	d = comparePins(pinsB, pinsC)
	requireNone(t, d.dropped, "remaining accounts no longer pinned after others were deleted")
	requireNone(t, d.moved, "pins moved after other accounts were deleted, which only frees room")
	t.Logf("pins: cycle 1 %d, cycle 2 %d (reused after %d deletions), cycle 3 %d; %d accounts served in cycle 2, none moved",
		len(pinsA), len(pinsB)+len(gone), len(gone), len(pinsC), len(servedB))
}

// pin is one row of riverslot_pins as the test reads it: the slot, and the
// row's xmin (the transaction that wrote it).
type pin struct {
	slot int
	xmin string
}

// pinsDiff lists how the pins of one cycle (or one read) differ from
// another's, as "account: slot" strings.
type pinsDiff struct{ dropped, added, moved, rewritten []string }

// comparePins returns how after differs from before.
func comparePins(before, after map[uuid.UUID]pin) pinsDiff {
	var d pinsDiff
	for id, p := range before {
		q, ok := after[id]
		switch {
		case !ok:
			d.dropped = append(d.dropped, fmt.Sprintf("%s: %d", id, p.slot))
		case q.slot != p.slot:
			d.moved = append(d.moved, fmt.Sprintf("%s: %d -> %d", id, p.slot, q.slot))
		case q.xmin != p.xmin:
			d.rewritten = append(d.rewritten, fmt.Sprintf("%s: xmin %s -> %s", id, p.xmin, q.xmin))
		}
	}
	for id, q := range after {
		if _, ok := before[id]; !ok {
			d.added = append(d.added, fmt.Sprintf("%s: %d", id, q.slot))
		}
	}
	return d
}

// requireNone fails with how many of list there are and the first few.
func requireNone(t *testing.T, list []string, what string) {
	t.Helper()
	if len(list) > 0 {
		t.Fatalf("%s: %d, such as %v", what, len(list), list[:min(len(list), 5)])
	}
}

// cyclePins returns the pins of the cycle starting at cycleStart.
func cyclePins(ctx context.Context, t *testing.T, b *testBundle, cycleStart time.Time) map[uuid.UUID]pin {
	t.Helper()
	rows, err := b.pool.Query(ctx, "SELECT account_id, slot, xmin::text FROM "+pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()+
		" WHERE task = 'transactions' AND cycle_start = $1", cycleStart)
	require.NoError(t, err)
	out := map[uuid.UUID]pin{}
	var (
		id uuid.UUID
		p  pin
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &p.slot, &p.xmin}, func() error {
		out[id] = p
		return nil
	})
	require.NoError(t, err)
	return out
}

// syncSlots returns the slot of every sync job of the cycle starting at
// cycleStart, by account, failing on an account enqueued twice.
func syncSlots(ctx context.Context, t *testing.T, b *testBundle, cycleStart time.Time) map[uuid.UUID]int {
	t.Helper()
	rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, (args->>'slot')::int FROM "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+
		" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, cycleStart)
	require.NoError(t, err)
	out := map[uuid.UUID]int{}
	var (
		id   uuid.UUID
		slot int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &slot}, func() error {
		if _, dup := out[id]; dup {
			t.Errorf("account %s enqueued twice in cycle %s", id, cycleStart)
		}
		out[id] = slot
		return nil
	})
	require.NoError(t, err)
	return out
}

// runCycleSlots makes every per-slot job of the cycle starting at
// cycleStart due now (runSlots does it for the only cycle enqueued).
func runCycleSlots(ctx context.Context, t *testing.T, b *testBundle, cycleStart time.Time, slots int) {
	t.Helper()
	tag, err := b.pool.Exec(ctx, "UPDATE "+pgx.Identifier{b.schema, "river_job"}.Sanitize()+
		" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND state = 'scheduled'",
		perslot.Kind, cycleStart)
	require.NoError(t, err)
	require.EqualValues(t, slots, tag.RowsAffected())
}
