package integration

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// TestRestartAcrossSlots: no client runs for the first 5 of 16 slots of a
// cycle (80 s, 16 slots of 5 s), then one starts. With LatePolicySpread the
// missed accounts are replayed over a catch-up window, not all at once; with
// LatePolicySkip they wait for the next cycle. A third run with LateGrace as
// long as the cycle shows what no late policy does: every missed account due
// at once.
func TestRestartAcrossSlots(t *testing.T) {
	parallel(t)

	const (
		accounts  = 4000
		cycle     = 80 * time.Second
		downSlots = 5
	)
	for _, tt := range []struct {
		name      string
		policy    riverslot.LatePolicy
		lateGrace time.Duration
	}{
		{"Spread", riverslot.LatePolicySpread, 0},
		{"Skip", riverslot.LatePolicySkip, 0},
		{"NoPolicyBaseline", riverslot.LatePolicySpread, cycle},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			ctx, b := setup(t, accounts)
			// A grid whose cycle starts 6 s from now, not up to a cycle away.
			offset, start := offsetForStartIn(cycle, 6*time.Second)
			scheduler := newScheduler(t, b, riverslot.Task{
				Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
				LatePolicy: tt.policy, LateGrace: tt.lateGrace, Sync: b.recordSync(),
			})
			plan := taskInfo(t, scheduler, "transactions").Plan
			require.Equal(t, 16, plan.Slots)
			schedule := taskInfo(t, scheduler, "transactions").Schedule

			// The cycle is enqueued (the trigger ran), then every client is down.
			insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
			require.NoError(t, err)
			require.Equal(t, start, schedule.Next(start.Add(-time.Nanosecond)), "start is a cycle start of the task")
			_, err = scheduler.EnqueueCycle(ctx, insertOnly, "transactions", start)
			require.NoError(t, err)

			restart := start.Add(downSlots * plan.SlotDuration)
			time.Sleep(time.Until(restart)) // the outage itself: nothing may run before restart
			startClient(ctx, t, b, scheduler, false, river.QueueDefault)

			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
			waitFor(t, time.Until(start.Add(cycle))+90*time.Second, "the cycle to finish", func() bool {
				return !time.Now().Before(start.Add(cycle)) &&
					b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE state NOT IN ('completed', 'cancelled', 'discarded')") == 0
			})

			m := b.measure(ctx, t, "transactions", start)
			var skipped, lateAccounts int64
			for _, id := range b.ids {
				if plan.SlotOf(id) < downSlots {
					lateAccounts++
				}
			}
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT coalesce(sum((metadata->'output'->>'skipped')::bigint), 0) FROM "+jobs+" WHERE kind = $1", perslot.Kind).Scan(&skipped))

			// Burst after the restart: sync jobs already due when inserted,
			// and the spread of start times (per-second starts).
			dueAtOnce := b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND scheduled_at <= created_at + interval '1 second'", syncjob.Kind)
			var maxPerSec, meanPerSec, spreadSeconds float64
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT max(n), avg(n), extract(epoch FROM max(s) - min(s))::float8 FROM (
				SELECT date_trunc('second', attempted_at) AS s, count(*)::float8 AS n FROM `+jobs+`
				WHERE kind = $1 GROUP BY 1) per_second`, syncjob.Kind).Scan(&maxPerSec, &meanPerSec, &spreadSeconds))
			t.Logf("%s: accounts=%d late_accounts(slots 0-%d)=%d sync_jobs=%d synced_once=%d missed=%d duplicated=%d skipped=%d due_at_once=%d peak_pending=%d accounts/slots=%d starts/s max=%.0f mean=%.1f (max/mean %.1f) over %.0fs",
				tt.name, accounts, downSlots-1, lateAccounts, m.SyncJobs, m.SyncedOnce, m.Missed, m.Duplicated, skipped, dueAtOnce, m.PeakPending,
				accounts/plan.Slots, maxPerSec, meanPerSec, maxPerSec/meanPerSec, spreadSeconds)

			switch tt.name {
			case "Spread":
				// A slot whose fan-out runs more than half a cycle after
				// the slot's start has no catch-up window left, and its
				// accounts are skipped (the next cycle covers them): on a
				// loaded machine the restarted client's leader election
				// and first scheduler run can take the 15 s of slack the
				// first slot has. A fan-out that ran in time skips nobody
				// (a second's margin: the fan-out reads the clock after
				// River's attempted_at); every account not skipped is
				// synced once (Sync called).
				var skippedInTime, skippedPastWindow int64
				require.NoError(t, b.pool.QueryRow(ctx, `SELECT
					coalesce(sum((metadata->'output'->>'skipped')::bigint) FILTER (WHERE attempted_at <= $2::timestamptz + ((args->>'slot')::int * $3::interval) + $4::interval - interval '1 second'), 0),
					coalesce(sum((metadata->'output'->>'skipped')::bigint) FILTER (WHERE attempted_at > $2::timestamptz + ((args->>'slot')::int * $3::interval) + $4::interval - interval '1 second'), 0)
					FROM `+jobs+` WHERE kind = $1`, perslot.Kind, start, plan.SlotDuration, cycle/2).Scan(&skippedInTime, &skippedPastWindow))
				require.Zero(t, skippedInTime, "a fan-out that ran within half a cycle of its slot's start spreads its late accounts")
				b.requireSyncedOnce(ctx, t, m, "transactions", skippedPastWindow)
				// Only accounts within LateGrace are due at once: the last
				// missed slot and the slots that pass while the client
				// starts (leader election, first scheduler run), at most
				// about 4 slots' worth; the other late accounts are spread.
				require.Less(t, dueAtOnce, lateAccounts-skippedPastWindow, "late accounts must not all be due at once")
				require.LessOrEqual(t, dueAtOnce, int64(4*accounts/plan.Slots))
			case "Skip":
				// The missed slots' accounts, plus any of the current slot
				// that were past grace when its per-slot job ran, are
				// skipped; everyone else is synced once.
				require.GreaterOrEqual(t, skipped, lateAccounts*(downSlots-1)/downSlots, "at least the fully missed slots are skipped")
				require.LessOrEqual(t, skipped, lateAccounts+int64(2*accounts/plan.Slots))
				b.requireSyncedOnce(ctx, t, m, "transactions", skipped) // skipped accounts wait for the next cycle
			case "NoPolicyBaseline":
				b.requireSyncedOnce(ctx, t, m, "transactions", 0)
				require.GreaterOrEqual(t, dueAtOnce, lateAccounts*9/10, "without a policy the late accounts are all due at once")
			}
		})
	}
}
