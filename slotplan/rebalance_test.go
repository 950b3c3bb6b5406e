package slotplan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// owned returns how many buckets each shard owns in m.
func owned(m ShardMap) map[string]int {
	out := map[string]int{}
	for _, r := range m.Ranges {
		out[r.Shard] += r.Hi - r.Lo + 1
	}
	return out
}

// randomMap returns a map of the shards over plan's slots, cut at random
// slot bounds, a shard owning one range or several (or none, when names
// are more than the cuts allow).
func randomMap(rng *rand.Rand, plan Plan, shards []string, pieces int) ShardMap {
	width := plan.BucketsPerSlot * (BucketsTwoByte / plan.Buckets) // one slot, in two-byte buckets
	slots := BucketsTwoByte / width
	cuts := map[int]bool{}
	for len(cuts) < min(pieces-1, slots-1) {
		cuts[1+rng.IntN(slots-1)] = true
	}
	bounds := []int{0}
	for c := range cuts {
		bounds = append(bounds, c)
	}
	slices.Sort(bounds)
	bounds = append(bounds, slots)
	var m ShardMap
	m.Version = 3
	for i := 0; i+1 < len(bounds); i++ {
		name := shards[i%len(shards)]
		if i >= len(shards) {
			name = shards[rng.IntN(len(shards))]
		}
		m.Ranges = append(m.Ranges, ShardRange{Shard: name, Lo: bounds[i] * width, Hi: bounds[i+1]*width - 1})
	}
	if err := m.Validate(); err != nil {
		panic(err)
	}
	// Neighbouring ranges of one shard as one, as Move leaves them.
	merged, err := m.Move(m.Ranges[0].Lo, m.Ranges[0].Hi, m.Ranges[0].Shard)
	if err != nil {
		panic(err)
	}
	merged.Version = m.Version
	return merged
}

