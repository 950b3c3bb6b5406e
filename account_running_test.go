package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/failedslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestAccountRunningCycleBesidePrepared: with the cycle running now
// failing at slot 0 and the next cycle bootstrapped ahead of its start by
// EnqueueCycle (failedslot.Bootstrap), Account describes an account of slot 0
// in the running cycle, as Status does: its cycle, its sync there (from
// the ledger: no sync job of it was inserted) and no cycle before it.
// Before the fix it described the prepared cycle and gave the running one
// as the previous.
func TestAccountRunningCycleBesidePrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	const cycle = time.Hour // 16 slots of 225 s
	running := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: schema, Table: "accounts",
		Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync,
	}}})
	require.NoError(t, err)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	next := running.Add(cycle)
	failedslot.Bootstrap(ctx, t, pool, schema, scheduler, running, next)
	var id uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+pgx.Identifier{schema, "accounts"}.Sanitize()+" LIMIT 1").Scan(&id))

	st, err := scheduler.Status(ctx, "transactions")
	require.NoError(t, err)
	require.True(t, st.Current.CycleStart.Equal(running), "Status describes the running cycle")

	a, err := scheduler.Account(ctx, "transactions", id)
	require.NoError(t, err)
	require.True(t, a.CycleStart.Equal(running), "the running cycle %s, got %s", running, a.CycleStart)
	require.Equal(t, info.PlanID, a.Plan)
	require.Equal(t, 0, a.Slot)
	require.NotNil(t, a.Current)
	require.True(t, a.Current.CycleStart.Equal(running), "its sync in the running cycle %s, got %s", running, a.Current.CycleStart)
	require.Equal(t, "ledger", a.Current.Source, "no sync job: every insert failed")
	require.Equal(t, 0, a.Current.Slot)
	require.NotEqual(t, riverslot.SlotDone, a.Current.State, "slot 0's fan-out failed: %+v", *a.Current)
	require.Nil(t, a.Previous, "no cycle before the running one")
	require.Len(t, a.NextSyncs, 3)
}
