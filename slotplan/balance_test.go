package slotplan

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkBalance asserts Balance's bounds on one input (checkPlacement) and
// reports whether the input met the condition of the tight one.
func checkBalance(t *testing.T, base []float64, jumbos []Jumbo, epsilon float64) ([]int, bool) {
	t.Helper()
	got := Balance(base, jumbos, epsilon)
	return got, checkPlacement(t, base, jumbos, nil, nil, got, nil, epsilon)
}

// checkPlacement asserts the bounds of balance on one placement (got, and
// released for release; nil for Balance), giant marking the slots kept for
// giants (nil: none), with M the mean slot weight and S the number of
// slots:
//
//   - every jumbo gets a slot in range, a released one its hash slot, and
//     one hashed to a giant's slot (an evacuee) no giant's slot;
//   - no slot exceeds max((1 + epsilon) × M, the heaviest base slot, M +
//     the heaviest jumbo): a jumbo that fits nowhere goes to the lightest
//     slot it may use, which is at most M before it (with no giants);
//   - replayed heaviest first, a jumbo whose usable slots (all, or the
//     others than giants' for an evacuee) average at most
//     (1 + epsilon/2) × M - its weight never falls back: its slot ends
//     within (1 + epsilon) × M;
//   - with no giants, when every jumbo, heaviest first, weighs at most
//     epsilon/2 × M plus 1/S of the weight of itself and the jumbos after
//     it (the condition, whose result it returns), that average holds for
//     each (the slots hold all weight but those), so no slot exceeds
//     max((1 + epsilon) × M, its base).
func checkPlacement(t *testing.T, base []float64, jumbos []Jumbo, giant, release []bool, got []int, released []bool, epsilon float64) bool {
	t.Helper()
	slots := len(base)
	kept := func(s int) bool { return giant != nil && giant[s] }
	require.Len(t, got, len(jumbos))
	load := append([]float64(nil), base...)
	total, maxBase, maxJumbo := 0.0, 0.0, 0.0
	for _, b := range base {
		total += b
		maxBase = max(maxBase, b)
	}
	for i, j := range jumbos {
		require.GreaterOrEqual(t, got[i], 0)
		require.Less(t, got[i], slots)
		home := ((j.Home % slots) + slots) % slots
		require.False(t, kept(home) && kept(got[i]), "jumbo %d, hashed to a giant's slot, placed in one", i)
		load[got[i]] += j.Weight
		total += j.Weight
		maxJumbo = max(maxJumbo, j.Weight)
		if released != nil && released[i] {
			require.True(t, release[i], "jumbo %d released without being marked", i)
			require.Equal(t, home, got[i], "released jumbo %d away from its hash slot", i)
		}
	}
	mean := total / float64(slots)
	if giant == nil {
		bound := max((1+epsilon)*mean, maxBase, mean+maxJumbo) * (1 + 1e-9)
		for s, l := range load {
			require.LessOrEqual(t, l, bound, "slot %d", s)
		}
	}

	order := make([]int, len(jumbos))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return heavierFirst(jumbos[a].Weight, jumbos[b].Weight, jumbos[a].ID, jumbos[b].ID)
	})
	replay := append([]float64(nil), base...)
	for _, i := range order {
		j := jumbos[i]
		evacuee := kept(((j.Home % slots) + slots) % slots)
		sum, usable := 0.0, 0
		for s, l := range replay {
			if !(evacuee && kept(s)) {
				sum += l
				usable++
			}
		}
		if usable > 0 && sum/float64(usable)+j.Weight <= (1+epsilon/2)*mean*(1-1e-9) {
			require.LessOrEqual(t, replay[got[i]]+j.Weight, (1+epsilon)*mean*(1+1e-9),
				"jumbo %d fell back although its usable slots average %.4f × M", i, sum/float64(usable)/mean)
		}
		replay[got[i]] += j.Weight
	}

	if giant != nil {
		return false
	}
	after := 0.0 // the weight of the jumbo and those after it
	for _, j := range jumbos {
		after += j.Weight
	}
	for _, i := range order {
		if jumbos[i].Weight > epsilon/2*mean+after/float64(slots)-1e-9*mean {
			return false
		}
		after -= jumbos[i].Weight
	}
	for s, l := range load {
		require.LessOrEqual(t, l, max((1+epsilon)*mean, base[s])*(1+1e-9), "slot %d: the condition held", s)
	}
	return true
}