// TestRebalance: for several shard counts, weights (a new shard, a drained
// one) and plans, the rebalanced map gives each shard its weighted share
// of the 65,536 buckets within one slot's buckets, every bound on a slot
// bound; it moves only the buckets of shards above their share, and only
// their excess (the fewest any even map can move); the moves, applied
// with Move, turn the old map into the new one; and the new map is
// already even (rebalancing it again changes nothing).
func TestRebalance(t *testing.T) {
	t.Parallel()
	day, err := NewBuckets(24*time.Hour, BucketsTwoByte) // 1,024 slots of 64 buckets
	require.NoError(t, err)
	small, err := New(24 * time.Second) // 8 slots of 8,192 buckets
	require.NoError(t, err)
	mid, err := New(24 * time.Hour) // 128 slots of 512 buckets
	require.NoError(t, err)

	for _, tt := range []struct {
		name    string
		plan    Plan
		shards  []string // the map's shards
		weights map[string]float64
	}{
		{"ThreeEven", day, []string{"a", "b", "c"}, map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"TwoWeighted", day, []string{"a", "b"}, map[string]float64{"a": 3, "b": 1}},
		{"FourAddOne", day, []string{"a", "b", "c", "d"}, map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}},
		{"FiveUneven", mid, []string{"a", "b", "c", "d", "e"}, map[string]float64{"a": 1, "b": 2, "c": 0.5, "d": 4, "e": 1.5}},
		{"DrainOne", mid, []string{"a", "b", "c"}, map[string]float64{"a": 1, "b": 0, "c": 2}},
		{"SevenOnEightSlots", small, []string{"a", "b", "c"}, map[string]float64{"a": 1, "b": 1, "c": 1, "x": 1, "y": 1, "z": 1, "w": 1}},
		{"TenShards", day, []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}, map[string]float64{"s0": 1, "s1": 1, "s2": 1, "s3": 1, "s4": 1, "s5": 1, "s6": 1, "s7": 1, "s8": 1, "s9": 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(39, uint64(len(tt.name))))
			width := tt.plan.BucketsPerSlot * (BucketsTwoByte / tt.plan.Buckets)
			total := 0.0
			for _, w := range tt.weights {
				total += w
			}
			for round := range 20 {
				old := randomMap(rng, tt.plan, tt.shards, len(tt.shards)+round%4)
				next, moves, err := old.Rebalance(tt.plan, tt.weights)
				require.NoError(t, err, "round %d, %s", round, old)
				require.NoError(t, next.Validate())
				require.NoError(t, next.Aligned(tt.plan), "every bound on a slot bound")

				before, after := owned(old), owned(next)
				minMoved := 0
				for name, w := range tt.weights {
					share := BucketsTwoByte * w / total
					require.Less(t, math.Abs(float64(after[name])-share), float64(width),
						"round %d: shard %s owns %d buckets, its share is %.1f (one slot is %d): %s -> %s", round, name, after[name], share, width, old, next)
					// No map within a slot of every share can move fewer
					// than each shard's excess over its rounded-up share.
					if excess := before[name] - int(math.Ceil(share/float64(width)))*width; excess > 0 {
						minMoved += excess
					}
				}
				moved := 0
				applied := old
				for _, mv := range moves {
					require.NotEqual(t, mv.From, mv.To)
					require.Zero(t, mv.Lo%width)
					require.Zero(t, (mv.Hi+1)%width)
					for b := mv.Lo; b <= mv.Hi; b += width {
						require.Equal(t, mv.From, old.Owner(b), "move %+v: from its owner", mv)
					}
					// Only a shard above its share gives, never one below.
					require.Greater(t, before[mv.From], after[mv.From], "move %+v from a shard that does not shrink", mv)
					moved += mv.Hi - mv.Lo + 1
					applied, err = applied.Move(mv.Lo, mv.Hi, mv.To)
					require.NoError(t, err)
				}
				require.Equal(t, next.Ranges, applied.Ranges, "the moves turn the old map into the new one")
				require.Equal(t, old.Version+1, next.Version)
				given := 0
				for name := range tt.weights {
					if d := before[name] - after[name]; d > 0 {
						given += d
					}
				}
				require.Equal(t, given, moved, "only the excess moves: %s -> %s", old, next)
				require.LessOrEqual(t, moved, minMoved+len(tt.weights)*width, "round %d: moved %d, at least %d needed", round, moved, minMoved)

				again, more, err := next.Rebalance(tt.plan, tt.weights)
				require.NoError(t, err)
				require.Empty(t, more, "an even map stays")
				require.Equal(t, next, again)
			}
		})
	}
}

