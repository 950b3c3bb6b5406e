package slotplan

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("ValidCycles", func(t *testing.T) {
		t.Parallel()

		// Worked by hand: 86400 = 2^7 * 675, 28800 = 2^7 * 225, 120 = 2^3 * 15,
		// 43200 = 2^6 * 675, 512 = 2^9 (capped at 256), 6 = 2 * 3.
		for _, tt := range []struct {
			cycle   time.Duration
			slots   int
			slotDur time.Duration
			perSlot int
		}{
			{24 * time.Hour, 128, 675 * time.Second, 2},
			{8 * time.Hour, 128, 225 * time.Second, 2},
			{12 * time.Hour, 64, 675 * time.Second, 4},
			{120 * time.Second, 8, 15 * time.Second, 32},
			{512 * time.Second, 256, 2 * time.Second, 1},
			{6 * time.Second, 2, 3 * time.Second, 128},
			{2 * time.Second, 2, time.Second, 128},
		} {
			p, err := New(tt.cycle)
			require.NoError(t, err, "cycle %s", tt.cycle)
			require.Equal(t, tt.slots, p.Slots, "cycle %s", tt.cycle)
			require.Equal(t, tt.slotDur, p.SlotDuration, "cycle %s", tt.cycle)
			require.Equal(t, tt.perSlot, p.BucketsPerSlot, "cycle %s", tt.cycle)
			require.Equal(t, tt.cycle, p.SlotDuration*time.Duration(p.Slots))
		}
	})

	t.Run("RejectedCycles", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			cycle time.Duration
			want  string
		}{
			{0, "Cycle must be at least 2s, got 0s"},
			{-time.Hour, "Cycle must be at least 2s, got -1h0m0s"},
			{500 * time.Millisecond, "Cycle must be at least 2s, got 500ms"},
			{time.Second, "Cycle must be at least 2s, got 1s"},
			{2500 * time.Millisecond, "Cycle must be a whole number of seconds, got 2.5s"},
			{3 * time.Second, "yields a single slot (gcd(3, 256) = 1)"},
		} {
			_, err := New(tt.cycle)
			require.ErrorIs(t, err, ErrInvalidCycle, "cycle %s", tt.cycle)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "multiple of 2^k s", "error must say which cycle lengths work")
		}
	})
}

// TestSlotMath checks slot assignment against the definition for every bucket
// and every valid slot count.
func TestSlotMath(t *testing.T) {
	t.Parallel()

	for _, slots := range []int{2, 4, 8, 16, 32, 64, 128, 256} {
		p, err := New(time.Duration(slots) * time.Second)
		require.NoError(t, err)
		require.Equal(t, slots, p.Slots)

		counts := make([]int, slots)
		for b := range 256 {
			slot := p.SlotOfBucket(b)
			counts[slot]++
			lo, hi := p.BucketRange(slot)
			require.True(t, lo <= b && b <= hi, "bucket %d outside its slot range [%d,%d]", b, lo, hi)
		}
		for slot, n := range counts {
			require.Equal(t, 256/slots, n, "slot %d of %d", slot, slots)
		}

		// Ranges tile 0..255 without gaps.
		next := 0
		for slot := range slots {
			lo, hi := p.BucketRange(slot)
			require.Equal(t, next, lo)
			next = hi + 1
		}
		require.Equal(t, 256, next)
	}
}

func TestBucketRangePanicsOutOfRange(t *testing.T) {
	t.Parallel()

	p, err := New(120 * time.Second)
	require.NoError(t, err)
	require.Panics(t, func() { p.BucketRange(8) })
	require.Panics(t, func() { p.BucketRange(-1) })
}

func TestSplitMix64Reference(t *testing.T) {
	t.Parallel()

	// Published reference: the first output of SplitMix64 seeded with 0.
	require.Equal(t, uint64(0xe220a8397b1dcdaf), SplitMix64(0))
}

func mustID(t *testing.T, s string) [16]byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	require.NoError(t, err)
	var id [16]byte
	copy(id[:], b)
	return id
}

