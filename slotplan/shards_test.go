package slotplan

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func threeShards() ShardMap {
	return ShardMap{Version: 1, Ranges: []ShardRange{
		{Shard: "s3", Lo: 40960, Hi: 65535}, {Shard: "s1", Lo: 0, Hi: 24575}, {Shard: "s2", Lo: 24576, Hi: 40959},
	}}
}

// TestShardMapValidate: a map covers the 65,536 buckets once; a gap, an
// overlap, a range out of bounds and a bad name are refused, naming the
// buckets and the fix.
func TestShardMapValidate(t *testing.T) {
	t.Parallel()
	m := threeShards()
	require.NoError(t, m.Validate())
	require.Equal(t, "s1", m.Ranges[0].Shard, "sorted by Lo")
	require.Equal(t, []string{"s1", "s2", "s3"}, m.Shards())
	require.Equal(t, "v1 s1:0-24575 s2:24576-40959 s3:40960-65535", m.String())
	for _, tt := range []struct {
		ranges []ShardRange
		want   string
	}{
		{nil, "no ranges"},
		{[]ShardRange{{Shard: "a", Lo: 0, Hi: 100}, {Shard: "b", Lo: 102, Hi: 65535}}, "buckets 101-101 belong to no shard"},
		{[]ShardRange{{Shard: "a", Lo: 0, Hi: 100}, {Shard: "b", Lo: 100, Hi: 65535}}, "buckets 100-100 belong to two shards"},
		{[]ShardRange{{Shard: "a", Lo: 0, Hi: 65534}}, "buckets 65535-65535 belong to no shard"},
		{[]ShardRange{{Shard: "a", Lo: 0, Hi: 65536}}, "not within 0-65535"},
		{[]ShardRange{{Shard: "a b", Lo: 0, Hi: 65535}}, `shard name "a b"`},
	} {
		m := ShardMap{Ranges: tt.ranges}
		err := m.Validate()
		require.ErrorIs(t, err, ErrShardMap)
		require.ErrorContains(t, err, tt.want)
	}
}

// TestShardMapOwners: every account belongs to the shard owning its
// two-byte bucket; a slot to the shard owning its first bucket, so with
// ranges on slot boundaries every account of a slot is its shard's, and
// each slot has exactly one shard whatever the ranges.
func TestShardMapOwners(t *testing.T) {
	t.Parallel()
	m := threeShards()
	require.NoError(t, m.Validate())
	plan, err := New(24 * time.Second) // 8 slots of 32 one-byte buckets: 8,192 two-byte each
	require.NoError(t, err)
	require.NoError(t, m.Aligned(plan))
	require.Equal(t, []int{0, 1, 2}, m.SlotsOf(plan, 0, "s1"))
	require.Equal(t, []int{3, 4}, m.SlotsOf(plan, 0, "s2"))
	require.Equal(t, []int{5, 6, 7}, m.SlotsOf(plan, 0, "s3"))
	// Shifted by 2 slots (Phase 1/4): slot k serves bucket slot k-2.
	require.Equal(t, []int{2, 3, 4}, m.SlotsOf(plan, 2, "s1"))
	rng := rand.New(rand.NewPCG(1, 1))
	for range 5000 {
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.UintN(256))
		}
		b := int(id[15])<<8 | int(id[14])
		want := "s1"
		switch {
		case b >= 40960:
			want = "s3"
		case b >= 24576:
			want = "s2"
		}
		require.Equal(t, want, m.OwnerOf(id), "bucket %d", b)
		// The slot serving it belongs to its shard (aligned ranges).
		require.Equal(t, want, m.SlotOwner(plan, 0, plan.SlotOf(id)))
	}

	// Not aligned to the 24 s plan's slots (8 of 8,192): refused with the
	// nearest bounds, and still one shard per slot.
	odd := ShardMap{Ranges: []ShardRange{{Shard: "a", Lo: 0, Hi: 9999}, {Shard: "b", Lo: 10000, Hi: 65535}}}
	require.NoError(t, odd.Validate())
	err = odd.Aligned(plan)
	require.ErrorContains(t, err, "move its bound 10000 to 8192 or 16384")
	n := len(odd.SlotsOf(plan, 0, "a")) + len(odd.SlotsOf(plan, 0, "b"))
	require.Equal(t, plan.Slots, n)
	// 65,536 buckets, 24 h: 1,024 slots of 64 buckets.
	fine, err := NewBuckets(24*time.Hour, BucketsTwoByte)
	require.NoError(t, err)
	require.ErrorContains(t, odd.Aligned(fine), "move its bound 10000 to 9984 or 10048")
}

// TestShardMapMove: moving a range splits and merges ranges, bumps the
// version, and keeps the map whole.
func TestShardMapMove(t *testing.T) {
	t.Parallel()
	m := threeShards()
	require.NoError(t, m.Validate())
	next, err := m.Move(16384, 24575, "s2")
	require.NoError(t, err)
	require.EqualValues(t, 2, next.Version)
	require.Equal(t, "v2 s1:0-16383 s2:16384-40959 s3:40960-65535", next.String(), "s2's ranges merged")
	// A new shard takes a range out of the middle of another's.
	next, err = next.Move(50000, 50999, "s4")
	require.NoError(t, err)
	require.Equal(t, "v3 s1:0-16383 s2:16384-40959 s3:40960-49999,51000-65535 s4:50000-50999", next.String())
	require.Equal(t, "s4", next.Owner(50500))
	require.Equal(t, "s3", next.Owner(51000))
	_, err = m.Move(10, 5, "s2")
	require.ErrorContains(t, err, "low to high")
	require.Equal(t, "v1 s1:0-24575 s2:24576-40959 s3:40960-65535", m.String(), "the old map is left as it was")
}
