package inspect

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
)

// The slot line names each run of slots by the shard serving it: "?" where
// no answering shard serves it, "a+b" where two do; a shard that did not
// answer is a line of dashes and its error on one line.
func TestWriteShardsStatus(t *testing.T) {
	t.Parallel()

	slots := func(states ...string) *riverslot.CycleStatus {
		c := &riverslot.CycleStatus{Slots: len(states), Verdict: "on track"}
		for i, s := range states {
			c.PerSlot = append(c.PerSlot, riverslot.SlotStatus{Slot: i, State: s})
		}
		return c
	}
	done, away := riverslot.SlotDone, riverslot.SlotElsewhere
	st := &riverslot.ShardsStatus{
		Task: "transactions", CycleStart: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Verdict: "conflict",
		Shards: []riverslot.ShardCycle{
			{Shard: "a", Status: slots(done, done, away, done, away, away)},
			{Shard: "b", Status: slots(away, away, away, done, away, done)},
			{Shard: "c", Error: "cannot reach\n  its database"},
		},
	}
	var sb strings.Builder
	WriteShardsStatus(&sb, st)
	out := sb.String()
	require.Contains(t, out, "slots by shard: 0-1 a, 2 ?, 3 a+b, 4 ?, 5 b\n")
	require.Contains(t, out, "cannot reach its database\n")
	require.Contains(t, out, "verdict: conflict\n")
	require.False(t, ShardsFine(st))
}
