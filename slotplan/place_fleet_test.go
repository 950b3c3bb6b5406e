package slotplan_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

// fleetCandidates is how many of the heaviest accounts the bootstrap hands
// to the placement (taskspec.PinCandidatesMax, the LIMIT of its candidate
// query), beside the previous cycle's pins.
const fleetCandidates = 100_000

// fleet is a simulated accounts table: random UUIDs, their hash slots and
// this cycle's weights.
type fleet struct {
	plan   slotplan.Plan
	ids    [][16]byte
	index  map[[16]byte]int // id -> account
	home   []int
	byHome [][]int // per hash slot, its accounts
	means  []float64
	w      []float64
}

// newFleet draws n accounts whose mean weights are Pareto(1.5) (minimum
// 1), with random (version 4) UUIDs, from seed, over the slots of cycle.
func newFleet(t testing.TB, cycle time.Duration, n int, seed uint64) (*fleet, *rand.Rand) {
	t.Helper()
	plan, err := slotplan.New(cycle)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 0xf1ee7))
	f := &fleet{plan: plan, ids: make([][16]byte, n), index: make(map[[16]byte]int, n), home: make([]int, n),
		byHome: make([][]int, plan.Slots), means: make([]float64, n), w: make([]float64, n)}
	for i := range n {
		a, b := rng.Uint64(), rng.Uint64()
		for k := range 8 {
			f.ids[i][k], f.ids[i][8+k] = byte(a>>(8*k)), byte(b>>(8*k))
		}
		f.ids[i][6] = f.ids[i][6]&0x0f | 0x40
		f.ids[i][8] = f.ids[i][8]&0x3f | 0x80
		f.index[f.ids[i]] = i
		f.home[i] = plan.SlotOf(f.ids[i])
		f.byHome[f.home[i]] = append(f.byHome[f.home[i]], i)
		f.means[i] = math.Pow(1-rng.Float64(), -1/1.5)
		f.w[i] = f.means[i]
	}
	return f, rng
}

// redraw gives every account this cycle's weight: its mean times lognormal
// noise of mean 1 (sigma 0.3).
func (f *fleet) redraw(rng *rand.Rand) {
	const sigma = 0.3
	for i, m := range f.means {
		f.w[i] = m * math.Exp(sigma*rng.NormFloat64()-sigma*sigma/2)
	}
}

// placement is one cycle's outcome.
type placement struct {
	pinned   int       // how many pins
	slot     []int     // per account, the slot serving it: its pin, else its hash slot
	prev     []int     // per account, its pin's slot, else -1: the next cycle's Prev
	load     []float64 // per slot, the weight it serves
	top      []float64 // per slot, the heaviest account it serves
	mean     float64   // mean slot weight M
	heaviest float64   // w: the heaviest account over M
}

func (p placement) maxOverMean() float64 { return slices.Max(p.load) / p.mean }

// restOverMean is max/mean over the slots that serve no account heavier
// than (1 + epsilon) × M: what the load bound holds to (1 + epsilon).
func (p placement) restOverMean(epsilon float64) float64 {
	rest := 0.0
	for s, l := range p.load {
		if p.top[s] <= (1+epsilon)*p.mean {
			rest = max(rest, l)
		}
	}
	return rest / p.mean
}

// requireBound asserts the load bound of weighted placement on p: every
// slot carries at most (1 + epsilon) × M, or the one account heavier than
// that alone. So max/mean is at most max(1 + epsilon, w).
func requireBound(t *testing.T, p placement, epsilon float64, msgAndArgs ...any) {
	t.Helper()
	for s, l := range p.load {
		require.LessOrEqual(t, l, max((1+epsilon)*p.mean, p.top[s])*(1+1e-9),
			"slot %d: %.4f x M, heaviest account %.4f x M; %s", s, l/p.mean, p.top[s]/p.mean, fmt.Sprint(msgAndArgs...))
	}
	require.LessOrEqual(t, p.maxOverMean(), max(1+epsilon, p.heaviest)*(1+1e-9), msgAndArgs...)
}

