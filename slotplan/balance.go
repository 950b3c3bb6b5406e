package slotplan

import (
	"bytes"
	"math"
	"sort"
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
	slots := len(base)
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

	sort.SliceStable(order, func(a, b int) bool {
		ja, jb := &jumbos[order[a]], &jumbos[order[b]]
		if ja.Weight != jb.Weight {
			return ja.Weight > jb.Weight
		}
		return bytes.Compare(ja.ID[:], jb.ID[:]) < 0
	})
	for _, i := range order {
		j := &jumbos[i]
		home := ((j.Home % slots) + slots) % slots
		slot := -1
		if j.Prev >= 0 && j.Prev < slots && load[j.Prev]+j.Weight <= keep {
			slot = j.Prev
		}
		for k := 0; slot < 0 && k < slots; k++ {
			if s := (home + k) % slots; load[s]+j.Weight <= place {
				slot = s
			}
		}
		if slot < 0 {
			slot = home
			for k := 1; k < slots; k++ {
				if s := (home + k) % slots; load[s] < load[slot] {
					slot = s
				}
			}
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
// candidates, or, pinned before, when it still exceeds T/2 (hysteresis, so
// an account near the threshold does not flip between pinned and hashed
// every cycle). Ordinary accounts keep their hash slot; the jumbos are
// placed by Balance. It returns T and the pins, heaviest first, equal
// weights by ID.
func PlacePins(slotTotals []float64, sumSq float64, candidates []Jumbo, epsilon float64) (float64, []Pin) {
	total := 0.0
	for _, t := range slotTotals {
		total += t
	}
	sorted := make([]Jumbo, len(candidates))
	copy(sorted, candidates)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].Weight != sorted[b].Weight {
			return sorted[a].Weight > sorted[b].Weight
		}
		return bytes.Compare(sorted[a].ID[:], sorted[b].ID[:]) < 0
	})
	desc := make([]float64, len(sorted))
	for i, c := range sorted {
		desc[i] = c.Weight
	}
	threshold := JumboThreshold(desc, total, sumSq, len(slotTotals), epsilon)

	base := make([]float64, len(slotTotals))
	copy(base, slotTotals)
	var jumbos []Jumbo
	for _, c := range sorted {
		if c.Weight > threshold || c.Prev >= 0 && c.Weight > threshold/2 {
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
