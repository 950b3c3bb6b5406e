package integration

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/riverutil"
	"github.com/riverslot/riverslot/syncjob"
)

// TestReciprocalTasks runs two tasks over the same accounts through a real
// cycle, the second opposite the first, wired as an app wires them: every
// account gets exactly one sync per task, and its two tasks' syncs are at
// least half a cycle minus one slot apart on the cycle circle.
func TestReciprocalTasks(t *testing.T) {
	t.Parallel()

	const (
		accounts = 2000
		cycle    = 40 * time.Second // 8 slots of 5 s
	)
	ctx, b := setup(t, accounts)
	offset, first := offsetForStartIn(cycle, 12*time.Second)
	payments := riverutil.Task{Name: "payments", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts",
		Filter: "active", Queue: "payments", Sync: b.recordSync()}
	reports := payments
	reports.Name, reports.Queue, reports.OppositeOf = "reports", "reports", "payments"
	scheduler := newScheduler(t, b, payments, reports)
	plan := taskInfo(t, scheduler, "reports").Plan
	require.Equal(t, plan.Slots/2, taskInfo(t, scheduler, "reports").Shift)
	startClient(ctx, t, b, scheduler, true, river.QueueDefault, "payments", "reports")

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	waitFor(t, time.Until(first.Add(cycle))+60*time.Second, "both tasks' cycles to complete", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'cycle_start')::timestamptz = $2",
			syncjob.Kind, first) == 2*accounts
	})

	rows, err := b.pool.Query(ctx, "SELECT args->>'task', (args->>'account_id')::uuid, scheduled_at FROM "+jobs+
		" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, first)
	require.NoError(t, err)
	at := map[string]map[uuid.UUID][]time.Time{"payments": {}, "reports": {}}
	var (
		task string
		id   uuid.UUID
		when time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&task, &id, &when}, func() error {
		at[task][id] = append(at[task][id], when)
		return nil
	})
	require.NoError(t, err)

	closest := cycle
	for _, id := range b.ids {
		require.Len(t, at["payments"][id], 1, "account %s: one payments sync", id)
		require.Len(t, at["reports"][id], 1, "account %s: one reports sync", id)
		d := at["reports"][id][0].Sub(at["payments"][id][0])
		d = ((d % cycle) + cycle) % cycle // position on the cycle circle
		d = min(d, cycle-d)
		closest = min(closest, d)
		require.GreaterOrEqual(t, d, cycle/2-plan.SlotDuration, "account %s: the two tasks %s apart on the circle", id, d)
	}
	t.Logf("2 tasks opposite each other, %d accounts, cycle %s (%d slots of %s): closest two syncs of one account %s on the circle (at least %s)",
		accounts, cycle, plan.Slots, plan.SlotDuration, closest.Round(time.Millisecond), cycle/2-plan.SlotDuration)
}