// TestOffsetGolden pins offsets. The expected values were computed by an
// independent Python implementation of the algorithm documented on Hash and
// OffsetIn (arbitrary-precision integers, no shared code):
//
//	M = 2**64 - 1
//	def sm(z):
//	    z = (z + 0x9e3779b97f4a7c15) & M
//	    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
//	    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
//	    return z ^ (z >> 31)
//	def h(seed, u):
//	    b = bytes.fromhex(u.replace('-', ''))
//	    return sm(sm(seed ^ int.from_bytes(b[:8], 'big')) ^ int.from_bytes(b[8:], 'big'))
//	def offset_us(seed, u, window_s):
//	    return (h(seed, u) * window_s * 1_000_000) >> 64
//
// If this test fails, every account in every deployment would move: do not
// update the vectors, fix the code.
func TestOffsetGolden(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		seed   uint64
		id     string
		window time.Duration
		hash   uint64
		offset time.Duration
	}{
		{0, "00000000-0000-0000-0000-000000000000", 675 * time.Second, 0xa706dd2f4d197e6f, 440402728 * time.Microsecond},
		{0, "ffffffff-ffff-ffff-ffff-ffffffffffff", 675 * time.Second, 0x6309143e67a47936, 261128667 * time.Microsecond},
		{42, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", 15 * time.Second, 0x6912a5ff4cc76471, 6156612 * time.Microsecond},
		{12345, "f47ac10b-58cc-4372-a567-0e02b2c3d479", 675 * time.Second, 0x504317da8e828a69, 211628538 * time.Microsecond},
		{3735928559, "123e4567-e89b-12d3-a456-426614174000", 3600 * time.Second, 0x9628a6fcb7e3815f, 2111608097 * time.Microsecond},
		{7, "c9bf9e57-1685-4c89-bafb-ff5af830be8a", 1 * time.Second, 0x44fd2d8306d1c5ce, 269488 * time.Microsecond},
	} {
		id := mustID(t, tt.id)
		require.Equal(t, tt.hash, Hash(tt.seed, id), "hash of %s seed %d", tt.id, tt.seed)
		require.Equal(t, tt.offset, OffsetIn(Hash(tt.seed, id), tt.window), "offset of %s seed %d", tt.id, tt.seed)
	}
}

func TestOffsetProperties(t *testing.T) {
	t.Parallel()

	p, err := New(24 * time.Hour)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))

	for range 10_000 {
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.UintN(256))
		}
		off := p.Offset(99, id)
		require.GreaterOrEqual(t, off, time.Duration(0))
		require.Less(t, off, p.SlotDuration)
		require.Zero(t, off%time.Microsecond)

		// Deterministic.
		require.Equal(t, off, p.Offset(99, id))

		// Target lies inside the slot window.
		start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
		target := p.Target(start, 99, id)
		slotStart := p.SlotStart(start, p.SlotOf(id))
		require.False(t, target.Before(slotStart))
		require.True(t, target.Before(slotStart.Add(p.SlotDuration)))
	}

	// Offsets depend on more than byte 15: two ids sharing byte 15 differ.
	a, b := [16]byte{15: 7}, [16]byte{0: 1, 15: 7}
	require.NotEqual(t, p.Offset(0, a), p.Offset(0, b))

	// The seed matters.
	require.NotEqual(t, p.Offset(0, a), p.Offset(1, a))
}

// TestOffsetUniform is a chi-square goodness-of-fit test of 100,000 offsets
// against the uniform distribution over 100 equal bins, overall, and over
// the ten tenths of a single slot (offsets must cover the whole slot and not
// correlate with the bucket byte). The ids come from a fixed-seed generator,
// so the test cannot fail by chance.
func TestOffsetUniform(t *testing.T) {
	t.Parallel()

	const (
		n    = 100_000
		bins = 100
		// Critical value of chi-square with 99 degrees of freedom at p = 0.001.
		critical = 148.23
	)

	p, err := New(24 * time.Hour)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(20261122, 7))

	chiSquare := func(counts []int, total int) float64 {
		expected := float64(total) / float64(len(counts))
		var chi float64
		for _, c := range counts {
			d := float64(c) - expected
			chi += d * d / expected
		}
		return chi
	}

	all := make([]int, bins)
	slot0 := make([]int, bins)
	slot0Total := 0
	for range n {
		var id [16]byte
		for i := range id {
			id[i] = byte(rng.UintN(256))
		}
		bin := int(int64(p.Offset(12345, id)) * bins / int64(p.SlotDuration))
		all[bin]++
		if p.SlotOf(id) == 0 {
			slot0[bin*10/bins]++ // 10 bins, each a tenth of the slot: about 780 ids land in slot 0
			slot0Total++
		}
	}

	chi := chiSquare(all, n)
	t.Logf("chi-square over %d offsets in %d bins: %.2f (critical %.2f at p=0.001, df=99)", n, bins, chi, critical)
	require.Less(t, chi, critical)

	// 9 degrees of freedom, p = 0.001: 27.88.
	chi0 := chiSquare(slot0[:10], slot0Total)
	t.Logf("chi-square within slot 0 (%d ids, 10 bins): %.2f (critical 27.88)", slot0Total, chi0)
	require.Less(t, chi0, 27.88)
	require.False(t, math.IsNaN(chi0))
}