// placeInputs is what the bootstrap hands to Giants and PlacePinsReserved.
type placeInputs struct {
	totals     []float64
	sumSq      float64
	candidates []slotplan.Jumbo
	evacuees   []slotplan.Jumbo
	reserved   []slotplan.Reserve
}

// inputs gathers them the way the bootstrap does (internal/pinning.Place):
// per-slot totals by hash slot and the sum of squares, the previous
// cycle's pins (with their slot as Prev) and the heaviest fleetCandidates
// accounts as candidates, Giants, and every other account hashed to a
// giant's slot as an evacuee (Prev from the previous pins). prev is the
// previous placement's prev (nil: none).
func (f *fleet) inputs(prev []int, epsilon float64) placeInputs {
	n := len(f.ids)
	if prev == nil {
		prev = slices.Repeat([]int{-1}, n)
	}
	in := placeInputs{totals: make([]float64, f.plan.Slots)}
	for i, w := range f.w {
		in.totals[f.home[i]] += w
		in.sumSq += w * w
	}
	for i, s := range prev {
		if s >= 0 {
			in.candidates = append(in.candidates, slotplan.Jumbo{ID: f.ids[i], Weight: f.w[i], Home: f.home[i], Prev: s})
		}
	}
	heaviestFirst := make([]int, n)
	for i := range heaviestFirst {
		heaviestFirst[i] = i
	}
	if n > fleetCandidates {
		slices.SortFunc(heaviestFirst, func(a, b int) int { return cmp.Compare(f.w[b], f.w[a]) })
		heaviestFirst = heaviestFirst[:fleetCandidates]
	}
	for _, i := range heaviestFirst {
		if prev[i] < 0 {
			in.candidates = append(in.candidates, slotplan.Jumbo{ID: f.ids[i], Weight: f.w[i], Home: f.home[i], Prev: -1})
		}
	}
	in.reserved = slotplan.Giants(in.totals, in.candidates, epsilon)
	for _, r := range in.reserved {
		for _, i := range f.byHome[r.Slot] {
			in.evacuees = append(in.evacuees, slotplan.Jumbo{ID: f.ids[i], Weight: f.w[i], Home: f.home[i], Prev: prev[i]})
		}
	}
	return in
}

// place computes the pins of one cycle as the bootstrap does: inputs, then
// PlacePinsReserved.
func (f *fleet) place(prev []int, epsilon float64) placement {
	in := f.inputs(prev, epsilon)
	_, pins := slotplan.PlacePinsReserved(in.totals, in.sumSq, in.candidates, in.evacuees, in.reserved, epsilon)

	n, slots := len(f.ids), f.plan.Slots
	out := placement{pinned: len(pins), slot: slices.Clone(f.home), prev: slices.Repeat([]int{-1}, n),
		load: make([]float64, slots), top: make([]float64, slots)}
	for _, p := range pins {
		i := f.index[p.ID]
		out.slot[i], out.prev[i] = p.Slot, p.Slot
	}
	total, heaviest := 0.0, 0.0
	for i, s := range out.slot {
		out.load[s] += f.w[i]
		out.top[s] = max(out.top[s], f.w[i])
		total += f.w[i]
		heaviest = max(heaviest, f.w[i])
	}
	out.mean = total / float64(slots)
	out.heaviest = heaviest / out.mean
	return out
}

