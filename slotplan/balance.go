package slotplan

import (
	"bytes"
	"math"
	"slices"
)

// WeightEpsilonDefault is the default load bound of weighted placement: no
// slot carries more than (1 + epsilon) times the mean slot weight, unless
// one account alone is heavier than that.
const WeightEpsilonDefault = 0.10

// Jumbo is an account heavy enough to be pinned to a slot by Balance.
type Jumbo struct {
	// ID is the account's UUID; it breaks ties between equal weights.
	ID [16]byte
	// Weight is the account's current weight, > 0.
	Weight float64
	// Home is the slot hashing alone would serve it in.
	Home int
	// Prev is the slot it was pinned to in the previous placement, or -1.
	Prev int
}

// JumboThreshold returns the weight above which an account is pinned rather
// than left in its hash slot. desc holds the heaviest weights in descending
// order (at least every weight above the result), total and sumSq the sum
// and the sum of squares of all weights, slots the number of slots.
//
// Hashing n ordinary accounts over S slots gives a slot's total a standard
// deviation of about sqrt(sum of w² / S). The threshold is the largest one
// that keeps this at most epsilon/4 of the mean slot weight M = total/S and
// keeps every ordinary account at most epsilon/2 × M, and that leaves the
// heaviest account h room in a slot of average ordinary weight: the mean
// ordinary weight per slot at most (1 + epsilon/4) × M - h, but never less
// than M/2, so at most about half of all weight is pinned. Accounts are
// taken from the heaviest down, all accounts of one weight together, until
// the rest meet all three limits. When h exceeds about M/2 the heaviest
// slot can therefore reach h + M/2 rather than h + epsilon × M: the
// ordinary accounts of the slot it lands in stay there. The result T pins exactly the accounts with
// weight > T; it is +Inf when nothing needs pinning and the lightest weight
// of desc (pinning all but its ties) when desc runs out first.
func JumboThreshold(desc []float64, total, sumSq float64, slots int, epsilon float64) float64 {
	if slots < 1 || total <= 0 || len(desc) == 0 {
		return math.Inf(1)
	}
	mean := total / float64(slots)
	maxOrdinary := epsilon / 2 * mean
	budget := float64(slots) * (epsilon / 4 * mean) * (epsilon / 4 * mean)
	room := max((1+epsilon/4)*mean-desc[0], mean/2)
	remSq, remTotal := sumSq, total
	i := 0
	for i < len(desc) && (desc[i] > maxOrdinary || remSq > budget || remTotal/float64(slots) > room) {
		w := desc[i]
		for i < len(desc) && desc[i] == w {
			remSq -= w * w
			remTotal -= w
			i++
		}
	}
	switch {
	case i == 0:
		return math.Inf(1)
	case i == len(desc):
		return desc[len(desc)-1]
	}
	return desc[i]
}

// Balance places the jumbo accounts on top of base, the per-slot total
// weight of the ordinary (hash-placed) accounts, and returns each jumbo's
// slot, in the order of jumbos. It is deterministic: the same input gives
// the same output on every machine.
//
// With M the mean slot weight (all weight over len(base)), the jumbos are
// taken heaviest first, equal weights by ID. A jumbo keeps its previous
// slot Prev while that slot's total stays within (1 + epsilon) × M
// (hysteresis: pins rarely move). Otherwise it goes to the first slot,
// walking up from Home (wrapping around), whose total stays within
// (1 + epsilon/2) × M, and when none is left, to the lightest slot (first
// on the walk among equals). So no slot exceeds (1 + epsilon) × M unless
// the ordinary accounts already put it there, or a single jumbo is heavier
// than what any slot has left.
func Balance(base []float64, jumbos []Jumbo, epsilon float64) []int {
	return balance(base, jumbos, epsilon, nil)
}

