package riverslot_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestConfigureSaysWhatTheFirstCycleDoes: Configure logs, once per task
// and before any job runs, what the task's first cycle will do under its
// FirstCycle, so that a first deploy mid-cycle is no surprise.
func TestConfigureSaysWhatTheFirstCycleDoes(t *testing.T) {
	t.Parallel()

	logger, records := riverslottest.RecordingLogger(slog.LevelInfo)
	s, err := riverslot.New(riverslottest.Pool(t), &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{
		{Name: "late", Cycle: time.Hour, Table: "accounts", Sync: noopSync},
		{Name: "all", Cycle: time.Hour, Table: "accounts", FirstCycle: riverslot.FirstCycleAll, Sync: noopSync},
		{Name: "next", Cycle: time.Hour, Table: "accounts", FirstCycle: riverslot.FirstCycleNext, Sync: noopSync},
	}})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{}))

	said := map[string]string{}
	records.Each(func(msg string, attrs map[string]slog.Value) {
		task, ok := attrs["task"]
		if _, policy := attrs["first_cycle"]; ok && policy && strings.Contains(msg, "if the ledger records no earlier cycle") {
			require.NotContains(t, said, task.String(), "said once per task")
			said[task.String()] = msg + " first_cycle=" + attrs["first_cycle"].String()
		}
	})
	require.Len(t, said, 3)
	require.Contains(t, said["late"], "spread within half a cycle")
	require.Contains(t, said["late"], "first_cycle=late")
	require.Contains(t, said["all"], "syncs every account")
	require.Contains(t, said["all"], "first_cycle=all")
	require.Contains(t, said["next"], "starts at the next cycle")
	require.Contains(t, said["next"], "first_cycle=next")
}
