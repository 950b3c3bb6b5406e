package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/failedslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusRunningCycleFailsBesidePrepared: with the cycle running now
// failing (slot 0's fan-out hit a database error, its per-slot job
// cancelled) and the next cycle bootstrapped ahead of its start by
// EnqueueCycle, riverslot status (--task alone, its view and --json)
// describes the running cycle and exits 1 on its "failed slot 0", naming
// the prepared cycle beside it. Before the fix it described the prepared
// cycle, on track, and exited 0.
func TestStatusRunningCycleFailsBesidePrepared(t *testing.T) {
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
		Queue: "parked", ControlQueue: river.QueueDefault,
		Sync: func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil },
	}}})
	require.NoError(t, err)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	next := running.Add(cycle)
	failedslot.Bootstrap(ctx, t, pool, schema, scheduler, running, next)

	args := []string{"status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "transactions"}
	code, stdout, stderr := runCmd(t, append(args, "--json")...)
	require.Equal(t, 1, code, "the running cycle fails: stdout:\n%s\nstderr:\n%s", stdout, stderr)
	var st struct {
		CycleStart time.Time `json:"cycle_start"`
		Plan       string    `json:"plan"`
		Verdict    string    `json:"verdict"`
		OnTrack    bool      `json:"on_track"`
		Prepared   *struct {
			CycleStart time.Time `json:"cycle_start"`
			Plan       string    `json:"plan"`
			Slots      int       `json:"slots"`
		} `json:"prepared"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.True(t, running.Equal(st.CycleStart), "the running cycle %s, got %s", running, st.CycleStart)
	require.Equal(t, info.PlanID, st.Plan)
	require.False(t, st.OnTrack)
	require.True(t, strings.HasPrefix(st.Verdict, "failed slot 0: "), st.Verdict)
	require.NotNil(t, st.Prepared, "the prepared cycle beside it: %s", stdout)
	require.True(t, next.Equal(st.Prepared.CycleStart), "prepared %s, want %s", st.Prepared.CycleStart, next)
	require.Equal(t, info.PlanID, st.Prepared.Plan)
	require.Equal(t, info.Plan.Slots, st.Prepared.Slots)

	code, stdout, stderr = runCmd(t, args...)
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "task transactions, cycle "+running.Format(time.RFC3339)+": 16 slots, plan "+info.PlanID+"\n")
	require.Contains(t, stdout, "prepared ahead: cycle "+next.Format(time.RFC3339)+", 16 slots, plan "+info.PlanID)
	require.Contains(t, stdout, "verdict: failed slot 0: ")
}