// balance is Balance never placing a jumbo in an excluded slot (nil: none).
func balance(base []float64, jumbos []Jumbo, epsilon float64, excluded []bool) []int {
	slots := len(base)
	open := func(s int) bool { return excluded == nil || !excluded[s] }
	out := make([]int, len(jumbos))
	if slots == 0 {
		return out
	}
	load := make([]float64, slots)
	copy(load, base)
	total := 0.0
	for _, b := range base {
		total += b
	}
	order := make([]int, len(jumbos))
	for i, j := range jumbos {
		total += j.Weight
		order[i] = i
	}
	mean := total / float64(slots)
	keep := (1 + epsilon) * mean
	place := (1 + epsilon/2) * mean

	slices.SortStableFunc(order, func(a, b int) int {
		return heavierFirst(jumbos[a].Weight, jumbos[b].Weight, jumbos[a].ID, jumbos[b].ID)
	})
	for _, i := range order {
		j := &jumbos[i]
		home := ((j.Home % slots) + slots) % slots
		slot := -1
		if j.Prev >= 0 && j.Prev < slots && open(j.Prev) && load[j.Prev]+j.Weight <= keep {
			slot = j.Prev
		}
		for k := 0; slot < 0 && k < slots; k++ {
			if s := (home + k) % slots; open(s) && load[s]+j.Weight <= place {
				slot = s
			}
		}
		for k := 0; k < slots && slot < 0; k++ {
			if s := (home + k) % slots; open(s) {
				slot = s
			}
		}
		if slot >= 0 && !(load[slot]+j.Weight <= place) && !(slot == j.Prev && load[slot]+j.Weight <= keep) {
			// No slot within the bound: the lightest open slot.
			for k := 0; k < slots; k++ {
				if s := (home + k) % slots; open(s) && load[s] < load[slot] {
					slot = s
				}
			}
		}
		if slot < 0 {
			slot = home // every slot excluded: cannot happen with Giants' limit
		}
		load[slot] += j.Weight
		out[i] = slot
	}
	return out
}

// Pin is a jumbo account's placement: the slot that serves it, whatever its
// hash slot.
type Pin struct {
	ID     [16]byte
	Weight float64
	Slot   int
}

// PlacePins chooses and places the jumbo accounts of one cycle. slotTotals
// is the total weight of every account by hash slot (so len(slotTotals) is
// the number of slots), sumSq the sum of every weight squared, and
// candidates the heaviest accounts (any order) together with every account
// pinned in the previous placement (Prev >= 0), with their current weights.
//
// An account is a jumbo when its weight exceeds the JumboThreshold T of the
// candidates, or when it was pinned before, whatever its weight now: pins
// are sticky, so an account near the threshold does not flip between pinned
// and hashed, and a giant's former neighbours stay put when it leaves. Ordinary accounts keep their hash slot; the jumbos are
// placed by Balance. It returns T and the pins, heaviest first, equal
// weights by ID.
func PlacePins(slotTotals []float64, sumSq float64, candidates []Jumbo, epsilon float64) (float64, []Pin) {
	total := 0.0
	for _, t := range slotTotals {
		total += t
	}
	sorted := make([]Jumbo, len(candidates))
	copy(sorted, candidates)
	slices.SortFunc(sorted, func(a, b Jumbo) int { return heavierFirst(a.Weight, b.Weight, a.ID, b.ID) })
	desc := make([]float64, len(sorted))
	for i, c := range sorted {
		desc[i] = c.Weight
	}
	threshold := JumboThreshold(desc, total, sumSq, len(slotTotals), epsilon)

	base := make([]float64, len(slotTotals))
	copy(base, slotTotals)
	var jumbos []Jumbo
	for _, c := range sorted {
		if c.Weight > threshold || c.Prev >= 0 {
			if c.Home >= 0 && c.Home < len(base) {
				base[c.Home] -= c.Weight
			}
			jumbos = append(jumbos, c)
		}
	}
	slots := Balance(base, jumbos, epsilon)
	pins := make([]Pin, len(jumbos))
	for i, j := range jumbos {
		pins[i] = Pin{ID: j.ID, Weight: j.Weight, Slot: slots[i]}
	}
	return threshold, pins
}

// Reserve is a slot kept for one giant account: an account heavier than
// about half a mean slot, which no slot could take on top of its ordinary
// accounts within the bound.
type Reserve struct {
	Slot int
	ID   [16]byte
}

// giantShare is the weight, over the mean slot weight M, above which an
// account is a giant: past (1/2 + epsilon/4) × M, JumboThreshold's room rule
// could no longer leave it room in a slot of average ordinary weight.
func giantShare(epsilon float64) float64 { return 0.5 + epsilon/4 }