// TestRebalanceFewestFirst: the fewest buckets move, even where a whole
// range per shard would need more: shards whose ranges meet move their
// shared bound, and a new shard's pieces join where two givers meet.
func TestRebalanceFewestFirst(t *testing.T) {
	t.Parallel()
	plan, err := New(24 * time.Second) // 8 slots of 8,192 buckets
	require.NoError(t, err)
	const slot = 8192
	slots := func(m ShardMap, shard string) int { return owned(m)[shard] / slot }
	ranges := func(m ShardMap, shard string) int {
		n := 0
		for _, r := range m.Ranges {
			if r.Shard == shard {
				n++
			}
		}
		return n
	}

	// a 5 slots, b 3: even (weights 1, 1) is 4 and 4: the bound between
	// them moves one slot.
	m := ShardMap{Version: 1, Ranges: []ShardRange{{Shard: "a", Lo: 0, Hi: 5*slot - 1}, {Shard: "b", Lo: 5 * slot, Hi: 65535}}}
	next, moves, err := m.Rebalance(plan, map[string]float64{"a": 1, "b": 1})
	require.NoError(t, err)
	require.Equal(t, "v2 a:0-32767 b:32768-65535", next.String())
	require.Equal(t, []ShardMove{{Lo: 4 * slot, Hi: 5*slot - 1, From: "a", To: "b"}}, moves)

	// a 4, b 3, c 1: 8/3 slots each, so two get 3 and one 2: a and b hold
	// 3 or more, so c gets 2: one slot moves, a's to c (through b, two
	// would move).
	m = ShardMap{Version: 1, Ranges: []ShardRange{
		{Shard: "a", Lo: 0, Hi: 4*slot - 1}, {Shard: "b", Lo: 4 * slot, Hi: 7*slot - 1}, {Shard: "c", Lo: 7 * slot, Hi: 65535},
	}}
	next, moves, err = m.Rebalance(plan, map[string]float64{"a": 1, "b": 1, "c": 1})
	require.NoError(t, err)
	require.Equal(t, []int{3, 3, 2}, []int{slots(next, "a"), slots(next, "b"), slots(next, "c")})
	require.Len(t, moves, 1)
	require.Equal(t, "a", moves[0].From)
	require.Equal(t, "c", moves[0].To)
	require.Equal(t, slot-1, moves[0].Hi-moves[0].Lo)

	// a 3, b 3, c 2, and d of weight 2 (of 5) joins: 3.2 slots for d,
	// 1.6 for each other, rounded up for a and b (which hold more): d
	// takes a slot from each of a, b and c, a's and b's as one range
	// where they meet.
	m = ShardMap{Version: 1, Ranges: []ShardRange{
		{Shard: "a", Lo: 0, Hi: 3*slot - 1}, {Shard: "b", Lo: 3 * slot, Hi: 6*slot - 1}, {Shard: "c", Lo: 6 * slot, Hi: 65535},
	}}
	next, moves, err = m.Rebalance(plan, map[string]float64{"a": 1, "b": 1, "c": 1, "d": 2})
	require.NoError(t, err)
	require.Equal(t, []int{2, 2, 1, 3}, []int{slots(next, "a"), slots(next, "b"), slots(next, "c"), slots(next, "d")})
	require.Equal(t, 1, ranges(next, "a"))
	require.Equal(t, 1, ranges(next, "b"))
	require.LessOrEqual(t, ranges(next, "d"), 2)
	require.Contains(t, next.Ranges, ShardRange{Shard: "d", Lo: 2 * slot, Hi: 4*slot - 1})
	moved := 0
	for _, mv := range moves {
		require.Equal(t, "d", mv.To)
		moved += mv.Hi - mv.Lo + 1
	}
	require.Equal(t, 3*slot, moved)
}

// TestRebalanceRefuses: a weight missing for a shard of the map, a
// negative one, all zero, and a map off the plan's slots are refused,
// saying how to fix them.
func TestRebalanceRefuses(t *testing.T) {
	t.Parallel()
	plan, err := New(24 * time.Second)
	require.NoError(t, err)
	m := ShardMap{Version: 1, Ranges: []ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	for _, tt := range []struct {
		m       ShardMap
		weights map[string]float64
		want    string
	}{
		{m, map[string]float64{"a": 1}, `no weight for shard "b" of the map; give it one (0 moves all its buckets away)`},
		{m, map[string]float64{"a": 1, "b": -1}, `weight -1 of shard "b" must be a number of 0 or more`},
		{m, map[string]float64{"a": 0, "b": 0}, "every weight is 0"},
		{m, map[string]float64{"a": 1, "b": 1, "c d": 1}, `shard name "c d"`},
		{ShardMap{Ranges: []ShardRange{{Shard: "a", Lo: 0, Hi: 4095}, {Shard: "b", Lo: 4096, Hi: 65535}}}, map[string]float64{"a": 1, "b": 1}, "move its bound 4096 to 0 or 8192"},
	} {
		_, _, err := tt.m.Rebalance(plan, tt.weights)
		require.ErrorIs(t, err, ErrShardMap)
		require.ErrorContains(t, err, tt.want, fmt.Sprint(tt.weights))
	}
}
