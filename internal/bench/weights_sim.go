package bench

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/riverslot/riverslot/slotplan"
)

// simAccount is one account of the pure-Go placement simulation.
type simAccount struct {
	id [16]byte
	w  float64
}

// weightCase is a weight distribution of the weights benchmark.
type weightCase struct {
	name string
	draw func(rng *rand.Rand, i, n int) float64
}

// weightCases are the two heavy-tailed distributions: Pareto with
// alpha 1.5 (minimum 1), and 1% of accounts at weight 99 beside 99% at
// weight 1, so the 1% carry half of all weight.
var weightCases = []weightCase{
	{"pareto-1.5", func(rng *rand.Rand, _, _ int) float64 { return Pareto(rng, 1.5) }},
	{"1%-carry-half", func(rng *rand.Rand, _, _ int) float64 {
		if rng.IntN(100) == 0 {
			return 99
		}
		return 1
	}},
}

// Pareto draws from Pareto(alpha) with minimum 1 by inversion.
func Pareto(rng *rand.Rand, alpha float64) float64 {
	return math.Pow(1-rng.Float64(), -1/alpha)
}

// simAccounts draws n accounts with random UUIDs and weights of c, from a
// fixed seed.
func simAccounts(c weightCase, n int, seed uint64) []simAccount {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]simAccount, n)
	for i := range out {
		out[i] = simAccount{id: randomID(rng), w: c.draw(rng, i, n)}
	}
	return out
}

func randomID(rng *rand.Rand) [16]byte {
	var id [16]byte
	a, b := rng.Uint64(), rng.Uint64()
	for k := range 8 {
		id[k], id[8+k] = byte(a>>(8*k)), byte(b>>(8*k))
	}
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80
	return id
}

// simCandidates is how many of the heaviest accounts the simulation hands to
// PlacePins, as the bootstrap's candidate query does (its LIMIT).
const simCandidates = 100_000

// simPlacement is the outcome of placing accounts over plan's slots.
type simPlacement struct {
	pins      map[[16]byte]int
	threshold float64
	hash      []float64 // per-slot weight, hash-only
	balanced  []float64 // per-slot weight with the pins
	heaviest  float64
}

// simulate places accounts as the bootstrap does: per-slot hash totals, the
// heaviest simCandidates accounts plus the previous pins as candidates,
// slotplan.PlacePins.
func simulate(plan slotplan.Plan, accounts []simAccount, prev map[[16]byte]int, epsilon float64) simPlacement {
	p := simPlacement{hash: make([]float64, plan.Slots), balanced: make([]float64, plan.Slots), pins: map[[16]byte]int{}}
	sumSq := 0.0
	for _, a := range accounts {
		p.hash[plan.SlotOf(a.id)] += a.w
		sumSq += a.w * a.w
		p.heaviest = max(p.heaviest, a.w)
	}
	byWeight := make([]int, len(accounts))
	for i := range byWeight {
		byWeight[i] = i
	}
	sort.Slice(byWeight, func(x, y int) bool { return accounts[byWeight[x]].w > accounts[byWeight[y]].w })
	var candidates []slotplan.Jumbo
	seen := map[[16]byte]bool{}
	for k, i := range byWeight {
		a := accounts[i]
		prevSlot, pinned := prev[a.id]
		if k >= simCandidates && !pinned {
			continue
		}
		if !pinned {
			prevSlot = -1
		}
		seen[a.id] = true
		candidates = append(candidates, slotplan.Jumbo{ID: a.id, Weight: a.w, Home: plan.SlotOf(a.id), Prev: prevSlot})
	}
	// Giants get a slot of their own: every other account hashed to it is
	// an evacuee, as the bootstrap lists them (internal/pinning).
	reserved := slotplan.Giants(p.hash, candidates, epsilon)
	var evacuees []slotplan.Jumbo
	if len(reserved) > 0 {
		kept := map[int]bool{}
		for _, r := range reserved {
			kept[r.Slot] = true
		}
		for _, a := range accounts {
			if home := plan.SlotOf(a.id); kept[home] {
				prevSlot, pinned := prev[a.id]
				if !pinned {
					prevSlot = -1
				}
				evacuees = append(evacuees, slotplan.Jumbo{ID: a.id, Weight: a.w, Home: home, Prev: prevSlot})
			}
		}
	}
	threshold, pins := slotplan.PlacePinsReserved(p.hash, sumSq, candidates, evacuees, reserved, epsilon)
	p.threshold = threshold
	copy(p.balanced, p.hash)
	for _, pin := range pins {
		p.pins[pin.ID] = pin.Slot
		p.balanced[plan.SlotOf(pin.ID)] -= pin.Weight
		p.balanced[pin.Slot] += pin.Weight
	}
	return p
}

