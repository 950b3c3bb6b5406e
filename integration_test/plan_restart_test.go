package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/riverutil"
)

// TestPlanChangeMidCycleRestart changes a task's Phase in the middle of a
// cycle, through a restart (TestDeploysProcesses changes the other parts
// of the plan through restarts of real processes), with River deleting finished jobs a second
// after they finish: a node of the old plan makes a 24 s cycle and stops
// after its first slots fanned out; a node of the new plan (Phase changed)
// starts with its periodic trigger, runs
// the old cycle's remaining per-slot jobs under the old plan and makes its
// own cycles. Every account is synced exactly once in each full cycle of
// the new plan after the old one, none is synced twice less than half a
// cycle apart, and the ledger records the old cycle done under its plan.
func TestPlanChangeMidCycleRestart(t *testing.T) {
	t.Parallel()

	const (
		accounts = 600
		cycle    = 24 * time.Second // 8 slots of 3 s
		slots    = 8
	)
	for _, tt := range []struct {
		name   string
		change func(*riverutil.Task)
	}{
		// Seed, Buckets and TriggerOffset through a restart run with real
		// worker processes in TestDeploysProcesses (Phase there through a
		// rolling deploy).
		{"Phase", func(x *riverutil.Task) { x.Phase = 0.25 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, b := setup(t, accounts)
			clean := b.shortRetention(ctx, t)
			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
			led := pgx.Identifier{b.schema, "riverslot_ledger"}.Sanitize()

			offset, oldStart := offsetForStartIn(cycle, 11*time.Second)
			oldTask := riverutil.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset,
				Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordScheduled()}
			old := newScheduler(t, b, oldTask)
			oldPlan := taskInfo(t, old, "transactions").PlanID
			oldClient := startClient(ctx, t, b, old, false, river.QueueDefault)
			_, err := old.EnqueueCycle(ctx, oldClient, "transactions", oldStart)
			require.NoError(t, err)
			finished := func() int64 {
				return b.count(ctx, t, "SELECT count(*) FROM "+led+" WHERE plan = $1 AND cycle_start = $2 AND slot >= 0 AND finished_at IS NOT NULL", oldPlan, oldStart)
			}
			waitFor(t, time.Until(oldStart)+60*time.Second, "the old cycle's first slots to fan out", func() bool { return finished() >= 2 })
			stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			require.NoError(t, oldClient.Stop(stopCtx))
			fanned := finished()
			require.Less(t, fanned, int64(slots), "stopped with old slots still to run")

			newTask := oldTask
			tt.change(&newTask)
			changed := newScheduler(t, b, newTask)
			newInfo := taskInfo(t, changed, "transactions")
			startClient(ctx, t, b, changed, true, river.QueueDefault)

			// Run until a full cycle of the new plan has started after the
			// old cycle ended, and ended.
			var full time.Time // the first new-plan cycle start at or after the old cycle's end
			for s := newInfo.Schedule.Start(oldStart.Add(cycle)); ; s = newInfo.Schedule.Next(s) {
				if !s.Before(oldStart.Add(cycle)) {
					full = s
					break
				}
			}
			end := full.Add(cycle)
			waitFor(t, time.Until(end)+90*time.Second, "the new plan's first full cycle", func() bool {
				return time.Now().After(end) &&
					b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE state NOT IN ('completed', 'cancelled', 'discarded') AND scheduled_at < $1", end) == 0
			})
			clean()

			require.EqualValues(t, slots, finished(), "the old cycle ran all its slots under its own plan, through the restart")
			require.EqualValues(t, newInfo.Plan.Slots, b.count(ctx, t, "SELECT count(*) FROM "+led+" WHERE plan = $1 AND cycle_start = $2 AND slot >= 0 AND finished_at IS NOT NULL",
				newInfo.PlanID, full), "the new plan made and ran its full cycle")

			// Every account is synced once in the new plan's full cycle, or
			// left to a sync less than half a cycle before its time there
			// (the overlap rule: an account whose slot moved towards its
			// last sync waits for the next cycle), never twice less than
			// half a cycle apart, and never more than a cycle and a half
			// plus a slot without a sync.
			calls := b.calls(ctx, t)
			var (
				closest, longest time.Duration = cycle, 0
				leftToEarlier    int
			)
			for _, id := range b.ids {
				ts := calls[id]
				require.NotEmpty(t, ts, "account %s never synced", id)
				// Within the old cycle, or spread by a late fan-out at most
				// half a cycle past its last slot's start.
				require.Less(t, ts[0].Sub(oldStart), cycle+cycle/2, "account %s: first synced %s after the old cycle's start", id, ts[0].Sub(oldStart))
				var (
					inFull     int
					beforeFull time.Time
				)
				for i, at := range ts {
					if !at.Before(full) && at.Before(end) {
						inFull++
					}
					if at.Before(full) {
						beforeFull = at
					}
					if i > 0 {
						gap := at.Sub(ts[i-1])
						closest, longest = min(closest, gap), max(longest, gap)
						require.GreaterOrEqual(t, gap, cycle/2, "account %s synced twice %s apart: %v", id, gap, ts)
						require.LessOrEqual(t, gap, cycle+cycle/2+cycle/slots, "account %s not synced for %s: %v", id, gap, ts)
					}
				}
				require.LessOrEqual(t, inFull, 1, "account %s synced %d times in the new plan's full cycle at %s: %v", id, inFull, full.Format(time.TimeOnly), ts)
				if inFull == 0 {
					leftToEarlier++
					require.Greater(t, beforeFull, full.Add(-cycle/2), "account %s not synced in the full cycle at %s, nor less than half a cycle before it: %v", id, full.Format(time.TimeOnly), ts)
				}
			}
			t.Logf("%s: old cycle fanned out %d of %d slots before the restart; new plan's first full cycle at +%s; %d accounts left to a sync just before it; syncs of one account %s to %s apart",
				tt.name, fanned, slots, full.Sub(oldStart), leftToEarlier, closest.Round(time.Millisecond), longest.Round(time.Millisecond))
		})
	}
}
