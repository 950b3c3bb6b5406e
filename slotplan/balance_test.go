package slotplan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkBalance asserts Balance's bound on one input: every jumbo gets a slot
// in range, and no slot exceeds max((1 + epsilon) × M, the heaviest base
// slot, M + the heaviest jumbo), M the mean slot weight. A jumbo that fits
// nowhere goes to the lightest slot, which is at most M before it.
func checkBalance(t *testing.T, base []float64, jumbos []Jumbo, epsilon float64) []int {
	t.Helper()
	got := Balance(base, jumbos, epsilon)
	require.Len(t, got, len(jumbos))
	load := append([]float64(nil), base...)
	total, maxBase, maxJumbo := 0.0, 0.0, 0.0
	for _, b := range base {
		total += b
		maxBase = max(maxBase, b)
	}
	for i, j := range jumbos {
		require.GreaterOrEqual(t, got[i], 0)
		require.Less(t, got[i], len(base))
		load[got[i]] += j.Weight
		total += j.Weight
		maxJumbo = max(maxJumbo, j.Weight)
	}
	mean := total / float64(len(base))
	bound := max((1+epsilon)*mean, maxBase, mean+maxJumbo) * (1 + 1e-9)
	for s, l := range load {
		require.LessOrEqual(t, l, bound, "slot %d", s)
	}
	return got
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
		first := checkBalance(t, base, jumbos, 0.1)
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
		for range 200 {
			slots := 1 << (1 + rng.IntN(8))
			base := make([]float64, slots)
			for s := range base {
				base[s] = rng.Float64() * 1000
			}
			checkBalance(t, base, randomJumbos(rng, rng.IntN(500), slots, rng.IntN(2) == 0), 0.05+rng.Float64()*0.3)
		}
	})
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
		checkBalance(t, base, randomJumbos(rng, int(n%2048), slots, seed%2 == 0), epsilon)
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

	// Next cycle, the giant gone: its slot's former accounts keep their
	// pins (sticky), so nobody moves.
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