func randomJumbos(rng *rand.Rand, n, slots int, withPrev bool) []Jumbo {
	out := make([]Jumbo, n)
	for i := range out {
		var id [16]byte
		for k := range id {
			id[k] = byte(rng.UintN(256))
		}
		prev := -1
		if withPrev && rng.IntN(2) == 0 {
			prev = rng.IntN(slots)
		}
		out[i] = Jumbo{ID: id, Weight: math.Pow(1-rng.Float64(), -1/1.5) * 10, Home: rng.IntN(slots), Prev: prev}
	}
	return out
}

func TestBalance(t *testing.T) {
	t.Parallel()

	t.Run("DeterministicWhateverTheOrder", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(1, 2))
		base := make([]float64, 64)
		for s := range base {
			base[s] = 900 + rng.Float64()*200
		}
		jumbos := randomJumbos(rng, 300, len(base), true)
		jumbos[1].Weight = jumbos[0].Weight // a tie, broken by ID
		first, _ := checkBalance(t, base, jumbos, 0.1)
		bySlot := map[[16]byte]int{}
		for i, j := range jumbos {
			bySlot[j.ID] = first[i]
		}
		for range 5 {
			shuffled := append([]Jumbo(nil), jumbos...)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			again := Balance(base, shuffled, 0.1)
			for i, j := range shuffled {
				require.Equal(t, bySlot[j.ID], again[i], "jumbo %x", j.ID)
			}
		}
	})

	t.Run("KeepsPreviousSlotWithinLooseBound", func(t *testing.T) {
		t.Parallel()
		// Four slots of 100; mean (400 + 20) / 4 = 105. Slot 3 with the
		// jumbo would hold 120 > (1 + 0.1) × 105 = 115.5, so the pin moves.
		base := []float64{100, 100, 100, 100}
		got := Balance(base, []Jumbo{{Weight: 20, Home: 0, Prev: 3}}, 0.1)
		require.Equal(t, []int{0}, got, "120 is over the keep bound 115.5: the jumbo walks from its home slot, all equal, so it lands home")

		// With slot 3 lighter (90): 110 <= 115.5, the pin stays although the
		// walk from home would pick slot 0 (100 + 20 = 120 > 110.25, then
		// slot 1, 2: same; slot 3: 110 <= 110.25).
		base = []float64{100, 100, 100, 90}
		require.Equal(t, []int{3}, Balance(base, []Jumbo{{Weight: 20, Home: 1, Prev: 3}}, 0.1))
		// Prev 2 (100 + 20 = 120 > (1.1) × 102.5 = 112.75) is not kept: it walks from home 1 to the first slot within 1.05 × 102.5 = 107.6: none of 0-2, slot 3 (110)? also no; lightest is 3.
		require.Equal(t, []int{3}, Balance(base, []Jumbo{{Weight: 20, Home: 1, Prev: 2}}, 0.1))
	})

	t.Run("WalksFromHome", func(t *testing.T) {
		t.Parallel()
		base := []float64{100, 120, 80, 80}
		// total 380 + 20 = 400, mean 100, place bound 105: slot 1 (140) no, slot 2 (100) yes.
		require.Equal(t, []int{2}, Balance(base, []Jumbo{{Weight: 20, Home: 1, Prev: -1}}, 0.1))
		// Home 3: 100 <= 105 at once.
		require.Equal(t, []int{3}, Balance(base, []Jumbo{{Weight: 20, Home: 3, Prev: -1}}, 0.1))
	})

	t.Run("RandomInputsKeepTheBound", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(7, 7))
		met := 0
		for range 200 {
			slots := 1 << (1 + rng.IntN(8))
			base := make([]float64, slots)
			for s := range base {
				base[s] = rng.Float64() * 1000
			}
			jumbos := randomJumbos(rng, rng.IntN(500), slots, rng.IntN(2) == 0)
			epsilon := 0.05 + rng.Float64()*0.3
			if _, ok := checkBalance(t, base, jumbos, epsilon); ok {
				met++
			}
			giant := make([]bool, slots)
			for range rng.IntN(slots/4 + 1) {
				giant[rng.IntN(slots)] = true
			}
			release := make([]bool, len(jumbos))
			for i := range release {
				release[i] = jumbos[i].Prev >= 0 && rng.IntN(2) == 0
			}
			got, released := balance(base, jumbos, epsilon, giant, release)
			checkPlacement(t, base, jumbos, giant, release, got, released, epsilon)
		}
		require.Greater(t, met, 50, "the tight bound's condition held in %d of 200 inputs", met)
	})

	t.Run("BoundNeedsRoomForTheHeaviest", func(t *testing.T) {
		t.Parallel()
		// Two empty slots, three jumbos of 10: M = 15, the walk's bound
		// 15.75. The first two take a slot each; the third fits nowhere
		// and goes to the lightest: 20 = 1.33 × M. The condition fails for
		// it: 10 > 0.05 × 15 + 10/2.
		base := []float64{0, 0}
		jumbos := []Jumbo{{ID: [16]byte{1}, Weight: 10, Prev: -1}, {ID: [16]byte{2}, Weight: 10, Prev: -1}, {ID: [16]byte{3}, Weight: 10, Prev: -1}}
		got, ok := checkBalance(t, base, jumbos, 0.1)
		require.False(t, ok)
		require.Equal(t, []int{0, 1, 0}, got)
	})
}

