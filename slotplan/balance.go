package slotplan

import (
	"bytes"
	"math"
	"slices"
)

// WeightEpsilonDefault is the default load bound of weighted placement: no
// slot carries more than (1 + epsilon) times the mean slot weight, unless
// one account alone is heavier than that (PlacePinsReserved says when the
// bound is guaranteed).
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
// the ordinary accounts already put it there, or a jumbo found no slot
// with room for it (see PlacePinsReserved for when that can happen).
func Balance(base []float64, jumbos []Jumbo, epsilon float64) []int {
	slots, _ := balance(base, jumbos, epsilon, nil, nil)
	return slots
}

// balance is Balance with two more inputs. giant (nil: none) marks the
// slots kept for giants: a jumbo hashed to one of them (an evacuee) never
// goes to any of them, while other jumbos may use what room a giant
// leaves. release (nil: none) marks the jumbos pinned before that no
// longer need a pin. Such a jumbo, in the same heaviest-first order, drops
// its pin when it was pinned to its hash slot and that slot stays within
// (1 + epsilon) × M (nothing moves); else it returns to its hash slot if
// that stays within (1 + epsilon/2) × M and the released weight that
// changed slot so far stays within epsilon/2 × M; else it keeps its
// previous slot like any jumbo; else, as it moves anyway, it returns to its
// hash slot if that has room, and walks otherwise. balance also returns
// which jumbos ended in their hash slot that way: released, they need no
// pin.
func balance(base []float64, jumbos []Jumbo, epsilon float64, giant, release []bool) ([]int, []bool) {
	slots := len(base)
	out := make([]int, len(jumbos))
	released := make([]bool, len(jumbos))
	if slots == 0 {
		return out, released
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
	kept := func(s int) bool { return giant != nil && giant[s] }

	slices.SortStableFunc(order, func(a, b int) int {
		return heavierFirst(jumbos[a].Weight, jumbos[b].Weight, jumbos[a].ID, jumbos[b].ID)
	})
	moving := epsilon / 2 * mean // released weight that may still change slot
	for _, i := range order {
		j := &jumbos[i]
		home := ((j.Home % slots) + slots) % slots
		evacuee := kept(home)
		fits := func(s int, bound float64) bool {
			return s >= 0 && !(evacuee && kept(s)) && load[s]+j.Weight <= bound
		}
		prev := -1
		if j.Prev >= 0 && j.Prev < slots {
			prev = j.Prev
		}
		free := release != nil && release[i]
		slot := -1
		switch {
		case free && prev == home && fits(home, keep):
			slot = home // already served there: dropping the pin moves nothing
		case free && j.Weight <= moving && fits(home, place):
			slot = home
			moving -= j.Weight
		case fits(prev, keep):
			slot = prev
		case free && fits(home, place):
			slot = home // it moves anyway: home rather than a new pin
		}
		if slot < 0 && fits(home, place) {
			slot = home
		}
		for s := 0; slot < 0 && !evacuee && s < slots; s++ {
			if kept(s) && fits(s, place) {
				slot = s // the room a giant leaves, which its evacuees cannot use
			}
		}
		for k := 1; slot < 0 && k < slots; k++ {
			if s := (home + k) % slots; fits(s, place) {
				slot = s
			}
		}
		if slot < 0 {
			// No slot within the bound: the lightest it may use, first on
			// the walk among equals.
			for k := range slots {
				if s := (home + k) % slots; fits(s, math.Inf(1)) && (slot < 0 || load[s] < load[slot]) {
					slot = s
				}
			}
			if slot < 0 {
				slot = home // every slot kept for a giant: not with Giants' limit
			}
		}
		load[slot] += j.Weight
		out[i] = slot
		released[i] = free && slot == home
	}
	return out, released
}

// Pin is a jumbo account's placement: the slot that serves it, whatever its
// hash slot.
type Pin struct {
	ID     [16]byte
	Weight float64
	Slot   int
}

// pinHold is the hysteresis of pinning: an account pinned in the previous
// placement stays a jumbo while its weight is above pinHold × T, T the
// cycle's JumboThreshold, and is released back to its hash slot once it is
// at most that. A weight drawn around a mean near T does not flip between
// pinned and hashed each cycle, and the pins stay about the accounts above
// pinHold × T (and the neighbours of the current giants): a bounded set,
// however long weights drift.
const pinHold = 0.8

// PlacePins chooses and places the jumbo accounts of one cycle. slotTotals
// is the total weight of every account by hash slot (so len(slotTotals) is
// the number of slots), sumSq the sum of every weight squared, and
// candidates the heaviest accounts (any order) together with every account
// pinned in the previous placement (Prev >= 0), with their current weights.
//
// An account is a jumbo when its weight exceeds the JumboThreshold T of the
// candidates. An account pinned before stays one while its weight is above
// 0.8 × T (hysteresis), and is released at or below: it goes back to its
// hash slot when that slot has room, at most epsilon/2 × M of released
// weight changing slot per placement (heaviest first; an account pinned to
// its own hash slot just drops its pin), and keeps its pin otherwise. Pins
// rarely move: a jumbo keeps its previous slot while that stays within
// (1 + epsilon) × M. Ordinary accounts keep their hash slot; the jumbos are
// placed by Balance. It returns T and the pins, heaviest first, equal
// weights by ID.
func PlacePins(slotTotals []float64, sumSq float64, candidates []Jumbo, epsilon float64) (float64, []Pin) {
	return placePins(slotTotals, sumSq, candidates, nil, nil, epsilon)
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
// Giants) is pinned to its slot, and every other account hashed to a
// reserved slot (evacuees: the caller lists them all, with their previous
// slot) is pinned elsewhere, with the jumbos. Other jumbos may use the room
// a giant leaves in its slot (after their own hash slot), so a giant
// lighter than a mean slot does not push the other slots up. While a giant
// keeps its slot, its evacuees keep theirs; once it is gone they are
// released like any pin no longer heavy enough. With no giants it is
// PlacePins.
//
// The load bound: let S be the number of slots, M the mean slot weight, and
// take the placed accounts (jumbos, earlier pins, evacuees) heaviest first.
// Each finds a slot within (1 + epsilon/2) × M whenever the slots it may use
// average at most (1 + epsilon/2) × M minus its weight before it. Without
// giants, that holds when it weighs at most epsilon/2 × M plus 1/S of the
// weight of itself and the accounts placed after it (the slots then hold all
// weight but that): every account up to epsilon/2 × M × S/(S-1) does, and
// JumboThreshold's room rule makes the heaviest jumbo do (unless it is a
// giant Giants had no slot for). When every placed account finds such a
// slot, every slot ends at most max((1 + epsilon) × M, its base): its giant,
// or its ordinary accounts. So no slot exceeds max(1 + epsilon, w) × M, w
// the heaviest account over M, unless the ordinary accounts of a slot alone
// exceed (1 + epsilon) × M (3 standard deviations of the hashed part or
// more, or more accounts would need a pin than the candidates hold), or an
// account finds no room (few slots, more giants than Giants keeps slots for,
// or evacuees of giants lighter than M that the other jumbos did not
// relieve): it goes to the lightest slot it may use (with no giants, that
// slot then carries at most M + its weight).
func PlacePinsReserved(slotTotals []float64, sumSq float64, candidates, evacuees []Jumbo, reserved []Reserve, epsilon float64) (float64, []Pin) {
	return placePins(slotTotals, sumSq, candidates, evacuees, reserved, epsilon)
}

// placePins is PlacePinsReserved; reserved may be empty.
func placePins(slotTotals []float64, sumSq float64, candidates, evacuees []Jumbo, reserved []Reserve, epsilon float64) (float64, []Pin) {
	slots := len(slotTotals)
	giantSlot := map[[16]byte]int{}
	kept := make([]bool, slots)
	for _, r := range reserved {
		giantSlot[r.ID] = r.Slot
		kept[r.Slot] = true
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
	var release []bool
	seen := map[[16]byte]bool{}
	for _, c := range rest {
		switch {
		case c.Weight > threshold:
			release = append(release, false)
		case c.Prev >= 0:
			release = append(release, c.Weight <= pinHold*threshold)
		default:
			continue
		}
		seen[c.ID] = true
		movers = append(movers, c)
	}
	for _, e := range evacuees {
		if _, giant := giantSlot[e.ID]; giant || seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		movers = append(movers, e)
		release = append(release, false)
	}
	for _, m := range movers {
		if m.Home >= 0 && m.Home < slots {
			base[m.Home] -= m.Weight
		}
	}
	for _, g := range giants {
		base[giantSlot[g.ID]] += g.Weight
	}
	placed, released := balance(base, movers, epsilon, kept, release)
	pins := make([]Pin, 0, len(giants)+len(movers))
	for _, g := range giants {
		pins = append(pins, Pin{ID: g.ID, Weight: g.Weight, Slot: giantSlot[g.ID]})
	}
	for i, m := range movers {
		if !released[i] {
			pins = append(pins, Pin{ID: m.ID, Weight: m.Weight, Slot: placed[i]})
		}
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
