package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusPlanAndMonthlyFlags: riverslot status with only --task shows
// the cycle running now under the plan the app's task has (a one-hour
// cycle of 16 slots, its seed), as its cycle's jobs and the ledger record
// it, not one of the flags' defaults (120 s), and names beside it the cycle
// prepared an hour ahead, under the same plan; the task flags status
// shares with worker take --cycle monthly with --location, and refuse what
// does not apply to it.
func TestStatusPlanAndMonthlyFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 50)
	sync := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "hourly", Cycle: time.Hour, TriggerOffset: 7 * time.Minute, Seed: 42, Schema: schema, Table: "accounts", Filter: "", Sync: sync,
	}}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	info, err := scheduler.Task("hourly")
	require.NoError(t, err)
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 200 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycle itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	// The cycle running now, and one prepared an hour ahead.
	running := info.Schedule.Start(time.Now())
	start := info.Schedule.Next(time.Now().Add(time.Hour))
	for _, c := range []time.Time{running, start} {
		_, err = scheduler.EnqueueCycle(ctx, client, "hourly", c)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "both cycles' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == 2*int64(info.Plan.Slots)
	})

	var st struct {
		CycleStart time.Time `json:"cycle_start"`
		Plan       string    `json:"plan"`
		Slots      int       `json:"slots"`
		Prepared   *struct {
			CycleStart time.Time `json:"cycle_start"`
			Plan       string    `json:"plan"`
			Slots      int       `json:"slots"`
		} `json:"prepared"`
	}
	code, stdout, stderr := runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "hourly", "--filter", "", "--json")
	require.Contains(t, []int{0, 1}, code, "stderr:\n%s", stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.True(t, running.Equal(st.CycleStart), "cycle_start %s, want the running cycle %s", st.CycleStart, running)
	require.Equal(t, info.PlanID, st.Plan, "the app's plan")
	require.Equal(t, info.Plan.Slots, st.Slots)
	require.NotNil(t, st.Prepared, "the cycle prepared ahead, beside the running one: %s", stdout)
	require.True(t, start.Equal(st.Prepared.CycleStart), "prepared %s, want %s", st.Prepared.CycleStart, start)
	require.Equal(t, info.PlanID, st.Prepared.Plan, "the app's plan")
	require.Equal(t, info.Plan.Slots, st.Prepared.Slots)

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"LocationWithoutMonthly", []string{"--location", "Europe/Berlin"}, "--location names the time zone of a calendar-month task: give it with --cycle monthly"},
		{"BadLocation", []string{"--cycle", "monthly", "--location", "Mars/Olympus"}, `--location must be an IANA time zone such as Europe/London or UTC, got "Mars/Olympus"`},
		{"MonthlyWithOffset", []string{"--cycle", "monthly", "--trigger-offset", "1h"}, "--trigger-offset does not apply to --cycle monthly"},
		{"MonthlyWithOneByteBuckets", []string{"--cycle", "monthly", "--buckets", "256"}, "--buckets does not apply to --cycle monthly"},
		{"BadCycle", []string{"--cycle", "weekly"}, `"weekly" is not a duration; write a number with a unit of s, m or h, e.g. 24h, 90m, 120s, or monthly`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, append([]string{"status", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--task", "hourly"}, tt.args...)...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tt.want)
		})
	}
}
