package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/syncjob"
)

// TestPlanChangeMidCycleRestart changes each part of a task's plan but its
// Cycle (TestPlanChangeShortRetention changes that one) in the middle of a
// cycle, through a restart, with River deleting finished jobs a second
// after they finish: a node of the old plan makes a 24 s cycle and stops
// after its first slots fanned out; a node of the new plan (Seed, Buckets,
// Phase or TriggerOffset changed) starts with its periodic trigger, runs
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
		{"Seed", func(x *riverutil.Task) { x.Seed = 12345 }},
		{"Buckets", func(x *riverutil.Task) { x.Buckets = 65536 }},
		{"Phase", func(x *riverutil.Task) { x.Phase = 0.25 }},
		{"TriggerOffset", func(x *riverutil.Task) { x.TriggerOffset = (x.TriggerOffset + 10*time.Second) % cycle }},
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

// TestPlanChangeProcesses is TestPlanChangeMidCycleRestart with real
// `riverslot worker` processes: a node of the old plan is stopped (SIGTERM,
// as a deploy stops it) after the first slots of its cycle fanned out, and
// a node of the new plan (the same binary with --seed or --phase changed)
// starts with its periodic trigger; River's finished jobs are deleted a
// second after they finish. The syncs are the worker's own record (each
// sync job's scheduled time and cycle). (A rolling deploy with nodes of
// both plans running is TestRollingDeployBothPlans: River runs periodic
// jobs on its leader only, so a new node's trigger takes over only when the
// old nodes are gone.)
func TestPlanChangeProcesses(t *testing.T) {
	t.Parallel()

	const (
		accounts = 500
		cycle    = 24 * time.Second // 8 slots of 3 s
		slots    = 8
		lateness = 2 * time.Second
	)
	for _, tt := range []struct {
		name  string
		flags []string // the new node's plan flags
	}{
		{"Seed", []string{"--seed", "12345"}},
		{"Phase", []string{"--phase", "0.25"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reserveProcessConns(t, 0, 2) // the old node and the new
			ctx, b := setup(t, accounts)
			markSchemaAsDemos(ctx, t, b.pool, b.schema) // riverslot worker serves only the demo's schemas
			clean := b.shortRetention(ctx, t)
			led := pgx.Identifier{b.schema, "riverslot_ledger"}.Sanitize()
			jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()

			offset, oldStart := offsetForStartIn(cycle, 12*time.Second)
			common := []string{"--task", "transactions", "--rescue-after", "5s", "--per-slot-timeout", "4s", "--sync-timeout", "4s", "--workers", "10"}
			oldFlags := append([]string{"--cycle", cycle.String(), "--trigger-offset", offset.String()}, common...)
			// The old plan's cycle, enqueued as its node's trigger would.
			old := newScheduler(t, b, riverutil.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
				Sync: func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil }})
			oldPlan := taskInfo(t, old, "transactions").PlanID
			insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
			require.NoError(t, err)
			_, err = old.EnqueueCycle(ctx, insertOnly, "transactions", oldStart)
			require.NoError(t, err)
			oldNode := startWorker(t, b.schema, "old", append(oldFlags, "--periodic=false")...)
			finished := func() int64 {
				return b.count(ctx, t, "SELECT count(*) FROM "+led+" WHERE plan = $1 AND cycle_start = $2 AND slot >= 0 AND finished_at IS NOT NULL", oldPlan, oldStart)
			}
			waitFor(t, time.Until(oldStart)+60*time.Second, "the old cycle's first slots to fan out", func() bool { return finished() >= 2 })
			oldNode.stop(t) // a deploy's SIGTERM: River's leader resigns
			fanned := finished()
			require.Less(t, fanned, int64(slots), "stopped with old slots still to run")

			newFlags := append(append([]string{"--cycle", cycle.String(), "--trigger-offset", offset.String()}, common...), tt.flags...)
			startWorker(t, b.schema, "new", newFlags...)
			newTask := riverutil.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
				Sync: func(context.Context, uuid.UUID, *river.Job[syncjob.Args]) error { return nil }}
			switch tt.name {
			case "Seed":
				newTask.Seed = 12345
			case "Phase":
				newTask.Phase = 0.25
			}
			newInfo := taskInfo(t, newScheduler(t, b, newTask), "transactions")
			require.NotEqual(t, oldPlan+offset.String(), newInfo.PlanID+newInfo.Schedule.Offset.String(), "the case: a plan or grid change")

			// The new plan's first cycle that starts after the old one
			// ended, and its end.
			full := newInfo.Schedule.Start(oldStart.Add(cycle))
			if full.Before(oldStart.Add(cycle)) {
				full = newInfo.Schedule.Next(full)
			}
			end := full.Add(newInfo.Plan.Cycle)
			waitFor(t, time.Until(end)+90*time.Second, "the new plan's first full cycle", func() bool {
				return time.Now().After(end.Add(lateness)) &&
					b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE state NOT IN ('completed', 'cancelled', 'discarded') AND scheduled_at < $1", end) == 0
			})
			clean()

			require.EqualValues(t, slots, finished(), "the old cycle ran all its slots under its own plan")
			require.EqualValues(t, newInfo.Plan.Slots, b.count(ctx, t, "SELECT count(*) FROM "+led+" WHERE plan = $1 AND cycle_start = $2 AND slot >= 0 AND finished_at IS NOT NULL",
				newInfo.PlanID, full), "the new plan made and ran its full cycle")

			// The worker's record: when each Sync was called, and for
			// which cycle. A sync of the old cycle that a late fan-out
			// spread (River's leader moved to the new node, so slots
			// started late) may be called inside the new cycle's span.
			type call struct {
				at    time.Time // the sync job's scheduled time
				cycle time.Time
			}
			rows, err := b.pool.Query(ctx, "SELECT account_id, scheduled_at, cycle_start FROM "+pgx.Identifier{b.schema, "synced"}.Sanitize()+" ORDER BY scheduled_at")
			require.NoError(t, err)
			calls := map[uuid.UUID][]call{}
			var (
				id uuid.UUID
				c  call
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &c.at, &c.cycle}, func() error {
				calls[id] = append(calls[id], c)
				return nil
			})
			require.NoError(t, err)
			half := min(newInfo.Plan.Cycle, cycle) / 2
			var (
				closest       time.Duration = time.Hour
				leftToEarlier int
			)
			for _, id := range b.ids {
				cs := calls[id]
				require.NotEmpty(t, cs, "account %s never synced", id)
				var ofFull int
				for i, c := range cs {
					if c.cycle.Equal(full) {
						ofFull++
					}
					if i > 0 {
						gap := c.at.Sub(cs[i-1].at)
						closest = min(closest, gap)
						require.GreaterOrEqual(t, gap, half, "account %s synced twice %s apart: %v", id, gap, cs)
					}
				}
				require.LessOrEqual(t, ofFull, 1, "account %s synced %d times by the new plan's full cycle: %v", id, ofFull, cs)
				if ofFull == 0 {
					// Left to a sync of an earlier cycle less than half a
					// cycle before its time in the full cycle.
					leftToEarlier++
					last := cs[len(cs)-1].at
					require.Greater(t, last, full.Add(-half), "account %s not synced by the full cycle at %s, nor less than half a cycle before it: %v", id, full.Format(time.TimeOnly), cs)
				}
			}
			t.Logf("%s: the old node fanned out %d of %d slots before the new one started; new plan's first full cycle at +%s; %d accounts left to an earlier sync; closest two syncs of one account: %s",
				tt.name, fanned, slots, full.Sub(oldStart), leftToEarlier, closest.Round(time.Millisecond))
		})
	}
}
