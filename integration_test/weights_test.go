package integration

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/syncjob"
)

// TestWeightedCycle runs every slot of a weighted cycle whose hash placement
// puts 4.4 times the mean weight in each of three slots, and checks: every
// account is enqueued exactly once, in the slot the cycle's pins (or its
// hash, unpinned) say; the per-slot weight of what was enqueued is within
// 1 + WeightEpsilon of the mean; the next cycle's bootstrap keeps every pin
// (nothing changed), and each cycle's pins are computed once.
func TestWeightedCycle(t *testing.T) {
	t.Parallel()
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

	scheduler := newScheduler(t, b, riverutil.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 500, Sync: b.recordSync(),
	})
	require.NoError(t, scheduler.CreateIndexes(ctx))
	require.NoError(t, scheduler.Check(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	start := b.enqueueFutureCycle(ctx, t, scheduler, client)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	pins := pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()
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
	require.LessOrEqual(t, heaviest/mean, 1+riverutil.WeightEpsilonDefault)

	// The next cycle: nothing changed, so every pin stays (hysteresis), and
	// its pins are computed once however often its bootstrap runs.
	next := start.Add(16 * time.Second)
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", next)
	require.NoError(t, err)
	cycles := pgx.Identifier{b.schema, "riverslot_pin_cycles"}.Sanitize()
	waitFor(t, 30*time.Second, "the next cycle's bootstrap completed", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", bootstrap.Kind) == 2
	})
	require.EqualValues(t, 1, b.count(ctx, t, "SELECT count(*) FROM "+cycles+" WHERE cycle_start = $1", next))
	moved := b.count(ctx, t, "SELECT count(*) FROM "+pins+" a FULL JOIN (SELECT * FROM "+pins+" WHERE cycle_start = $2) b ON a.account_id = b.account_id"+
		" WHERE (a.cycle_start = $1 OR a.cycle_start IS NULL) AND a.slot IS DISTINCT FROM b.slot", start, next)
	require.Zero(t, moved, "no pin moved between two cycles of the same accounts")
}