// A previous pin marked for release drops its pin where that moves
// nothing, returns to its hash slot within the budget of epsilon/2 × M of
// weight that changes slot, keeps its pin when its hash slot has no room,
// and returns home anyway when it has to move.
func TestRelease(t *testing.T) {
	t.Parallel()
	id := func(b byte) [16]byte { return [16]byte{b} }
	place := func(t *testing.T, base []float64, jumbos []Jumbo, release []bool) ([]int, []bool) {
		t.Helper()
		got, released := balance(base, jumbos, 0.1, nil, release)
		checkPlacement(t, base, jumbos, nil, release, got, released, 0.1)
		return got, released
	}

	t.Run("DropsAPinToItsOwnSlot", func(t *testing.T) {
		t.Parallel()
		// Four slots of 100 and a 5 pinned to its own hash slot 2: M =
		// 101.25, slot 2 with it 105 <= 111.4.
		got, released := place(t, []float64{100, 100, 100, 100}, []Jumbo{{ID: id(1), Weight: 5, Home: 2, Prev: 2}}, []bool{true})
		require.Equal(t, []int{2}, got)
		require.Equal(t, []bool{true}, released)
	})

	t.Run("ReturnsHomeWithinTheBudget", func(t *testing.T) {
		t.Parallel()
		// Slot 0 holds 40 of ordinary weight, slots 1-3 100, 100 and 80;
		// four released pins of 4, 3, 2 and 1, hashed to slot 0, sit in
		// slot 3. M = (320 + 10) / 4 = 82.5: the budget of weight changing
		// slot is 0.05 × 82.5 = 4.125, keep 90.75, place 86.6.
		base := []float64{40, 100, 100, 80}
		jumbos := []Jumbo{
			{ID: id(1), Weight: 4, Home: 0, Prev: 3},
			{ID: id(2), Weight: 3, Home: 0, Prev: 3},
			{ID: id(3), Weight: 2, Home: 0, Prev: 3},
			{ID: id(4), Weight: 1, Home: 0, Prev: 3},
		}
		got, released := place(t, base, jumbos, []bool{true, true, true, true})
		// The 4 goes home (budget 0.125 left); the 3, 2 and 1 exceed it and
		// keep slot 3 (80 + 6 = 86 <= 90.75).
		require.Equal(t, []int{0, 3, 3, 3}, got)
		require.Equal(t, []bool{true, false, false, false}, released)
	})

	t.Run("KeepsItsPinWithoutRoomAtHome", func(t *testing.T) {
		t.Parallel()
		// Its hash slot 0 is full (M = 101.25, 104 + 5 > 106.3): it keeps
		// slot 3.
		got, released := place(t, []float64{104, 100, 100, 96}, []Jumbo{{ID: id(1), Weight: 5, Home: 0, Prev: 3}}, []bool{true})
		require.Equal(t, []int{3}, got)
		require.Equal(t, []bool{false}, released)
	})

	t.Run("MovesHomeWhenItMovesAnyway", func(t *testing.T) {
		t.Parallel()
		// A released 30 in slot 3 whose hash slot 0 is light: M = 100,
		// budget 5, keep 110, place 105. The 30 is over the budget, and
		// slot 3 with it is 120 > 110: it must move, and goes home (70 +
		// 30 = 100), not to a new pin.
		got, released := place(t, []float64{70, 110, 100, 90}, []Jumbo{{ID: id(1), Weight: 30, Home: 0, Prev: 3}}, []bool{true})
		require.Equal(t, []int{0}, got)
		require.Equal(t, []bool{true}, released)
	})
}

