package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// TestKillMidFanOutWeighted is TestKillMidFanOut for a weighted task, whose
// per-slot job selects its bucket range minus the accounts pinned elsewhere,
// then the accounts pinned to its slot. Slots 0-12 hold 5,000 light accounts
// each, slots 13-15 each 400 accounts of weight 250 (hash-only, slot 13
// carries 4.4 times the mean), so the bootstrap pins the heavy accounts
// over the light slots, slot 0 among them. The worker is SIGKILLed in slot
// 0's bucket-range phase, between the phases (holding the first pinned
// batch) and in the pinned phase; a second process finishes the slot, and
// every account slot 0 serves is enqueued exactly once, none of the others.
func TestKillMidFanOutWeighted(t *testing.T) {
	parallel(t)

	const (
		light, heavyPerSlot = 5_000, 400
		heavyWeight         = 250.0
		batchSize           = 25
	)
	for i, killAfter := range []int64{2_000, 5_000, 5_050} {
		t.Run(fmt.Sprintf("Trial%dKillAfter%d", i+1, killAfter), func(t *testing.T) {
			reserveProcessConns(t, 0, 2) // node A, killed, then node B
			ctx, b := setup(t, 0)
			markSchemaAsDemos(ctx, t, b.pool, b.schema) // riverslot worker serves only the demo's schemas
			accounts := pgx.Identifier{b.schema, "accounts"}.Sanitize()
			_, err := b.pool.Exec(ctx, "ALTER TABLE "+accounts+" ADD COLUMN weight double precision NOT NULL DEFAULT 1")
			require.NoError(t, err)
			plan, err := slotplan.New(16 * time.Second)
			require.NoError(t, err)
			for slot := range plan.Slots {
				lo, hi := plan.BucketRange(slot)
				if slot < 13 {
					insertWeighted(ctx, t, b, light, byte(lo), byte(hi), 1)
				} else {
					insertWeighted(ctx, t, b, heavyPerSlot, byte(lo), byte(hi), heavyWeight)
				}
			}

			task := riverslot.Task{Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Filter: "active", Weight: "weight", Sync: b.recordSync()}
			scheduler := newScheduler(t, b, task)
			require.NoError(t, scheduler.CreateIndexes(ctx))
			require.NoError(t, scheduler.Check(ctx))

			args := []string{"--cycle", "16s", "--batch-size", fmt.Sprint(batchSize), "--sync-queue", "parked", "--work-sync=false", "--weight", "weight",
				"--rescue-after", "9s", "--per-slot-timeout", "8s", "--sync-timeout", "4s", "--task", "transactions", "--periodic=false"}
			release := b.holdSyncInsertsAfter(ctx, t, killAfter)
			a := startWorker(t, b.schema, "nodeA", args...)

			insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
			require.NoError(t, err)
			start := b.enqueueFutureCycle(ctx, t, scheduler, insertOnly)

			// What slot 0 serves, from the accounts and the cycle's pins:
			// its hash accounts not pinned elsewhere, and those pinned to it.
			pins := pgx.Identifier{b.schema, "riverslot_pins"}.Sanitize()
			want := b.count(ctx, t, "SELECT count(*) FROM "+accounts+" a LEFT JOIN "+pins+" p ON p.account_id = a.id AND p.cycle_start = $1"+
				" WHERE CASE WHEN p.slot IS NULL THEN get_byte(uuid_send(a.id), 15) < 16 ELSE p.slot = 0 END", start)
			pinnedIn := b.count(ctx, t, "SELECT count(*) FROM "+pins+" WHERE cycle_start = $1 AND slot = 0", start)
			var heaviest, mean float64
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT max(w), avg(w) FROM (SELECT coalesce(p.slot, get_byte(uuid_send(a.id), 15) / 16) AS slot, sum(a.weight) AS w FROM "+
				accounts+" a LEFT JOIN "+pins+" p ON p.account_id = a.id AND p.cycle_start = $1 GROUP BY 1) s", start).Scan(&heaviest, &mean))
			t.Logf("slot 0 serves %d accounts, %d of them pinned in; heaviest slot %.0f, mean %.0f", want, pinnedIn, heaviest, mean)
			require.GreaterOrEqual(t, pinnedIn, int64(3*batchSize), "heavy accounts pinned into slot 0, over several batches")
			require.LessOrEqual(t, heaviest, 1.10*mean, "every slot within the bound")
			require.EqualValues(t, light+pinnedIn, want, "slot 0 keeps all its light accounts")

			res := b.runSlots(ctx, t, 25, 0)
			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
			countSync := func() int64 {
				return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
			}
			held := (killAfter + batchSize - 1) / batchSize * batchSize
			waitFor(t, 120*time.Second, fmt.Sprintf("%d sync jobs before the kill", held), func() bool { return countSync() >= held })
			a.kill(t)
			release()
			atKill := countSync()
			require.Equal(t, held, atKill, "nothing committed while the fan-out was held")
			require.Less(t, atKill, want, "killed before the fan-out finished")
			job, err := insertOnly.JobGet(ctx, res[0])
			require.NoError(t, err)
			requireLeftByKill(t, job)

			startWorker(t, b.schema, "nodeB", args...)
			waitFor(t, 180*time.Second, "the orphaned per-slot job to be rescued and completed", func() bool {
				job, err = insertOnly.JobGet(ctx, res[0])
				require.NoError(t, err)
				return job.State == rivertype.JobStateCompleted
			})

			got := countSync()
			distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
			wrong := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" j JOIN "+accounts+" a ON a.id = (j.args->>'account_id')::uuid LEFT JOIN "+pins+
				" p ON p.account_id = a.id AND p.cycle_start = $2 WHERE j.kind = $1 AND NOT CASE WHEN p.slot IS NULL THEN get_byte(uuid_send(a.id), 15) < 16 ELSE p.slot = 0 END",
				syncjob.Kind, start)
			t.Logf("trial %d: want=%d committed_at_kill=%d after_restart: sync_jobs=%d distinct=%d not_slot_0=%d attempts=%d",
				i+1, want, atKill, got, distinct, wrong, job.Attempt)
			require.Equal(t, want, got, "one sync job per account slot 0 serves")
			require.Equal(t, want, distinct, "no account enqueued twice")
			require.Zero(t, wrong, "no account of another slot")
			require.GreaterOrEqual(t, job.Attempt, 2)
			require.Contains(t, job.AttemptedBy, "nodeA")
			// The other slots' jobs are untouched, an hour ahead.
			require.EqualValues(t, plan.Slots-1, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'scheduled'", perslot.Kind))
		})
	}
}

// insertWeighted adds n active accounts of weight w whose buckets are in
// [lo, hi].
func insertWeighted(ctx context.Context, t *testing.T, b *testBundle, n int, lo, hi byte, w float64) {
	t.Helper()
	rows := make([][]any, n)
	span := int(hi-lo) + 1
	for i := range rows {
		id := uuid.New()
		var r [1]byte
		_, _ = rand.Read(r[:])
		id[15] = lo + byte(int(r[0])%span)
		rows[i] = []any{id, true, w}
	}
	_, err := b.pool.CopyFrom(ctx, pgx.Identifier{b.schema, "accounts"}, []string{"id", "active", "weight"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
}