func TestSeedFromName(t *testing.T) {
	t.Parallel()

	// FNV-1a 64 reference values (the empty string is the offset basis;
	// "a" is the published test vector 0xaf63dc4c8601ec8c).
	require.Equal(t, uint64(0xcbf29ce484222325), SeedFromName(""))
	require.Equal(t, uint64(0xaf63dc4c8601ec8c), SeedFromName("a"))
}

func TestShift(t *testing.T) {
	t.Parallel()

	p, err := New(120 * time.Second) // 8 slots of 15 s
	require.NoError(t, err)
	for slot := range 8 {
		require.Equal(t, (slot+4)%8, p.Shift(slot, 4))
		require.Equal(t, slot, p.Shift(p.Shift(slot, 3), -3), "shifting back undoes a shift")
		require.Equal(t, slot, p.Shift(slot, 8), "a whole turn")
	}
	require.Equal(t, 7, p.Shift(0, -1))

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := [16]byte{15: 0x05} // bucket 5: slot 0
	require.Equal(t, p.Target(start, 1, id).Add(4*15*time.Second), p.ShiftedTarget(start, 1, id, 4))
	id[15] = 0xf0 // bucket 240: slot 7, shifted by 4 to slot 3
	require.Equal(t, p.Target(start, 1, id).Add(-4*15*time.Second), p.ShiftedTarget(start, 1, id, 4))
}

func TestNewBuckets(t *testing.T) {
	t.Parallel()

	t.Run("TwoByteSlots", func(t *testing.T) {
		t.Parallel()

		// Worked by hand, in milliseconds: 86,400,000 = 2^10 * 84,375, so a
		// day has 1,024 slots of 84,375 ms = 1m24.375s; 64,000 = 2^9 * 125
		// (512 slots of 125 ms); 28,800,000 = 2^10 * 28,125 (1,024 slots of
		// 28.125 s); 120,000 = 2^6 * 1,875 (64 slots of 1.875 s); 16,000 =
		// 2^7 * 125; 2^16 s = 65,536,000 ms = 2^16 * 1,000 (capped at 65,536
		// slots of 1 s).
		for _, tt := range []struct {
			cycle   time.Duration
			slots   int
			slotDur time.Duration
		}{
			{24 * time.Hour, 1024, time.Minute + 24*time.Second + 375*time.Millisecond},
			{64 * time.Second, 512, 125 * time.Millisecond},
			{8 * time.Hour, 1024, 28*time.Second + 125*time.Millisecond},
			{120 * time.Second, 64, 1875 * time.Millisecond},
			{16 * time.Second, 128, 125 * time.Millisecond},
			{65536 * time.Second, 65536, time.Second},
		} {
			p, err := NewBuckets(tt.cycle, BucketsTwoByte)
			require.NoError(t, err, "cycle %s", tt.cycle)
			require.Equal(t, BucketsTwoByte, p.Buckets)
			require.Equal(t, tt.slots, p.Slots, "cycle %s", tt.cycle)
			require.Equal(t, tt.slotDur, p.SlotDuration, "cycle %s", tt.cycle)
			require.Equal(t, 65536/tt.slots, p.BucketsPerSlot, "cycle %s", tt.cycle)
			require.Equal(t, tt.cycle, p.SlotDuration*time.Duration(p.Slots))
		}
		require.Equal(t, "1m24.375s", mustNewBuckets(t, 24*time.Hour, BucketsTwoByte).SlotDuration.String())
	})

	t.Run("DefaultIsOneByte", func(t *testing.T) {
		t.Parallel()

		p, err := New(24 * time.Hour)
		require.NoError(t, err)
		require.Equal(t, Buckets, p.Buckets)
		require.Equal(t, mustNewBuckets(t, 24*time.Hour, Buckets), p)
	})

	t.Run("RejectedBuckets", func(t *testing.T) {
		t.Parallel()

		for _, buckets := range []int{0, 1, 128, 255, 512, 4096, 65535, 1 << 20} {
			_, err := NewBuckets(24*time.Hour, buckets)
			require.ErrorIs(t, err, ErrInvalidBuckets, "buckets %d", buckets)
			require.ErrorContains(t, err, "Buckets must be 256 (one UUID byte) or 65536 (two bytes), got")
		}
	})

	t.Run("SameCyclesValid", func(t *testing.T) {
		t.Parallel()

		for _, cycle := range []time.Duration{time.Second, 3 * time.Second, 17 * time.Second, 2500 * time.Millisecond} {
			_, err := NewBuckets(cycle, BucketsTwoByte)
			require.ErrorIs(t, err, ErrInvalidCycle, "cycle %s", cycle)
		}
	})
}

