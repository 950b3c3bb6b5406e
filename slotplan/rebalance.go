package slotplan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// ShardMove is one move of a rebalance: buckets Lo to Hi (of the 65,536,
// inclusive) go from shard From to shard To.
type ShardMove struct {
	Lo   int    `json:"lo"`
	Hi   int    `json:"hi"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Rebalance returns the map in which each shard owns a share of the
// buckets in proportion to its weight, and the moves that turn m into it
// (in bucket order; applied one by one with Move they give the new map).
// Every bound falls on a slot bound of plan, and each shard's count is
// within one slot of its exact share (Buckets × weight / total weight).
//
// It moves the fewest buckets: only a shard above its share gives any,
// and only the excess. Among the ways to do that it keeps ranges whole,
// moving the bound between a shard above its share and a neighbour below
// it first; what is left is taken from the ends of the givers' ranges and
// given, as few pieces as it can, to the shards below their share (a new
// shard, weighted and owning nothing, among them).
//
// weights must name every shard of m (0 drains a shard) and may name new
// ones. A map already even (every shard within one slot of its share, as
// the shares are rounded) is returned unchanged, with no moves. The map
// must fall on plan's slots (Aligned).
func (m ShardMap) Rebalance(plan Plan, weights map[string]float64) (ShardMap, []ShardMove, error) {
	m.Ranges = slices.Clone(m.Ranges)
	if err := m.Validate(); err != nil {
		return ShardMap{}, nil, err
	}
	if plan.Buckets != Buckets && plan.Buckets != BucketsTwoByte || plan.Slots < 1 {
		return ShardMap{}, nil, fmt.Errorf("%w: rebalance needs a plan (NewBuckets)", ErrShardMap)
	}
	if err := m.Aligned(plan); err != nil {
		return ShardMap{}, nil, fmt.Errorf("%w; set a map on the slots first", err)
	}
	names := slices.Clone(m.Shards())
	for name := range weights {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	total := 0.0
	for _, name := range names {
		w, ok := weights[name]
		switch {
		case !ok:
			return ShardMap{}, nil, fmt.Errorf("%w: no weight for shard %q of the map; give it one (0 moves all its buckets away)", ErrShardMap, name)
		case !ValidShardName(name):
			return ShardMap{}, nil, fmt.Errorf("%w: shard name %q must be 1-%d letters, digits, '_', '-' or '.'", ErrShardMap, name, shardNameMax)
		case math.IsNaN(w) || math.IsInf(w, 0) || w < 0:
			return ShardMap{}, nil, fmt.Errorf("%w: weight %v of shard %q must be a number of 0 or more", ErrShardMap, w, name)
		}
		total += w
	}
	if total <= 0 {
		return ShardMap{}, nil, fmt.Errorf("%w: every weight is 0; give at least one shard a weight above 0", ErrShardMap)
	}

	width := slotWidth(plan)
	slots := BucketsTwoByte / width
	owners := make([]string, slots)
	count := map[string]int{}
	for i := range owners {
		owners[i] = m.Owner(i * width)
		count[owners[i]]++
	}
	target := shares(names, weights, total, slots, count)
	// excess > 0: slots to give away; < 0: slots to take.
	excess := map[string]int{}
	moving := false
	for _, name := range names {
		excess[name] = count[name] - target[name]
		moving = moving || excess[name] != 0
	}
	if !moving {
		return m, nil, nil
	}
	old := slices.Clone(owners)
	shiftBounds(owners, excess)
	carve(owners, excess)
	fill(owners, excess)

	next := ShardMap{Version: m.Version + 1}
	for i := 0; i < slots; {
		j := i
		for j+1 < slots && owners[j+1] == owners[i] {
			j++
		}
		next.Ranges = append(next.Ranges, ShardRange{Shard: owners[i], Lo: i * width, Hi: (j+1)*width - 1})
		i = j + 1
	}
	if err := next.Validate(); err != nil {
		return ShardMap{}, nil, fmt.Errorf("rebalance made an invalid map (a bug): %w", err)
	}
	var moves []ShardMove
	for i := 0; i < slots; {
		if old[i] == owners[i] {
			i++
			continue
		}
		j := i
		for j+1 < slots && old[j+1] == old[i] && owners[j+1] == owners[i] {
			j++
		}
		moves = append(moves, ShardMove{Lo: i * width, Hi: (j+1)*width - 1, From: old[i], To: owners[i]})
		i = j + 1
	}
	return next, moves, nil
}

// shares returns each shard's slots: its exact share rounded down or up,
// the slots left by rounding down going first to the shards that hold
// more than that already (so that a map within one slot of even stays
// as it is), then to the largest fractions, then by name.
func shares(names []string, weights map[string]float64, total float64, slots int, count map[string]int) map[string]int {
	target := map[string]int{}
	exact := map[string]float64{}
	left := slots
	var up []string
	for _, name := range names {
		exact[name] = float64(slots) * weights[name] / total
		target[name] = int(math.Floor(exact[name]))
		left -= target[name]
		if float64(target[name]) < exact[name] {
			up = append(up, name)
		}
	}
	slices.SortStableFunc(up, func(a, b string) int {
		holds := func(s string) int {
			if count[s] > target[s] {
				return 1
			}
			return 0
		}
		return cmp.Or(holds(b)-holds(a), cmp.Compare(exact[b]-math.Floor(exact[b]), exact[a]-math.Floor(exact[a])))
	})
	// Floating point may leave left one off the fractions counted: clamp.
	for i := 0; left > 0 && len(up) > 0; i = (i + 1) % len(up) {
		target[up[i]]++
		left--
	}
	for i := 0; left < 0; i++ {
		if name := names[i%len(names)]; target[name] > 0 {
			target[name]--
			left++
		}
	}
	return target
}

// shiftBounds moves the bound between a shard above its share and a
// neighbour below it, as far as both need, until no such bound is left:
// no range is split.
func shiftBounds(owners []string, excess map[string]int) {
	for changed := true; changed; {
		changed = false
		for j := 1; j < len(owners); j++ {
			a, b := owners[j-1], owners[j]
			if a == b {
				continue
			}
			switch {
			case excess[a] > 0 && excess[b] < 0:
				// a's run ending at j-1 gives its last slots to b.
				n := min(excess[a], -excess[b], runBefore(owners, j))
				for k := j - n; k < j; k++ {
					owners[k] = b
				}
				excess[a] -= n
				excess[b] += n
				changed = true
			case excess[b] > 0 && excess[a] < 0:
				n := min(excess[b], -excess[a], runFrom(owners, j))
				for k := j; k < j+n; k++ {
					owners[k] = a
				}
				excess[b] -= n
				excess[a] += n
				changed = true
			}
		}
	}
}

// runBefore returns the length of the run of equal owners ending at j-1.
func runBefore(owners []string, j int) int {
	n := 0
	for k := j - 1; k >= 0 && owners[k] == owners[j-1]; k-- {
		n++
	}
	return n
}

// runFrom returns the length of the run of equal owners starting at j.
func runFrom(owners []string, j int) int {
	n := 0
	for k := j; k < len(owners) && owners[k] == owners[j]; k++ {
		n++
	}
	return n
}

// carve frees ("") the excess slots of the shards above their share, from
// the ends of their runs: an end next to slots already freed first (the
// pieces join), then one next to another giver, then the longest run.
func carve(owners []string, excess map[string]int) {
	for {
		best, bestScore, bestLen, bestLeft := -1, -1, 0, false
		for i := 0; i < len(owners); {
			s := owners[i]
			n := runFrom(owners, i)
			if s != "" && excess[s] > 0 {
				for _, left := range []bool{true, false} {
					var next string
					has := false
					if left && i > 0 {
						next, has = owners[i-1], true
					}
					if !left && i+n < len(owners) {
						next, has = owners[i+n], true
					}
					score := 0
					switch {
					case has && next == "":
						score = 2
					case has && excess[next] > 0:
						score = 1
					}
					if score > bestScore || score == bestScore && n > bestLen {
						best, bestScore, bestLen, bestLeft = i, score, n, left
					}
				}
			}
			i += n
		}
		if best < 0 {
			return
		}
		s := owners[best]
		k := min(excess[s], bestLen)
		lo := best
		if !bestLeft {
			lo = best + bestLen - k
		}
		for i := lo; i < lo+k; i++ {
			owners[i] = ""
		}
		excess[s] -= k
	}
}

// fill gives the freed slots to the shards below their share: a piece
// next to a taker's run goes to it first (its range grows), then the
// taker missing most takes the smallest piece that holds all it misses,
// else the largest.
func fill(owners []string, excess map[string]int) {
	for {
		type piece struct{ lo, n int }
		var pieces []piece
		for i := 0; i < len(owners); {
			n := runFrom(owners, i)
			if owners[i] == "" {
				pieces = append(pieces, piece{i, n})
			}
			i += n
		}
		if len(pieces) == 0 {
			return
		}
		give := func(lo, n int, to string) {
			for i := lo; i < lo+n; i++ {
				owners[i] = to
			}
			excess[to] += n
		}
		done := false
		for _, p := range pieces {
			if p.lo > 0 && excess[owners[p.lo-1]] < 0 {
				to := owners[p.lo-1]
				give(p.lo, min(p.n, -excess[to]), to)
				done = true
				break
			}
			if end := p.lo + p.n; end < len(owners) && excess[owners[end]] < 0 {
				to := owners[end]
				n := min(p.n, -excess[to])
				give(end-n, n, to)
				done = true
				break
			}
		}
		if done {
			continue
		}
		var taker string
		for name, e := range excess {
			if e < 0 && (taker == "" || e < excess[taker] || e == excess[taker] && name < taker) {
				taker = name
			}
		}
		if taker == "" {
			return // cannot happen: the freed slots are what the takers miss
		}
		need := -excess[taker]
		slices.SortStableFunc(pieces, func(a, b piece) int { return cmp.Compare(a.n, b.n) })
		p := pieces[len(pieces)-1]
		for _, q := range pieces {
			if q.n >= need {
				p = q
				break
			}
		}
		give(p.lo, min(p.n, need), taker)
	}
}
