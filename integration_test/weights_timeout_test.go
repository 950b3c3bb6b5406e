package integration

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// TestWeightedBootstrapTinyTimeoutStillBootstraps runs three cycles of a
// weighted task whose PinsTimeout (5 s; the bootstrap has twice that, so the
// rest of its work has 5 s on a busy machine) the pin computation cannot meet in
// the first and third: the test holds an ACCESS EXCLUSIVE lock on the
// accounts table while their bootstraps run, so the weight sums wait on it
// until their statement_timeout cancels them, by construction.
//
//   - Cycle 1, no pins computed before it: it falls back to hash placement
//     (bootstrap output fallback "hash", per-slot jobs placement "hash"),
//     and still syncs every account exactly once, each in its hash slot.
//   - Cycle 2, no lock: its pins are computed.
//   - Cycle 3 falls back to cycle 2's pins (output fallback "previous",
//     per-slot jobs' pins naming cycle 2), and syncs every account exactly
//     once, in the slot cycle 2's pins (or its hash) say.
func TestWeightedBootstrapTinyTimeoutStillBootstraps(t *testing.T) {
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
			insertWeighted(ctx, t, b, 300, byte(lo), byte(hi), 1)
		} else {
			insertWeighted(ctx, t, b, 30, byte(lo), byte(hi), 100) // three slots of 10x the others' weight
		}
	}
	const n = 13*300 + 3*30

	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active",
		Weight: "weight", PinsTimeout: 5 * time.Second,
		Queue: "parked", ControlQueue: river.QueueDefault, BatchSize: 500, Sync: b.recordSync(),
	})
	require.NoError(t, scheduler.CreateIndexes(ctx))
	require.NoError(t, scheduler.Check(ctx))
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	info := taskInfo(t, scheduler, "transactions")
	first := info.Schedule.Next(time.Now().Add(time.Hour))
	starts := []time.Time{first, first.Add(16 * time.Second), first.Add(32 * time.Second)}
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	pins := pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()

	// bootstrapCycle enqueues the cycle's bootstrap, holding the accounts
	// table locked while it runs when locked, and returns its output.
	bootstrapCycle := func(start time.Time, locked bool) bootstrap.Output {
		t.Helper()
		var lock pgx.Tx
		if locked {
			lock, err = b.pool.Begin(ctx)
			require.NoError(t, err)
			defer lock.Rollback(ctx) //nolint:errcheck // released when the bootstrap is done
			_, err = lock.Exec(ctx, "LOCK TABLE "+accounts+" IN ACCESS EXCLUSIVE MODE")
			require.NoError(t, err)
		}
		res, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
		require.NoError(t, err)
		var state string
		var out []byte
		waitFor(t, 60*time.Second, "the bootstrap to finish", func() bool {
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT state, coalesce(metadata->'output', 'null') FROM "+jobs+" WHERE id = $1", res.Job.ID).Scan(&state, &out))
			return state == "completed" || state == "retryable" || state == "discarded"
		})
		require.Equal(t, "completed", state, "the bootstrap completes on its first attempt, lock or not")
		var o bootstrap.Output
		require.NoError(t, json.Unmarshal(out, &o))
		return o
	}
	// runCycle runs every slot of the cycle and returns its sync jobs'
	// slots, by account, failing on an account enqueued twice.
	runCycle := func(start time.Time) map[string]int {
		t.Helper()
		runCycleSlots(ctx, t, b, start, plan.Slots)
		waitFor(t, 60*time.Second, "every per-slot job of the cycle completed", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'cycle_start')::timestamptz = $2",
				perslot.Kind, start) == int64(plan.Slots)
		})
		served := map[string]int{}
		for id, slot := range syncSlots(ctx, t, b, start) {
			served[id.String()] = slot
		}
		return served
	}
	perSlotPins := func(start time.Time) (placements []string, pinsCycles []string) {
		t.Helper()
		rows, err := b.pool.Query(ctx, "SELECT DISTINCT args->>'placement', coalesce(args->'pins'->>'cycle_start', '') FROM "+jobs+
			" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, start)
		require.NoError(t, err)
		var p, c string
		_, err = pgx.ForEachRow(rows, []any{&p, &c}, func() error {
			placements, pinsCycles = append(placements, p), append(pinsCycles, c)
			return nil
		})
		require.NoError(t, err)
		return placements, pinsCycles
	}

	// Cycle 1: nothing to fall back to but hash placement.
	out := bootstrapCycle(starts[0], true)
	require.Equal(t, perslot.PlacementHash, out.Placement)
	require.Equal(t, "hash", out.Fallback)
	require.Nil(t, out.Pins)
	st, err := scheduler.StatusAt(ctx, "transactions", starts[0])
	require.NoError(t, err)
	require.Equal(t, "hash", st.Current.PinsFallback, "Status says the cycle fell back, from its ledger row")
	placements, _ := perSlotPins(starts[0])
	require.Equal(t, []string{perslot.PlacementHash}, placements)
	served := runCycle(starts[0])
	require.Len(t, served, n, "every account synced once in the cycle that fell back to hash placement")
	require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" j WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2"+
		" AND (args->>'slot')::int <> get_byte(uuid_send((args->>'account_id')::uuid), 15) / 16", syncjob.Kind, starts[0]), "every account in its hash slot")

	// Cycle 2: computed.
	out = bootstrapCycle(starts[1], false)
	require.Equal(t, perslot.PlacementPinned, out.Placement)
	require.Empty(t, out.Fallback)
	require.Positive(t, out.Pinned)
	pinned := b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1", starts[1])
	require.EqualValues(t, out.Pinned, pinned)

	// Cycle 3: falls back to cycle 2's pins.
	out = bootstrapCycle(starts[2], true)
	require.Equal(t, perslot.PlacementPinned, out.Placement)
	require.Equal(t, "previous", out.Fallback)
	require.NotNil(t, out.Pins)
	st, err = scheduler.StatusAt(ctx, "transactions", starts[2])
	require.NoError(t, err)
	require.Equal(t, "previous", st.Current.PinsFallback)
	st, err = scheduler.StatusAt(ctx, "transactions", starts[1])
	require.NoError(t, err)
	require.Empty(t, st.Current.PinsFallback, "cycle 2 computed its pins")
	require.True(t, starts[1].Equal(out.Pins.CycleStart), "follows cycle 2's pins, got %s", out.Pins.CycleStart)
	require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1", starts[2]), "no pins of its own")
	placements, pinsCycles := perSlotPins(starts[2])
	require.Equal(t, []string{perslot.PlacementPinned}, placements)
	require.Len(t, pinsCycles, 1)
	followed, err := time.Parse(time.RFC3339Nano, pinsCycles[0])
	require.NoError(t, err)
	require.True(t, starts[1].Equal(followed), "per-slot jobs follow cycle 2's pins, got %s", pinsCycles[0])
	served = runCycle(starts[2])
	require.Len(t, served, n, "every account synced once in the cycle that fell back to the previous pins")
	misplaced := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" j LEFT JOIN "+pins+
		" p ON p.account_id = (j.args->>'account_id')::uuid AND p.cycle_start = $3 WHERE j.kind = $1 AND (j.args->>'cycle_start')::timestamptz = $2"+
		" AND (j.args->>'slot')::int <> coalesce(p.slot, get_byte(uuid_send((j.args->>'account_id')::uuid), 15) / 16)",
		syncjob.Kind, starts[2], starts[1])
	require.Zero(t, misplaced, "every account in the slot cycle 2's pins (or its hash) say")
	movedByPins := b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1 AND slot <> bucket / 16", starts[1])
	t.Logf("cycle 1 (hash fallback): %d accounts synced once; cycle 2: %d pinned (%d away from their hash slot); cycle 3 (previous pins): %d synced once, 0 misplaced",
		n, pinned, movedByPins, n)
	require.Positive(t, movedByPins, "cycle 2's pins move accounts, so following them is visible")
}