// slotOf is where the placement serves the account.
func (p simPlacement) slotOf(plan slotplan.Plan, id [16]byte) int {
	if s, ok := p.pins[id]; ok {
		return s
	}
	return plan.SlotOf(id)
}

// maxOverMean is the heaviest slot's weight over the mean slot weight.
func maxOverMean(loads []float64) float64 {
	total, heaviest := 0.0, 0.0
	for _, l := range loads {
		total += l
		heaviest = max(heaviest, l)
	}
	return heaviest / (total / float64(len(loads)))
}

// churn returns accounts after churn (a fraction, e.g. 0.10) of them changed:
// a third removed, a third as many new ones added, a third given a new
// weight from c.
func churn(c weightCase, accounts []simAccount, fraction float64, seed uint64) []simAccount {
	rng := rand.New(rand.NewPCG(seed, 0xc4))
	third := int(float64(len(accounts)) * fraction / 3)
	out := make([]simAccount, 0, len(accounts)+third)
	perm := rng.Perm(len(accounts))
	removed := map[int]bool{}
	for _, i := range perm[:third] {
		removed[i] = true
	}
	changed := map[int]bool{}
	for _, i := range perm[third : 2*third] {
		changed[i] = true
	}
	for i, a := range accounts {
		switch {
		case removed[i]:
			continue
		case changed[i]:
			a.w = c.draw(rng, i, len(accounts))
		}
		out = append(out, a)
	}
	for i := range third {
		out = append(out, simAccount{id: randomID(rng), w: c.draw(rng, i, len(accounts))})
	}
	return out
}

// weightsQuality is one case's placement figures.
type weightsQuality struct {
	hashMaxMean, balancedMaxMean float64
	target                       float64 // max(1 + epsilon, w + epsilon)
	heaviestOverMean             float64 // w
	pins                         int
	threshold                    float64
	moved, kept                  int // accounts present before and after churn: moved slot, all
	pinsAfter                    int
	balancedAfterMaxMean         float64
	targetAfter                  float64
}

// measureWeights places n accounts of case c over plan's slots, churns 10%
// of them and places them again with the first placement's pins as the
// previous ones.
func measureWeights(plan slotplan.Plan, c weightCase, n int, epsilon float64) weightsQuality {
	return measureWeightsSeed(plan, c, n, epsilon, 1)
}

// measureWeightsSeed is measureWeights on the accounts drawn from seed.
func measureWeightsSeed(plan slotplan.Plan, c weightCase, n int, epsilon float64, seed uint64) weightsQuality {
	accounts := simAccounts(c, n, seed)
	before := simulate(plan, accounts, nil, epsilon)
	q := weightsQuality{
		hashMaxMean:     maxOverMean(before.hash),
		balancedMaxMean: maxOverMean(before.balanced),
		pins:            len(before.pins),
		threshold:       before.threshold,
	}
	q.heaviestOverMean, q.target = target(before, epsilon)

	afterAccounts := churn(c, accounts, 0.10, 2)
	after := simulate(plan, afterAccounts, before.pins, epsilon)
	q.pinsAfter = len(after.pins)
	q.balancedAfterMaxMean = maxOverMean(after.balanced)
	_, q.targetAfter = target(after, epsilon)
	present := make(map[[16]byte]bool, len(afterAccounts))
	for _, a := range afterAccounts {
		present[a.id] = true
	}
	for _, a := range accounts {
		if !present[a.id] {
			continue
		}
		q.kept++
		if before.slotOf(plan, a.id) != after.slotOf(plan, a.id) {
			q.moved++
		}
	}
	return q
}

// target is the bound on max/mean: max(1 + epsilon, w + epsilon),
// w the heaviest account over the mean slot weight.
func target(p simPlacement, epsilon float64) (w, bound float64) {
	total := 0.0
	for _, l := range p.hash {
		total += l
	}
	w = p.heaviest / (total / float64(len(p.hash)))
	return w, max(1+epsilon, w+epsilon)
}