// PlacePins releases a previous pin once its weight is at most 0.8 × T and
// keeps it in the band above.
func TestPlacePinsHysteresis(t *testing.T) {
	t.Parallel()
	// Four slots of 1000 (M = 1000, every ordinary account at most 50).
	// JumboThreshold pins the 51 and the 40 (the room rule: the rest must
	// average at most 1025 - 51 = 974 per slot), and the two 20s; the rest
	// (10 and below) meets every limit, so T = 10. The 9, pinned before, is
	// in the band (8, 10]: it stays pinned in slot 3. The 7 is at most
	// 0.8 × T: released, it returns to its hash slot 2.
	candidates := []Jumbo{
		{ID: [16]byte{1}, Weight: 51, Home: 0, Prev: -1},
		{ID: [16]byte{2}, Weight: 40, Home: 1, Prev: -1},
		{ID: [16]byte{3}, Weight: 20, Home: 2, Prev: -1},
		{ID: [16]byte{4}, Weight: 20, Home: 3, Prev: -1},
		{ID: [16]byte{5}, Weight: 10, Home: 0, Prev: -1},
		{ID: [16]byte{6}, Weight: 9, Home: 1, Prev: 3},
		{ID: [16]byte{7}, Weight: 7, Home: 2, Prev: 3},
	}
	sumSq := 100.0 // the ordinary accounts
	for _, c := range candidates {
		sumSq += c.Weight * c.Weight
	}
	threshold, pins := PlacePins([]float64{1000, 1000, 1000, 1000}, sumSq, candidates, 0.1)
	require.InDelta(t, 10.0, threshold, 0)
	slot := map[byte]int{}
	for _, p := range pins {
		slot[p.ID[0]] = p.Slot
	}
	require.Equal(t, map[byte]int{1: 0, 2: 1, 3: 2, 4: 3, 6: 3}, slot)
}

func TestJumboThreshold(t *testing.T) {
	t.Parallel()

	t.Run("NothingToPin", func(t *testing.T) {
		t.Parallel()
		// 100,000 accounts of weight 1 over 4 slots: M = 25,000, a slot's
		// standard deviation sqrt(100,000 / 4) = 158 is under epsilon/4 × M
		// = 625, and every account is far under epsilon/2 × M.
		require.True(t, math.IsInf(JumboThreshold([]float64{1, 1, 1}, 100_000, 100_000, 4, 0.1), 1))
		// 1,000 of them: the deviation sqrt(250) = 15.8 exceeds 0.025 × 250:
		// pinning is needed, and desc runs out: the threshold is its
		// lightest weight.
		require.InDelta(t, 1.0, JumboThreshold([]float64{1, 1, 1}, 1000, 1000, 4, 0.1), 0)
	})

	t.Run("PinsHeavyAccountsWithTheirTies", func(t *testing.T) {
		t.Parallel()
		// 1000 accounts: two of 100, three of 50, 995 of 1. Total 1345,
		// M = 336.25 over 4 slots; epsilon/2 × M = 16.8, so 100 and 50 are
		// pinned, all three 50s together, and 1 is not.
		desc := []float64{100, 100, 50, 50, 50, 1, 1}
		total := 200 + 150 + 995.0
		sumSq := 2*100*100 + 3*50*50 + 995.0
		got := JumboThreshold(desc, total, sumSq, 4, 0.1)
		require.InDelta(t, 1.0, got, 0)
	})

	t.Run("RunsOutOfCandidates", func(t *testing.T) {
		t.Parallel()
		got := JumboThreshold([]float64{100, 90}, 1000, 1e9, 4, 0.1)
		require.InDelta(t, 90.0, got, 0)
	})
}

