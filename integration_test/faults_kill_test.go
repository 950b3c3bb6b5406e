package integration

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestKillMidFanOut SIGKILLs a worker process in the middle of its per-slot
// job's fan-out, at its first batch, its middle and its last batch, then starts a second process and
// checks the slot completes with exactly one sync job per account.
//
// The kill lands mid fan-out by construction, not by timing: once the
// trial's number of sync jobs is committed, a trigger makes every further
// insert of sync jobs wait for an advisory lock the test holds, so the
// fan-out stops at a known batch; the process is killed while it waits.
//
// The orphaned job stays "running" until a leader's rescuer finds it older
// than RescueStuckJobsAfter; the workers run with --rescue-after 9s and 8 s
// per-slot timeouts (4 s for syncs) (a timed-out attempt resumes from its cursor),
// the relation Scheduler.Configure sets up at minute scale.
func TestKillMidFanOut(t *testing.T) {
	parallel(t)

	const (
		accounts  = 20_000 // all in slot 0
		batchSize = 500
	)
	for i, killAfter := range []int64{500, 10_000, 19_500} {
		// Trials run one after another (the test as a whole runs beside the
		// others).
		t.Run(fmt.Sprintf("Trial%dKillAfter%d", i+1, killAfter), func(t *testing.T) {
			reserveProcessConns(t, 0, 2) // node A, killed, then node B
			ctx, b := setup(t, 0)
			markSchemaAsDemos(ctx, t, b.pool, b.schema) // riverslot worker serves only the demo's schemas
			// Cycle 16s: 16 slots, slot 0 = buckets 0..15.
			insertAccountsInSlot(ctx, t, b, accounts, 0, 15)
			args := []string{"--cycle", "16s", "--batch-size", fmt.Sprint(batchSize), "--sync-queue", "parked", "--work-sync=false",
				"--rescue-after", "9s", "--per-slot-timeout", "8s", "--sync-timeout", "4s", "--task", "transactions", "--periodic=false"}
			planID := taskInfo(t, newScheduler(t, b, riverslot.Task{
				Name: "transactions", Cycle: 16 * time.Second, Schema: b.schema, Table: "accounts", Sync: b.recordSync(),
			}), "transactions").PlanID

			// The hold: once killAfter sync jobs are committed, every later
			// insert of sync jobs waits, so node A's fan-out stops at a known
			// batch, whatever the machine's speed.
			release := b.holdSyncInsertsAfter(ctx, t, killAfter)
			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()

			a := startWorker(t, b.schema, "nodeA", args...)
			insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
			require.NoError(t, err)
			cycleStart := time.Now().Truncate(16 * time.Second).Add(time.Hour)
			res, err := insertOnly.Insert(ctx, perslot.Args{Task: "transactions", CycleStart: cycleStart, Slot: 0, Plan: riverslottest.Key(t, planID)}, nil)
			require.NoError(t, err)

			countSync := func() int64 {
				return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
			}
			// The first whole batch at or past killAfter: the fan-out commits
			// it, and its next insert waits.
			held := (killAfter + batchSize - 1) / batchSize * batchSize
			waitFor(t, 120*time.Second, fmt.Sprintf("%d sync jobs before the kill", held), func() bool { return countSync() >= held })
			a.kill(t)
			release()
			atKill := countSync()

			job, err := insertOnly.JobGet(ctx, res.Job.ID)
			require.NoError(t, err)
			requireLeftByKill(t, job)
			require.Equal(t, held, atKill, "nothing committed while the fan-out was held")
			require.GreaterOrEqual(t, atKill, killAfter)
			require.Less(t, atKill, int64(accounts), "killed before the fan-out finished")
			require.Zero(t, atKill%batchSize, "whole batches only")
			var cursor struct{ Batches int } // the per-slot job's resumable cursor
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT metadata->'river:resumable_cursor'->'fan_out' FROM "+jobs+" WHERE id = $1", res.Job.ID).Scan(&cursor))
			require.EqualValues(t, atKill/batchSize, cursor.Batches, "the cursor holds every committed batch")

			startWorker(t, b.schema, "nodeB", args...)
			waitFor(t, 180*time.Second, "the orphaned per-slot job to be rescued and completed", func() bool {
				job, err = insertOnly.JobGet(ctx, res.Job.ID)
				require.NoError(t, err)
				return job.State == rivertype.JobStateCompleted
			})

			total := countSync()
			distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
			var finalizedBy string
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT attempted_by[array_upper(attempted_by, 1)] FROM "+jobs+" WHERE id = $1", res.Job.ID).Scan(&finalizedBy))
			t.Logf("trial %d: accounts=%d committed_at_kill=%d (%d batches) after_restart: sync_jobs=%d distinct=%d missed=%d duplicated=%d attempts=%d finished_by=%s",
				i+1, accounts, atKill, cursor.Batches, total, distinct, accounts-distinct, total-distinct, job.Attempt, finalizedBy)

			require.EqualValues(t, accounts, total, "one sync job per account")
			require.EqualValues(t, accounts, distinct, "no account enqueued twice")
			require.GreaterOrEqual(t, job.Attempt, 2)
			require.Contains(t, job.AttemptedBy, "nodeA")
			require.Equal(t, "nodeB", finalizedBy)
		})
	}
}

// holdSyncInsertsAfter makes every insert into River's job table wait for an
// advisory lock the test holds once n sync jobs are committed, so a fan-out
// stops at a known batch; release lets it go on (also at cleanup).
func (b *testBundle) holdSyncInsertsAfter(ctx context.Context, t *testing.T, n int64) (release func()) {
	t.Helper()
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	hold := pgx.Identifier{b.schema, "hold_fan_out"}.Sanitize()
	// One lock per schema: kill tests run side by side.
	h := fnv.New32a()
	_, _ = h.Write([]byte(b.schema))
	key := fmt.Sprint(h.Sum32())
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION `+hold+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT count(*) FROM `+jobs+` WHERE kind = 'riverslot_sync') >= `+fmt.Sprint(n)+` THEN
				PERFORM pg_advisory_xact_lock(`+key+`);
			END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER hold_fan_out BEFORE INSERT ON `+jobs+` FOR EACH STATEMENT EXECUTE FUNCTION `+hold+`();`)
	require.NoError(t, err)
	lockConn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = lockConn.Exec(ctx, "SELECT pg_advisory_lock("+key+")")
	require.NoError(t, err)
	released := false
	release = func() {
		if !released {
			_, err := lockConn.Exec(ctx, "SELECT pg_advisory_unlock("+key+")")
			require.NoError(t, err)
			lockConn.Release()
			released = true
		}
	}
	t.Cleanup(release)
	return release
}

// requireLeftByKill checks the per-slot job right after node A's kill: left
// running, orphaned, for a rescuer to find. On a loaded machine node A's
// attempt can reach --per-slot-timeout just as its fan-out is held, in the
// moment before the kill; then the attempt has failed and the job waits
// for its retry, from the same cursor. Node B must finish it exactly once
// either way (the trial's other checks); any other state is a failure.
func requireLeftByKill(t *testing.T, job *rivertype.JobRow) {
	t.Helper()
	switch job.State {
	case rivertype.JobStateRunning:
	case rivertype.JobStateRetryable, rivertype.JobStateAvailable:
		t.Logf("node A's attempt timed out just before the kill (job %s, attempt %d, errors %d): node B resumes it from the cursor", job.State, job.Attempt, len(job.Errors))
	default:
		t.Fatalf("per-slot job is %s after node A's kill, want running (orphaned), or retryable after a timed-out attempt", job.State)
	}
}
