package slotplan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ShardRange is a range of the 65,536 two-byte buckets (BucketOf with
// BucketsTwoByte), Lo to Hi inclusive, owned by the shard named Shard.
type ShardRange struct {
	Shard string `json:"shard"`
	Lo    int    `json:"lo"`
	Hi    int    `json:"hi"`
}

// ShardMap says which shard (a PostgreSQL database with its own River)
// owns which buckets: its ranges cover the 65,536 two-byte buckets once,
// so every account belongs to exactly one shard, by its buckets alone. A
// shard with more capacity owns more buckets. Version orders the maps of
// a task: each change is a new version.
//
// A cycle's slot belongs to the shard that owns the slot's first bucket
// (SlotOwner): with ranges aligned to the plan's slots (Aligned), every
// account of the slot is the shard's; with others (a plan changed to
// coarser slots), each slot is still served by exactly one shard.
type ShardMap struct {
	Version int64        `json:"version"`
	Ranges  []ShardRange `json:"ranges"`
}

// ErrShardMap is wrapped by the errors of ShardMap.Validate.
var ErrShardMap = errors.New("invalid shard map")

// shardNameMax is the longest shard name.
const shardNameMax = 64

// Validate checks that the ranges, in any order, cover the 65,536 buckets
// exactly once and name their shards (1-64 letters, digits, '_', '-' or
// '.'); it sorts them by Lo.
func (m *ShardMap) Validate() error {
	if len(m.Ranges) == 0 {
		return fmt.Errorf("%w: no ranges; give each shard one or more ranges of the buckets 0-%d", ErrShardMap, BucketsTwoByte-1)
	}
	slices.SortFunc(m.Ranges, func(a, b ShardRange) int { return cmp.Compare(a.Lo, b.Lo) })
	next := 0
	for _, r := range m.Ranges {
		switch {
		case !ValidShardName(r.Shard):
			return fmt.Errorf("%w: shard name %q must be 1-%d letters, digits, '_', '-' or '.'", ErrShardMap, r.Shard, shardNameMax)
		case r.Lo < 0 || r.Hi >= BucketsTwoByte || r.Lo > r.Hi:
			return fmt.Errorf("%w: range %d-%d of shard %q is not within 0-%d, low to high", ErrShardMap, r.Lo, r.Hi, r.Shard, BucketsTwoByte-1)
		case r.Lo > next:
			return fmt.Errorf("%w: buckets %d-%d belong to no shard; give them to one", ErrShardMap, next, r.Lo-1)
		case r.Lo < next:
			return fmt.Errorf("%w: buckets %d-%d belong to two shards (range %d-%d of %q overlaps the range before it)", ErrShardMap, r.Lo, next-1, r.Lo, r.Hi, r.Shard)
		}
		next = r.Hi + 1
	}
	if next != BucketsTwoByte {
		return fmt.Errorf("%w: buckets %d-%d belong to no shard; give them to one", ErrShardMap, next, BucketsTwoByte-1)
	}
	return nil
}

// ValidShardName reports whether s is a valid shard name: 1-64 letters,
// digits, '_', '-' or '.'.
func ValidShardName(s string) bool {
	if s == "" || len(s) > shardNameMax || s == "." || s == ".." { // a path segment on the page over shards
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	})
}

// Owner returns the shard owning bucket (of the 65,536), "" when none
// does (an invalid map).
func (m ShardMap) Owner(bucket int) string {
	for _, r := range m.Ranges {
		if bucket >= r.Lo && bucket <= r.Hi {
			return r.Shard
		}
	}
	return ""
}

// Shards returns the map's shard names, in the order of their first
// range.
func (m ShardMap) Shards() []string {
	var out []string
	for _, r := range m.Ranges {
		if !slices.Contains(out, r.Shard) {
			out = append(out, r.Shard)
		}
	}
	return out
}