func mustNewBuckets(t *testing.T, cycle time.Duration, buckets int) Plan {
	t.Helper()
	p, err := NewBuckets(cycle, buckets)
	require.NoError(t, err)
	return p
}

// TestBucketOf checks the two-byte bucket against its definition, byte 15
// as the high part and byte 14 as the low part, and the one-byte bucket
// against byte 15, written out by hand.
func TestBucketOf(t *testing.T) {
	t.Parallel()

	id := [16]byte{14: 0x34, 15: 0x12}
	require.Equal(t, 0x12, BucketOf(id, Buckets))
	require.Equal(t, 0x1234, BucketOf(id, BucketsTwoByte))
	require.Equal(t, 4660, mustNewBuckets(t, 65536*time.Second, BucketsTwoByte).SlotOf(id)) // one bucket a slot
	id = [16]byte{0: 0xff, 13: 0xff, 14: 0xff, 15: 0x00}
	require.Equal(t, 0, BucketOf(id, Buckets))
	require.Equal(t, 255, BucketOf(id, BucketsTwoByte))
	id[15] = 0xff
	require.Equal(t, 65535, BucketOf(id, BucketsTwoByte))
}

// TestTwoByteNests checks, for every cycle tested here, that the 65,536-bucket
// plan nests in the 256-bucket plan: its slot count is a multiple of the
// one-byte plan's, each of its slots covers a time window inside the window
// of the one-byte slot of the same accounts, and so every account is served
// inside its old slot. Accounts are drawn at random and at every boundary of
// byte 14 and byte 15.
func TestTwoByteNests(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(18, 2))
	var cycles []time.Duration
	for s := int64(16); s <= 2*86400; s += 2 {
		if s <= 1024 || s%86400 == 0 || s%3600 == 0 || s%256 == 0 {
			cycles = append(cycles, time.Duration(s)*time.Second)
		}
	}
	cycles = append(cycles, 65536*time.Second, 7*24*time.Hour)
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, cycle := range cycles {
		coarse := mustNewBuckets(t, cycle, Buckets)
		fine := mustNewBuckets(t, cycle, BucketsTwoByte)
		require.Zero(t, fine.Slots%coarse.Slots, "cycle %s: %d fine slots, %d coarse", cycle, fine.Slots, coarse.Slots)
		require.Greater(t, fine.Slots, coarse.Slots, "cycle %s", cycle)

		ids := make([][16]byte, 0, 64)
		for _, b := range [][2]byte{{0, 0}, {0, 255}, {255, 0}, {255, 255}, {1, 0}, {0, 1}, {127, 255}, {128, 0}} {
			ids = append(ids, [16]byte{14: b[1], 15: b[0]})
		}
		for range 56 {
			var id [16]byte
			for k := range id {
				id[k] = byte(rng.UintN(256))
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			cs, fs := coarse.SlotOf(id), fine.SlotOf(id)
			cFrom, fFrom := coarse.SlotStart(start, cs), fine.SlotStart(start, fs)
			cTo, fTo := cFrom.Add(coarse.SlotDuration), fFrom.Add(fine.SlotDuration)
			require.False(t, fFrom.Before(cFrom) || fTo.After(cTo), "cycle %s id %x: fine slot %d [%s, %s) outside coarse slot %d [%s, %s)",
				cycle, id, fs, fFrom, fTo, cs, cFrom, cTo)
			due := fine.Target(start, 7, id)
			require.False(t, due.Before(cFrom) || !due.Before(cTo), "cycle %s id %x: due %s outside coarse slot", cycle, id, due)
		}
	}
}
