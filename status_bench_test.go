package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/testkit/statusbench"
)

// BenchmarkStatus measures Scheduler.Status on a 24 h task (128 slots) over
// 1,000,000 accounts, halfway through a cycle: 64 slots fanned out (500,000
// completed sync jobs of the cycle, 500,000 of the cycle before, 6,000 of
// them completed without calling Sync), one slot's worth (7,800) still
// scheduled. Both cycles are pinned as a giant's would be: their per-slot
// jobs name the pins, which move slot 5's accounts (about 7,800) to other
// slots. The accounts per slot, and those the pins move, are counted once a
// minute, so the loop measures the calls in between; the first call's time
// is logged. Run it with
//
//	go test -run '^$' -bench Status -benchtime 20x .
func BenchmarkStatus(b *testing.B) {
	ctx := context.Background()
	s := seedStatusBench(b)

	begun := time.Now()
	st, err := s.Status(ctx, "transactions")
	require.NoError(b, err)
	b.Logf("first Status (counts the accounts per slot): %s", time.Since(begun).Round(time.Millisecond))
	require.Equal(b, 64, st.Current.SlotsDone)
	require.EqualValues(b, 7800, st.Current.Pending)
	require.EqualValues(b, 5000, st.Current.SkippedStale)
	require.EqualValues(b, 495000, st.Current.Synced)
	require.True(b, st.Current.LatenessKnown)
	require.Equal(b, riverslot.PlacementPinned, st.Current.Placement)
	require.Positive(b, st.Current.PerSlot[5].PinnedOut)
	require.Zero(b, st.Current.PerSlot[5].Expected, "slot 5's accounts are all pinned away")

	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Status(ctx, "transactions"); err != nil {
			b.Fatal(err)
		}
	}
}

// seedStatusBench builds BenchmarkStatus's schema (statusbench.Seed) and
// returns a configured scheduler over it.
func seedStatusBench(b *testing.B) *riverslot.Scheduler {
	b.Helper()
	pool := riverslottest.Pool(b)
	schema := riverslottest.Schema(context.Background(), b, pool)
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{
		Name: statusbench.Task, Cycle: statusbench.Cycle, Schema: schema, Table: statusbench.Table, Filter: statusbench.Filter, Sync: noopSync,
	}}})
	require.NoError(b, err)
	require.NoError(b, s.Configure(&river.Config{Schema: schema}))
	info, err := s.Task(statusbench.Task)
	require.NoError(b, err)
	statusbench.Seed(b, pool, schema, info.PlanID, info.Schedule.Start(time.Now()), riverslot.MigrateLedger)
	return s
}
