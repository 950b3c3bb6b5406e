package riverslot_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestFirstCycleSaidWhenItApplies: what a task's first cycle does under
// FirstCycle is said by the bootstrap of a cycle already begun with no
// earlier cycle in the ledger, once, at warn; not by Configure at every
// start (it told fleets with years of cycles that "a cycle already begun
// syncs no account"), and not for a cycle that has not begun.
func TestFirstCycleSaidWhenItApplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 20)

	logger, records := riverslottest.RecordingLogger(slog.LevelInfo)
	s, err := riverslot.New(pool, &riverslot.Config{Logger: logger, Tasks: []riverslot.Task{
		{Name: "next", Cycle: time.Hour, Schema: schema, Table: "accounts", FirstCycle: riverslot.FirstCycleNext, Sync: noopSync},
	}})
	require.NoError(t, err)
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, s.Configure(config))
	firstCycleLines := func() []map[string]slog.Value {
		var out []map[string]slog.Value
		records.Each(func(msg string, attrs map[string]slog.Value) {
			if _, ok := attrs["first_cycle"]; ok || strings.Contains(msg, "first cycle") {
				attrs["msg"] = slog.StringValue(msg)
				out = append(out, attrs)
			}
		})
		return out
	}
	require.Empty(t, firstCycleLines(), "Configure says nothing of a first cycle: it cannot know whether the ledger has one")

	config.PeriodicJobs = nil // the test makes its cycles itself
	client, events := riverslottest.StartClient(ctx, t, pool, config)
	info, err := s.Task("next")
	require.NoError(t, err)
	// Under way for more than LateGrace (a slot: a cycle begun less than
	// that ago is no late first cycle, a CI run in the first 3m45s of an
	// hour said nothing): the cycle of two slots ago, this one or the last.
	begun := info.Schedule.Start(time.Now().Add(-2 * info.Plan.SlotDuration))
	bootstrap := func(start time.Time) {
		t.Helper()
		res, err := s.EnqueueCycle(ctx, client, "next", start)
		require.NoError(t, err)
		timeout := time.After(time.Minute)
		for {
			select {
			case ev := <-events:
				if ev.Job.ID == res.Job.ID && ev.Job.FinalizedAt != nil {
					require.Equal(t, "completed", string(ev.Job.State))
					return
				}
			case <-timeout:
				t.Fatalf("the bootstrap of %s did not finish within a minute", start)
			}
		}
	}

	bootstrap(begun)
	said := firstCycleLines()
	require.Len(t, said, 1, "the first cycle, begun before the app: said once")
	require.Equal(t, slog.LevelWarn.String(), said[0]["level"].String())
	require.Equal(t, "next", said[0]["first_cycle"].String())
	require.Contains(t, said[0]["msg"].String(), "starts at the next cycle")

	bootstrap(info.Schedule.Next(time.Now().Add(2 * time.Hour))) // not begun, whatever the clock
	require.Len(t, firstCycleLines(), 1, "the next cycle, not begun yet: nothing more said")
}