// TestPinsStayBounded runs 30 cycles of 50,000 accounts over 128 slots
// whose weights are redrawn every cycle around their Pareto(1.5) means, each
// cycle's pins the next one's previous pins, as the bootstrap chains them.
// The pin count stays within twice the first cycle's (sticky pins, which
// an account kept whatever its weight, grew it past that by cycle 11 to 20
// and towards every account), and every cycle meets the load bound
// (requireBound).
func TestPinsStayBounded(t *testing.T) {
	t.Parallel()
	const (
		accounts = 50_000
		cycles   = 30
		epsilon  = slotplan.WeightEpsilonDefault
	)
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("Seed%d", seed), func(t *testing.T) {
			t.Parallel()
			f, rng := newFleet(t, 24*time.Hour, accounts, seed)
			var (
				last    placement
				first   int
				counts  []string
				moved   int
				maxMove int
			)
			for cycle := range cycles {
				f.redraw(rng)
				p := f.place(last.prev, epsilon)
				if cycle == 0 {
					first = p.pinned
				} else {
					m := 0
					for i, s := range p.slot {
						if s != last.slot[i] {
							m++
						}
					}
					moved += m
					maxMove = max(maxMove, m)
				}
				counts = append(counts, fmt.Sprintf("%d (%.3f, w %.3f)", p.pinned, p.maxOverMean(), p.heaviest))
				require.LessOrEqual(t, p.pinned, 2*first, "cycle %d: %d pins, first cycle %d", cycle, p.pinned, first)
				requireBound(t, p, epsilon, "cycle ", cycle)
				last = p
			}
			t.Logf("pins per cycle (max/mean, w): %s", strings.Join(counts, " "))
			t.Logf("accounts served in another slot than the cycle before: %.0f per cycle on average, at most %d, of %d", float64(moved)/(cycles-1), maxMove, accounts)
		})
	}
}

// TestGiantNeighbours follows a giant's neighbours: 16 slots of 2,000
// accounts of weight 1 to 2, balanced enough that nothing else needs a pin,
// and one account made a giant of 2.5 mean slots. While the giant stays,
// the accounts hashed to its slot are pinned elsewhere and nobody moves.
// Once it is an ordinary account again, they return to their hash slot,
// at most epsilon/2 x M of weight per cycle, nobody else moves, and the
// pins shrink every cycle to none.
func TestGiantNeighbours(t *testing.T) {
	t.Parallel()
	const epsilon = slotplan.WeightEpsilonDefault
	f, rng := newFleet(t, 16*time.Second, 16*2000, 5)
	require.Equal(t, 16, f.plan.Slots)
	for i := range f.w {
		f.w[i] = 1 + rng.Float64()
	}
	const giant = 0
	ordinary := f.w[giant]
	total := 0.0
	for _, w := range f.w {
		total += w
	}
	f.w[giant] = 2.5 * total / 16

	p := f.place(nil, epsilon)
	requireBound(t, p, epsilon, "with the giant")
	kept := p.slot[giant]
	require.NotEqual(t, f.home[giant], kept, "the giant's own hash slot is the heaviest, not the lightest")
	neighbours := f.byHome[kept]
	require.Equal(t, kept, p.prev[giant], "the giant is pinned")
	for _, i := range neighbours {
		require.NotEqual(t, kept, p.slot[i], "a neighbour left in the giant's slot")
	}
	require.Equal(t, len(neighbours)+1, p.pinned, "the giant and its neighbours are the only pins")
	for cycle := range 4 {
		next := f.place(p.prev, epsilon)
		require.Equal(t, p.slot, next.slot, "cycle %d with the giant: someone moved", cycle)
		p = next
	}

	// The first cycle without the giant also sends home the neighbours
	// whose slot no longer keeps them within (1 + epsilon) x M (M is lower
	// without the giant): they move anyway. After that, released weight
	// goes home within the budget.
	f.w[giant] = ordinary
	var shrink []string
	for cycle := 0; p.pinned > 0; cycle++ {
		require.Less(t, cycle, 40, "pins left after 40 cycles: %d", p.pinned)
		next := f.place(p.prev, epsilon)
		requireBound(t, next, epsilon, "cycle ", cycle, " after the giant")
		require.Less(t, next.pinned, p.pinned, "cycle %d: the pins did not shrink", cycle)
		moved := 0.0
		for i, s := range next.slot {
			if s == p.slot[i] {
				continue
			}
			require.Equal(t, f.home[i], s, "cycle %d: account %d moved elsewhere than home", cycle, i)
			require.True(t, i == giant || f.home[i] == kept, "cycle %d: account %d, not a neighbour, moved", cycle, i)
			moved += f.w[i]
		}
		if cycle > 0 {
			require.LessOrEqual(t, moved, epsilon/2*next.mean*(1+1e-9), "cycle %d: weight moved home", cycle)
		}
		shrink = append(shrink, fmt.Sprintf("%d (%.3f M)", next.pinned, moved/next.mean))
		p = next
	}
	t.Logf("%d neighbours; pins per cycle after the giant: %s", len(neighbours), strings.Join(shrink, " "))
}