// OwnerOf returns the shard owning the account with id.
func (m ShardMap) OwnerOf(id [16]byte) string { return m.Owner(BucketOf(id, BucketsTwoByte)) }

// slotWidth returns how many two-byte buckets one slot of plan spans.
func slotWidth(plan Plan) int {
	return plan.BucketsPerSlot * (BucketsTwoByte / plan.Buckets)
}

// SlotOwner returns the shard that serves slot of plan with the task's
// shift: the owner of the first bucket of the bucket slot it serves.
func (m ShardMap) SlotOwner(plan Plan, shift, slot int) string {
	lo, _ := plan.BucketRange(plan.Shift(slot, -shift))
	return m.Owner(lo * (BucketsTwoByte / plan.Buckets))
}

// SlotsOf returns the slots of plan (with shift) that shard serves, in
// order.
func (m ShardMap) SlotsOf(plan Plan, shift int, shard string) []int {
	var out []int
	for slot := range plan.Slots {
		if m.SlotOwner(plan, shift, slot) == shard {
			out = append(out, slot)
		}
	}
	return out
}

// Aligned returns nil when every range starts and ends on a slot boundary
// of plan, so that each account is served by the shard owning its bucket;
// else an error naming the first range that does not and the nearest
// boundaries.
func (m ShardMap) Aligned(plan Plan) error {
	w := slotWidth(plan)
	for _, r := range m.Ranges {
		for _, b := range []int{r.Lo, r.Hi + 1} {
			if b%w != 0 {
				down := b / w * w
				return fmt.Errorf("%w: range %d-%d of shard %q does not fall on the slots of a %s cycle (each spans %d buckets): move its bound %d to %d or %d",
					ErrShardMap, r.Lo, r.Hi, r.Shard, plan.Cycle, w, b, down, down+w)
			}
		}
	}
	return nil
}

// Move returns the map with buckets lo to hi given to shard to, as the
// next version. The range may span ranges of several shards; the result
// is validated.
func (m ShardMap) Move(lo, hi int, to string) (ShardMap, error) {
	if lo < 0 || hi >= BucketsTwoByte || lo > hi {
		return ShardMap{}, fmt.Errorf("%w: range %d-%d is not within 0-%d, low to high", ErrShardMap, lo, hi, BucketsTwoByte-1)
	}
	out := ShardMap{Version: m.Version + 1}
	for _, r := range m.Ranges {
		if r.Hi < lo || r.Lo > hi {
			out.Ranges = append(out.Ranges, r)
			continue
		}
		if r.Lo < lo {
			out.Ranges = append(out.Ranges, ShardRange{Shard: r.Shard, Lo: r.Lo, Hi: lo - 1})
		}
		if r.Hi > hi {
			out.Ranges = append(out.Ranges, ShardRange{Shard: r.Shard, Lo: hi + 1, Hi: r.Hi})
		}
	}
	out.Ranges = append(out.Ranges, ShardRange{Shard: to, Lo: lo, Hi: hi})
	if err := out.Validate(); err != nil {
		return ShardMap{}, err
	}
	// Neighbouring ranges of one shard become one.
	merged := out.Ranges[:1]
	for _, r := range out.Ranges[1:] {
		if last := &merged[len(merged)-1]; last.Shard == r.Shard && last.Hi+1 == r.Lo {
			last.Hi = r.Hi
			continue
		}
		merged = append(merged, r)
	}
	out.Ranges = merged
	return out, nil
}

// String writes the map as "v<version> name:lo-hi,lo-hi name:lo-hi".
func (m ShardMap) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d", m.Version)
	for _, shard := range m.Shards() {
		b.WriteString(" " + shard + ":")
		first := true
		for _, r := range m.Ranges {
			if r.Shard != shard {
				continue
			}
			if !first {
				b.WriteString(",")
			}
			first = false
			fmt.Fprintf(&b, "%d-%d", r.Lo, r.Hi)
		}
	}
	return b.String()
}
