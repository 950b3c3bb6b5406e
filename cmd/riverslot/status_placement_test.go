package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusPinnedAndOpposite runs riverslot status, as an operator would,
// on a real weighted cycle and on the cycle of the task OppositeOf it,
// each described by its flags alone (no OppositeOf, no Weight): status
// finds the opposite task's cycle under its shifted plan, expects in each
// slot the sync jobs the fan-out inserted there, says on track, and counts
// a sync job completed without calling Sync.
func TestStatusPinnedAndOpposite(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	c := newPinnedCycle(t)
	jobs := pgx.Identifier{c.schema, "river_job"}.Sanitize()

	// One reports sync job ended as stale, as the sync worker counts it in
	// the cycle's ledger row.
	reports, err := c.scheduler.Task("reports")
	require.NoError(t, err)
	riverslottest.CountOutcomes(ctx, t, c.pool, c.schema, "reports", reports.PlanID, c.start, ledger.OutcomeStale, 1, 0)

	perSlot := func(task string) []int64 {
		rows, err := c.pool.Query(ctx, "SELECT (args->>'slot')::int, count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync' AND args->>'task' = $1 GROUP BY 1", task)
		require.NoError(t, err)
		out := make([]int64, pinnedSlots)
		var (
			slot int
			n    int64
		)
		_, err = pgx.ForEachRow(rows, []any{&slot, &n}, func() error {
			out[slot] = n
			return nil
		})
		require.NoError(t, err)
		return out
	}
	status := func(task string, extra ...string) (int, string, string) {
		return runCmd(t, append([]string{"status", "--database-url", riverslottest.DatabaseURL(), "--schema", c.schema,
			"--task", task, "--cycle", pinnedCycleLength.String()}, extra...)...)
	}

	for _, tt := range []struct {
		task  string
		shift int
		stale int64
	}{{"transactions", 0, 0}, {"reports", pinnedSlots / 2, 1}} {
		t.Run(tt.task, func(t *testing.T) {
			info, err := c.scheduler.Task(tt.task)
			require.NoError(t, err)
			code, out, stderr := status(tt.task, "--json")
			require.Equal(t, 0, code, "stderr:\n%s\nstdout:\n%s", stderr, out)
			var st struct {
				CycleStart       string `json:"cycle_start"`
				Plan             string `json:"plan"`
				Placement        string `json:"placement"`
				PinsTask         string `json:"pins_task"`
				PinsShift        int    `json:"pins_shift"`
				AccountsExpected int64  `json:"accounts_expected"`
				SyncSkippedStale *int64 `json:"sync_skipped_stale"`
				Verdict          string `json:"verdict"`
				OffSlots         *int   `json:"off_slots"`
				PerSlot          []struct {
					Slot      int   `json:"slot"`
					Expected  int64 `json:"accounts_expected"`
					Enqueued  int64 `json:"enqueued"`
					PinnedIn  int64 `json:"pinned_in"`
					PinnedOut int64 `json:"pinned_out"`
				} `json:"per_slot"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &st), out)
			require.Equal(t, c.start.Format("2006-01-02T15:04:05Z07:00"), st.CycleStart, "the latest cycle")
			require.Equal(t, info.PlanID, st.Plan, "the plan the app's task really uses")
			require.Equal(t, "pinned", st.Placement)
			require.Equal(t, "transactions", st.PinsTask)
			require.Equal(t, tt.shift, st.PinsShift)
			require.Equal(t, "on track", st.Verdict)
			require.NotNil(t, st.OffSlots)
			require.Zero(t, *st.OffSlots)
			require.NotNil(t, st.SyncSkippedStale)
			require.Equal(t, tt.stale, *st.SyncSkippedStale)
			inserted := perSlot(tt.task)
			require.Len(t, st.PerSlot, pinnedSlots)
			var moved int64
			for _, p := range st.PerSlot {
				require.Equal(t, inserted[p.Slot], p.Expected, "slot %d: expected = sync jobs the fan-out inserted", p.Slot)
				require.Equal(t, inserted[p.Slot], p.Enqueued, "slot %d", p.Slot)
				moved += p.PinnedOut
			}
			require.EqualValues(t, 3201, st.AccountsExpected)
			require.Positive(t, moved, "the cycle's pins moved accounts")

			code, out, stderr = status(tt.task)
			require.Equal(t, 0, code, stderr)
			follows := "its own pins"
			if tt.task != "transactions" {
				follows = "the pins of task transactions"
			}
			require.Contains(t, out, fmt.Sprintf("placement: pinned (%s, shifted by %d slots)", follows, tt.shift))
			require.Contains(t, out, fmt.Sprintf("ended: 0 synced, 0 accounts gone, %d stale, 0 without room with their upstream", tt.stale))
			require.True(t, strings.HasSuffix(out, "verdict: on track\n"), out)
		})
	}
}