// Giants returns the slots PlacePinsReserved keeps for giant accounts,
// heaviest first (equal weights by ID): a giant keeps its previous slot
// (Prev) when no heavier giant took it, else takes the slot with the least
// total weight. At most a quarter of the slots are kept. slotTotals and
// candidates are PlacePins'.
func Giants(slotTotals []float64, candidates []Jumbo, epsilon float64) []Reserve {
	slots := len(slotTotals)
	total := 0.0
	for _, t := range slotTotals {
		total += t
	}
	if slots == 0 || total <= 0 {
		return nil
	}
	limit := giantShare(epsilon) * total / float64(slots)
	var giants []Jumbo
	for _, c := range candidates {
		if c.Weight > limit {
			giants = append(giants, c)
		}
	}
	slices.SortFunc(giants, func(a, b Jumbo) int { return heavierFirst(a.Weight, b.Weight, a.ID, b.ID) })
	taken := make([]bool, slots)
	var out []Reserve
	for _, g := range giants {
		if len(out) >= slots/4 {
			break
		}
		slot := -1
		if g.Prev >= 0 && g.Prev < slots && !taken[g.Prev] {
			slot = g.Prev
		} else {
			for s := range slots {
				if !taken[s] && (slot < 0 || slotTotals[s] < slotTotals[slot]) {
					slot = s
				}
			}
		}
		taken[slot] = true
		out = append(out, Reserve{Slot: slot, ID: g.ID})
	}
	return out
}

// PlacePinsReserved is PlacePins with giants: each giant of reserved (from
// Giants) is pinned alone to its slot, and every other account hashed to a
// reserved slot (evacuees: the caller lists them all, with their previous
// slot) is placed elsewhere with the jumbos. The giant's slot then carries
// the giant alone, so no slot exceeds max((1 + epsilon) × M, giant + the
// little the walk could not place elsewhere). With no giants it is
// PlacePins.
func PlacePinsReserved(slotTotals []float64, sumSq float64, candidates, evacuees []Jumbo, reserved []Reserve, epsilon float64) (float64, []Pin) {
	if len(reserved) == 0 {
		return PlacePins(slotTotals, sumSq, candidates, epsilon)
	}
	slots := len(slotTotals)
	giantSlot := map[[16]byte]int{}
	excluded := make([]bool, slots)
	for _, r := range reserved {
		giantSlot[r.ID] = r.Slot
		excluded[r.Slot] = true
	}
	total := 0.0
	for _, t := range slotTotals {
		total += t
	}
	base := make([]float64, slots)
	copy(base, slotTotals)
	var giants []Jumbo
	var rest []Jumbo
	for _, c := range candidates {
		if _, ok := giantSlot[c.ID]; ok {
			giants = append(giants, c)
			continue
		}
		rest = append(rest, c)
	}
	// The threshold of what stays hashed, without the giants.
	gTotal, gSq := 0.0, 0.0
	for _, g := range giants {
		gTotal += g.Weight
		gSq += g.Weight * g.Weight
		if g.Home >= 0 && g.Home < slots {
			base[g.Home] -= g.Weight
		}
	}
	slices.SortFunc(rest, func(a, b Jumbo) int { return heavierFirst(a.Weight, b.Weight, a.ID, b.ID) })
	desc := make([]float64, len(rest))
	for i, c := range rest {
		desc[i] = c.Weight
	}
	threshold := JumboThreshold(desc, total-gTotal, max(sumSq-gSq, 0), slots, epsilon)

	var movers []Jumbo
	seen := map[[16]byte]bool{}
	for _, c := range rest {
		if c.Weight > threshold || c.Prev >= 0 {
			seen[c.ID] = true
			movers = append(movers, c)
		}
	}
	for _, e := range evacuees {
		if _, giant := giantSlot[e.ID]; giant || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		movers = append(movers, e)
	}
	for _, m := range movers {
		if m.Home >= 0 && m.Home < slots {
			base[m.Home] -= m.Weight
		}
	}
	for _, g := range giants {
		base[giantSlot[g.ID]] += g.Weight
	}
	placed := balance(base, movers, epsilon, excluded)
	pins := make([]Pin, 0, len(giants)+len(movers))
	for _, g := range giants {
		pins = append(pins, Pin{ID: g.ID, Weight: g.Weight, Slot: giantSlot[g.ID]})
	}
	for i, m := range movers {
		pins = append(pins, Pin{ID: m.ID, Weight: m.Weight, Slot: placed[i]})
	}
	slices.SortStableFunc(pins, func(a, b Pin) int { return heavierFirst(a.Weight, b.Weight, a.ID, b.ID) })
	return threshold, pins
}

// heavierFirst orders accounts by weight, heaviest first, equal weights by
// ID: the one order every placement step uses, so ties never depend on
// input order.
func heavierFirst(wa, wb float64, ida, idb [16]byte) int {
	switch {
	case wa > wb:
		return -1
	case wa < wb:
		return 1
	}
	return bytes.Compare(ida[:], idb[:])
}
