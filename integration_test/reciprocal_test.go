package integration

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// TestReciprocalTasks runs two tasks over the same accounts through a real
// cycle, the second opposite the first, wired as an app wires them. It
// checks what OppositeOf promises, in terms that a loaded machine does not
// change:
//
//   - every account gets at most one sync per task, the first task's in the
//     account's hash slot and the second's half the slots later (the slot
//     fields of their args);
//   - a sync at its regular time is inside its slot, so an account's two
//     regular syncs are at least half a cycle minus one slot apart on the
//     cycle circle;
//   - a late catch-up (its fan-out ran more than LateGrace late: after an
//     outage, or on a starved machine) is spread after its slot, which the
//     promise does not cover, but only when its fan-out ran after the slot,
//     and never later than half a cycle after the slot's start; an account
//     has no sync of a task only when that fan-out ran after the slot (too
//     late to place it: the next cycle covers it).
//
// One fan-out is made late by construction (the second task's slot 6 runs
// 6.5 s into its 5 s slot, as on a loaded machine), so the late path is
// always taken and left out of the distance, rather than only on bad days.
func TestReciprocalTasks(t *testing.T) {
	parallel(t)

	const (
		accounts  = 2000
		cycle     = 40 * time.Second // 8 slots of 5 s
		lateSlot  = 6
		lateStart = 6500 * time.Millisecond // into the slot: LateGrace (5 s) past its first 1.5 s of targets
	)
	ctx, b := setup(t, accounts)
	offset, first := offsetForStartIn(cycle, 12*time.Second)
	payments := riverslot.Task{Name: "payments", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts",
		Filter: "active", Queue: "payments", Sync: b.recordSync()}
	reports := payments
	reports.Name, reports.Queue, reports.OppositeOf = "reports", "reports", "payments"
	scheduler := newScheduler(t, b, payments, reports)
	plan := taskInfo(t, scheduler, "reports").Plan
	require.Equal(t, plan.Slots/2, taskInfo(t, scheduler, "reports").Shift)
	startClient(ctx, t, b, scheduler, true, river.QueueDefault, "payments", "reports")

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	inCycle := "(args->>'cycle_start')::timestamptz = $2"
	waitFor(t, time.Until(first.Add(20*time.Second)), "the first cycle's per-slot jobs of reports", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND args->>'task' = 'reports' AND "+inCycle, perslot.Kind, first) == int64(plan.Slots)
	})
	lateAt := plan.SlotStart(first, lateSlot).Add(lateStart)
	tag, err := b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = $3 WHERE kind = $1 AND args->>'task' = 'reports' AND "+inCycle+
		" AND (args->>'slot')::int = $4 AND state = 'scheduled'", perslot.Kind, first, lateAt, lateSlot)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the per-slot job of reports' slot %d, not yet run", lateSlot)

	waitFor(t, time.Until(first.Add(cycle))+60*time.Second, "both tasks' fan-outs and syncs of the cycle to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND "+inCycle, perslot.Kind, first) == int64(2*plan.Slots) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state <> 'completed' AND "+inCycle, syncjob.Kind, first) == 0
	})

	// When each fan-out of the cycle started.
	rows, err := b.pool.Query(ctx, "SELECT args->>'task', (args->>'slot')::int, attempted_at FROM "+jobs+" WHERE kind = $1 AND "+inCycle, perslot.Kind, first)
	require.NoError(t, err)
	fanOut := map[string]map[int]time.Time{"payments": {}, "reports": {}}
	var (
		task    string
		slot    int
		started time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&task, &slot, &started}, func() error {
		fanOut[task][slot] = started
		return nil
	})
	require.NoError(t, err)

	type sync struct {
		slot               int
		scheduled, created time.Time
	}
	rows, err = b.pool.Query(ctx, "SELECT args->>'task', (args->>'account_id')::uuid, (args->>'slot')::int, scheduled_at, created_at FROM "+jobs+
		" WHERE kind = $1 AND "+inCycle, syncjob.Kind, first)
	require.NoError(t, err)
	at := map[string]map[uuid.UUID][]sync{"payments": {}, "reports": {}}
	var (
		id uuid.UUID
		s  sync
	)
	_, err = pgx.ForEachRow(rows, []any{&task, &id, &s.slot, &s.scheduled, &s.created}, func() error {
		require.Contains(t, at, task)
		at[task][id] = append(at[task][id], s)
		return nil
	})
	require.NoError(t, err)

	// Slots from the ids and slot windows from the cycle start alone.
	hashSlot := func(id uuid.UUID) int { return int(id[15]) / (256 / plan.Slots) }
	window := func(slot int) (time.Time, time.Time) {
		start := first.Add(time.Duration(slot) * cycle / time.Duration(plan.Slots))
		return start, start.Add(cycle / time.Duration(plan.Slots))
	}
	closest, regular, late, skipped, heldBack := cycle, 0, 0, 0, 0
	for _, id := range b.ids {
		want := map[string]int{"payments": hashSlot(id), "reports": (hashSlot(id) + plan.Slots/2) % plan.Slots}
		onTime := true
		for _, task := range []string{"payments", "reports"} {
			start, end := window(want[task])
			syncs := at[task][id]
			require.LessOrEqual(t, len(syncs), 1, "account %s: %d %s syncs in one cycle", id, len(syncs), task)
			if len(syncs) == 0 {
				// Skipped: only a fan-out that ran after the slot leaves
				// an account out (too late to place it in this cycle).
				onTime = false
				skipped++
				require.True(t, fanOut[task][want[task]].After(end), "account %s: no %s sync, though slot %d's fan-out started at %s, before the slot ended at %s",
					id, task, want[task], fanOut[task][want[task]], end)
				if task == "reports" && want[task] == lateSlot {
					heldBack++
				}
				continue
			}
			s := syncs[0]
			require.Equal(t, want[task], s.slot, "account %s: %s in slot %d, not %d (payments in the hash slot, reports half the slots later)", id, task, s.slot, want[task])
			require.False(t, s.scheduled.Before(start), "account %s: %s scheduled at %s, before its slot %d starts at %s", id, task, s.scheduled, s.slot, start)
			if s.scheduled.Before(end) {
				continue
			}
			// A late catch-up: its fan-out ran after the slot had ended
			// (the job is inserted by it), and it is cut at half a cycle
			// after the slot's start.
			onTime = false
			late++
			if task == "reports" && s.slot == lateSlot {
				heldBack++
			}
			require.False(t, s.created.Before(end), "account %s: %s scheduled after its slot (%s) by a fan-out that ran in time (%s)", id, task, s.scheduled, s.created)
			require.False(t, s.scheduled.After(start.Add(cycle/2)), "account %s: %s caught up at %s, more than half a cycle after its slot's start %s", id, task, s.scheduled, start)
		}
		if !onTime {
			continue
		}
		regular++
		d := at["reports"][id][0].scheduled.Sub(at["payments"][id][0].scheduled)
		d = ((d % cycle) + cycle) % cycle // position on the cycle circle
		d = min(d, cycle-d)
		closest = min(closest, d)
		require.GreaterOrEqual(t, d, cycle/2-plan.SlotDuration, "account %s: the two tasks %s apart on the circle", id, d)
	}
	t.Logf("2 tasks opposite each other, %d accounts, cycle %s (%d slots of %s): %d accounts with both syncs at their regular time, closest %s apart on the circle (at least %s); left out: %d late catch-up syncs and %d skipped, %d of them in reports' slot %d, whose fan-out was held until %s into the slot",
		accounts, cycle, plan.Slots, plan.SlotDuration, regular, closest.Round(time.Millisecond), cycle/2-plan.SlotDuration, late, skipped, heldBack, lateSlot, lateStart)
	require.Positive(t, heldBack, "the fan-out held past LateGrace spread or skipped none of its accounts")
	require.Positive(t, regular, "no account had both syncs at their regular time: the distance check says nothing")
}
