package riverslot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/failedslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusRunningCycleBesidePrepared: with the cycle running now failing
// (slot 0's fan-out hit a database error, its per-slot job cancelled) and
// the next cycle bootstrapped ahead of its start by EnqueueCycle, Status
// and StatusFromLedger (the page) describe the running cycle, verdict
// "failed slot 0", and name the prepared one beside it (TaskStatus.Prepared,
// "prepared" in the JSON) instead of describing it. Before the fix they
// described the prepared cycle, all its slots scheduled and on track.
func TestStatusRunningCycleBesidePrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	const cycle = time.Hour // 16 slots of 225 s
	// The cycle running now started a minute ago (on the task's grid):
	// slot 0's fan-out runs at once, the others wait, and the cycle ends
	// in 59 minutes, far from this test.
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

	for _, tt := range []struct {
		name   string
		status func() (*riverslot.TaskStatus, error)
	}{
		{"Status", func() (*riverslot.TaskStatus, error) { return scheduler.Status(ctx, "transactions") }},
		{"StatusFromLedger", func() (*riverslot.TaskStatus, error) {
			return scheduler.StatusFromLedger(ctx, "transactions", time.Time{})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := tt.status()
			require.NoError(t, err)
			c := st.Current
			require.True(t, c.CycleStart.Equal(running), "the running cycle %s, got %s", running, c.CycleStart)
			require.False(t, c.OnTrack)
			require.Equal(t, 0, c.FailedSlot)
			require.True(t, strings.HasPrefix(c.Verdict, "failed slot 0: "), c.Verdict)
			require.Contains(t, c.Verdict, "sync inserts are broken")
			require.NotNil(t, st.Prepared, "the prepared cycle beside it")
			require.Equal(t, riverslot.PreparedCycle{CycleStart: next, Plan: info.PlanID, Slots: info.Plan.Slots}, *st.Prepared)

			body, err := json.Marshal(st)
			require.NoError(t, err)
			var got struct {
				CycleStart string `json:"cycle_start"`
				OnTrack    bool   `json:"on_track"`
				Prepared   *struct {
					CycleStart string `json:"cycle_start"`
					Plan       string `json:"plan"`
					Slots      int    `json:"slots"`
				} `json:"prepared"`
			}
			require.NoError(t, json.Unmarshal(body, &got), string(body))
			require.Equal(t, running.Format(time.RFC3339), got.CycleStart)
			require.False(t, got.OnTrack)
			require.NotNil(t, got.Prepared, string(body))
			require.Equal(t, next.Format(time.RFC3339), got.Prepared.CycleStart)
			require.Equal(t, info.PlanID, got.Prepared.Plan)
			require.Equal(t, info.Plan.Slots, got.Prepared.Slots)
		})
	}

	// An asked cycle is described alone; the prepared one is still whole
	// under StatusAt.
	st, err := scheduler.StatusAt(ctx, "transactions", running)
	require.NoError(t, err)
	require.Nil(t, st.Prepared)
	st, err = scheduler.StatusAt(ctx, "transactions", next)
	require.NoError(t, err)
	require.True(t, st.Current.OnTrack, st.Current.Verdict)
	require.Equal(t, info.Plan.Slots, countState(st.Current, riverslot.SlotScheduled), "every slot of the prepared cycle waits")
}

func countState(c *riverslot.CycleStatus, state string) int {
	n := 0
	for _, p := range c.PerSlot {
		if p.State == state {
			n++
		}
	}
	return n
}