// FuzzBalance checks Balance's bound and range on arbitrary loads and
// jumbos.
func FuzzBalance(f *testing.F) {
	f.Add(uint64(1), uint8(7), uint16(100), 0.1)
	f.Add(uint64(2), uint8(1), uint16(0), 0.5)
	f.Add(uint64(3), uint8(255), uint16(2000), 0.01)
	f.Fuzz(func(t *testing.T, seed uint64, slots8 uint8, n uint16, epsilon float64) {
		if epsilon <= 0 || epsilon > 1 || math.IsNaN(epsilon) {
			return
		}
		slots := int(slots8) + 1
		rng := rand.New(rand.NewPCG(seed, 0))
		base := make([]float64, slots)
		for s := range base {
			base[s] = rng.Float64() * 1000
		}
		jumbos := randomJumbos(rng, int(n%2048), slots, seed%2 == 0)
		checkBalance(t, base, jumbos, epsilon)
		// As PlacePinsReserved calls it: up to a quarter of the slots kept
		// for giants, some earlier pins released.
		giant := make([]bool, slots)
		for range rng.IntN(slots/4 + 1) {
			giant[rng.IntN(slots)] = true
		}
		release := make([]bool, len(jumbos))
		for i := range release {
			release[i] = jumbos[i].Prev >= 0 && rng.IntN(2) == 0
		}
		got, released := balance(base, jumbos, epsilon, giant, release)
		checkPlacement(t, base, jumbos, giant, release, got, released, epsilon)
	})
}

// A giant (heavier than half a mean slot) gets a slot of its own: the
// accounts hashed there are evacuated, so that slot carries the giant
// alone and the others stay within (1 + epsilon) x the mean.
func TestPlacePinsReservedGiant(t *testing.T) {
	t.Parallel()
	const slots, perSlot = 128, 100
	rng := rand.New(rand.NewPCG(3, 4))
	totals := make([]float64, slots)
	byHome := make([][]Jumbo, slots)
	var sumSq float64
	var candidates []Jumbo
	for s := range slots {
		for i := range perSlot {
			w := 1 + rng.Float64()
			var id [16]byte
			id[0], id[1], id[2] = byte(s), byte(i), byte(i>>8)
			totals[s] += w
			sumSq += w * w
			byHome[s] = append(byHome[s], Jumbo{ID: id, Weight: w, Home: s, Prev: -1})
		}
	}
	mean := func() float64 {
		var t float64
		for _, x := range totals {
			t += x
		}
		return t / slots
	}
	giant := Jumbo{ID: [16]byte{0xff}, Weight: 2.5 * mean(), Home: 5, Prev: -1}
	totals[5] += giant.Weight
	sumSq += giant.Weight * giant.Weight
	candidates = append(candidates, giant)
	m := mean()

	reserved := Giants(totals, candidates, 0.1)
	require.Len(t, reserved, 1)
	require.Equal(t, giant.ID, reserved[0].ID)
	kept := reserved[0].Slot
	evacuees := append([]Jumbo(nil), byHome[kept]...)
	if kept == 5 {
		evacuees = append(evacuees, giant)
	}
	_, pins := PlacePinsReserved(totals, sumSq, candidates, evacuees, reserved, 0.1)

	load := make([]float64, slots)
	pinned := map[[16]byte]int{}
	for _, p := range pins {
		pinned[p.ID] = p.Slot
	}
	for s := range slots {
		for _, a := range byHome[s] {
			slot := s
			if p, ok := pinned[a.ID]; ok {
				slot = p
			}
			require.False(t, slot == kept, "an ordinary account left in the giant's slot")
			load[slot] += a.Weight
		}
	}
	require.Equal(t, kept, pinned[giant.ID])
	load[kept] += giant.Weight
	w := giant.Weight / m
	for s, l := range load {
		require.LessOrEqual(t, l/m, max(1.1, w+0.1), "slot %d", s)
	}
	require.InDelta(t, w, load[kept]/m, 1e-9, "the giant's slot carries the giant alone")

	// Next cycle, the giant gone, with its former neighbours as the only
	// candidates: JumboThreshold runs out of candidates (the threshold is
	// their lightest weight), so none is light enough to be released and
	// all keep their slots: nobody moves. TestGiantNeighbours follows them
	// home in a fleet that needs no other pins.
	prevCandidates := []Jumbo{}
	for _, p := range pins {
		if p.ID == giant.ID {
			continue
		}
		for s := range slots {
			for _, a := range byHome[s] {
				if a.ID == p.ID {
					a.Prev = p.Slot
					prevCandidates = append(prevCandidates, a)
				}
			}
		}
	}
	totals[5] -= giant.Weight
	sumSq -= giant.Weight * giant.Weight
	require.Empty(t, Giants(totals, prevCandidates, 0.1))
	_, again := PlacePinsReserved(totals, sumSq, prevCandidates, nil, nil, 0.1)
	moved := 0
	for _, p := range again {
		if p.Slot != pinned[p.ID] {
			moved++
		}
	}
	require.Zero(t, moved)
	require.Len(t, again, len(pins)-1)
}