// TestWeightedBound places Pareto(1.5) fleets as the bootstrap does, then
// once more with weights redrawn and the first placement's pins as the
// previous ones: small (70 accounts per slot over 128 slots: every account
// is a candidate, and the heaviest outweighs a slot), large (2,000 per slot:
// 256,000 accounts, 100,000 candidates) and on few slots (70 per slot over
// 8, where a giant lighter than a slot used to push the others past 1.10:
// 1.101 to 1.117 in seeds 34, 176 and 187). Every placement meets
// requireBound: every slot at most (1 + epsilon) x M or a single account
// heavier than that alone, so max/mean <= max(1.10, w).
func TestWeightedBound(t *testing.T) {
	t.Parallel()
	const epsilon = slotplan.WeightEpsilonDefault
	for _, tc := range []struct {
		name    string
		cycle   time.Duration
		perSlot int
		seeds   int
	}{
		{"Small", 24 * time.Hour, 70, 12},
		{"Large", 24 * time.Hour, 2000, 4},
		{"FewSlots", 120 * time.Second, 70, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan, err := slotplan.New(tc.cycle)
			require.NoError(t, err)
			var (
				figures    []string
				within     int
				rest       float64
				wMin, wMax = math.Inf(1), 0.0
				pins       int
			)
			for seed := range uint64(tc.seeds) {
				f, rng := newFleet(t, tc.cycle, tc.perSlot*plan.Slots, seed+1)
				first := f.place(nil, epsilon)
				requireBound(t, first, epsilon, "seed ", seed+1)
				f.redraw(rng)
				again := f.place(first.prev, epsilon)
				requireBound(t, again, epsilon, "seed ", seed+1, " redrawn")
				for _, p := range []placement{first, again} {
					if p.maxOverMean() <= 1+epsilon+1e-9 {
						within++
					}
					rest = max(rest, p.restOverMean(epsilon))
					wMin, wMax = min(wMin, p.heaviest), max(wMax, p.heaviest)
					pins = max(pins, p.pinned)
				}
				figures = append(figures, fmt.Sprintf("seed %d: %.3f (w %.3f, other slots %.3f, %d pins), redrawn %.3f (w %.3f, other slots %.3f, %d pins)",
					seed+1, first.maxOverMean(), first.heaviest, first.restOverMean(epsilon), first.pinned,
					again.maxOverMean(), again.heaviest, again.restOverMean(epsilon), again.pinned))
			}
			t.Logf("%d accounts per slot over %d slots, %d placements: w from %.3f to %.3f; max/mean at most 1.10 in %d; slots without an account over 1.10 x M at most %.3f; up to %d pins",
				tc.perSlot, plan.Slots, 2*tc.seeds, wMin, wMax, within, rest, pins)
			if tc.seeds <= 12 {
				t.Logf("max/mean: %s", strings.Join(figures, "; "))
			}
		})
	}
}

// BenchmarkPlacePinsReserved is the bootstrap's placement of a cycle of
// 256,000 accounts (2,000 per slot, Pareto(1.5) means), weights redrawn
// after a first placement whose pins are the previous ones: 100,000
// candidates besides those, evacuees of any giant.
func BenchmarkPlacePinsReserved(b *testing.B) {
	const epsilon = slotplan.WeightEpsilonDefault
	f, rng := newFleet(b, 24*time.Hour, 2000*128, 1)
	first := f.place(nil, epsilon)
	f.redraw(rng)
	in := f.inputs(first.prev, epsilon)
	for b.Loop() {
		slotplan.PlacePinsReserved(in.totals, in.sumSq, in.candidates, in.evacuees, in.reserved, epsilon)
	}
}
