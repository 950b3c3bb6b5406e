package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/syncjob"
)

// TestKillMidFanOut SIGKILLs a worker process while its per-slot job is
// inserting, at five different points, then starts a second process and
// checks the slot completes with exactly one sync job per account.
//
// The orphaned job stays "running" until a leader's rescuer finds it older
// than RescueStuckJobsAfter; the workers run with --rescue-after 5s and a 4s
// per-slot timeout (a timed-out attempt resumes from its cursor), the same
// relation riverutil.Plugin.RescueStuckJobsAfter recommends at minute scale.
func TestKillMidFanOut(t *testing.T) {
	t.Parallel()

	const (
		accounts  = 60_000 // all in slot 0
		batchSize = 500
	)
	for i, killAfter := range []int64{1_000, 8_000, 20_000, 35_000, 50_000} {
		// Trials run one after another (the test as a whole runs beside the
		// others): five concurrent 60,000-account fan-outs on 2 cores would
		// mostly measure CPU contention.
		t.Run(fmt.Sprintf("Trial%dKillAfter%d", i+1, killAfter), func(t *testing.T) {
			ctx, b := setup(t, 0)
			// Cycle 2s: 2 slots, slot 0 = buckets 0..127.
			insertAccountsInSlot(ctx, t, b, accounts, 0, 127)
			args := []string{"--cycle", "2s", "--batch-size", fmt.Sprint(batchSize), "--sync-queue", "parked", "--work-sync=false",
				"--rescue-after", "5s", "--per-slot-timeout", "4s", "--task", "transactions"}

			a := startWorker(t, b.schema, "nodeA", args...)
			insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
			require.NoError(t, err)
			cycleStart := time.Now().Truncate(2 * time.Second).Add(time.Hour)
			res, err := insertOnly.Insert(ctx, perslot.Args{Task: "transactions", CycleStart: cycleStart, Slot: 0}, nil)
			require.NoError(t, err)
			insertedAt := time.Now()

			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
			countSync := func() int64 {
				return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", syncjob.KindDefault)
			}
			waitFor(t, 60*time.Second, fmt.Sprintf("%d sync jobs before the kill", killAfter), func() bool { return countSync() >= killAfter })
			a.kill(t)
			killedAt := time.Now()
			atKill := countSync()
			job, err := insertOnly.JobGet(ctx, res.Job.ID)
			require.NoError(t, err)
			require.Equal(t, rivertype.JobStateRunning, job.State, "orphaned per-slot job is left running")
			require.Less(t, atKill, int64(accounts), "killed before the fan-out finished")
			if killAfter >= 35_000 {
				require.Greater(t, killedAt.Sub(insertedAt), time.Second, "the fan-out must take over a second for the kill to land mid-way")
			}

			startWorker(t, b.schema, "nodeB", args...)
			waitFor(t, 180*time.Second, "the orphaned per-slot job to be rescued and completed", func() bool {
				job, err = insertOnly.JobGet(ctx, res.Job.ID)
				require.NoError(t, err)
				return job.State == rivertype.JobStateCompleted
			})

			total := countSync()
			distinct := b.count(ctx, t, "SELECT count(DISTINCT args->>'account_id') FROM "+jobs+" WHERE kind = $1", syncjob.KindDefault)
			var finalizedBy string
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT attempted_by[array_upper(attempted_by, 1)] FROM "+jobs+" WHERE id = $1", res.Job.ID).Scan(&finalizedBy))
			var startedB time.Time
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT attempted_at FROM "+jobs+" WHERE id = $1", res.Job.ID).Scan(&startedB))
			t.Logf("trial %d: accounts=%d nodeA_ran=%s committed_at_kill=%d after_restart: sync_jobs=%d distinct=%d missed=%d duplicated=%d attempts=%d finished_by=%s picked_up_after=%s",
				i+1, accounts, killedAt.Sub(insertedAt).Round(100*time.Millisecond), atKill, total, distinct, accounts-distinct, total-distinct, job.Attempt, finalizedBy, startedB.Sub(killedAt).Round(100*time.Millisecond))

			require.EqualValues(t, accounts, total, "one sync job per account")
			require.EqualValues(t, accounts, distinct, "no account enqueued twice")
			require.GreaterOrEqual(t, job.Attempt, 2)
			require.Contains(t, job.AttemptedBy, "nodeA")
			require.Equal(t, "nodeB", finalizedBy)
		})
	}
}
