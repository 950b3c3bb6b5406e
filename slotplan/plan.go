package slotplan

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

const (
	// Buckets is the default number of account buckets: an account's bucket
	// is the last byte (byte 15) of its UUID, so there are 256 of them.
	Buckets = 256

	// BucketsTwoByte is the finer bucket count: an account's bucket is
	// byte 15 × 256 + byte 14 of its UUID, 65,536 of them. The last byte
	// stays the high part, so a two-byte bucket's slot always lies inside
	// the slot its one-byte bucket has under the same cycle.
	BucketsTwoByte = 65536

	// CycleMin is the shortest cycle accepted. Shorter cycles cannot be split
	// into at least two slots of whole seconds.
	CycleMin = 2 * time.Second
)

// Plan is the slot layout of one cycle. Build it with New; the zero value is
// not usable.
type Plan struct {
	// Cycle is the length of one full cycle.
	Cycle time.Duration

	// Buckets is the number of account buckets: Buckets (256, one UUID
	// byte) or BucketsTwoByte (65,536, two bytes).
	Buckets int

	// Slots is the number of slots a cycle is split into: gcd(cycle in
	// whole seconds, 256) with 256 buckets, gcd(cycle in milliseconds,
	// 65,536) with 65,536. Always a power of two, from 2 to Buckets.
	Slots int

	// SlotDuration is Cycle / Slots: a whole number of seconds with 256
	// buckets, of milliseconds with 65,536.
	SlotDuration time.Duration

	// BucketsPerSlot is Buckets / Slots: how many consecutive bucket values
	// share one slot.
	BucketsPerSlot int
}

// ErrInvalidCycle is returned (wrapped) by New for a cycle that cannot be
// split into slots.
var ErrInvalidCycle = errors.New("invalid cycle")

// ErrInvalidBuckets is returned (wrapped) by NewBuckets for a bucket count
// other than Buckets and BucketsTwoByte.
var ErrInvalidBuckets = errors.New("invalid bucket count")

// New returns the plan for cycle with the default 256 buckets; see
// NewBuckets.
func New(cycle time.Duration) (Plan, error) {
	return NewBuckets(cycle, Buckets)
}

// NewBuckets returns the plan for cycle with the given number of buckets,
// Buckets (256) or BucketsTwoByte (65,536); another count is an error
// wrapping ErrInvalidBuckets. The cycle must be a whole number of seconds
// that is a multiple of 2 s, at least CycleMin, whatever the bucket count;
// otherwise the error wraps ErrInvalidCycle and says which lengths work.
// With 256 buckets it is split into gcd(cycle in seconds, 256) slots (any
// multiple of 2^k seconds yields 2^k slots, up to 256 slots for multiples
// of 256 s); with 65,536 buckets into gcd(cycle in milliseconds, 65,536)
// slots (24h: 1,024 slots of 1m24.375s; 64s: 512 slots of 125ms).
func NewBuckets(cycle time.Duration, buckets int) (Plan, error) {
	const works = "use a whole number of seconds that is a multiple of 2^k s, e.g. 120s (8 slots), 8h (128 slots) or 24h (128 slots); multiples of 256s give the full 256 slots"

	switch {
	case buckets != Buckets && buckets != BucketsTwoByte:
		return Plan{}, fmt.Errorf("%w: Buckets must be %d (one UUID byte) or %d (two bytes), got %d", ErrInvalidBuckets, Buckets, BucketsTwoByte, buckets)
	case cycle < CycleMin:
		return Plan{}, fmt.Errorf("%w: Cycle must be at least %s, got %s; %s", ErrInvalidCycle, CycleMin, cycle, works)
	case cycle%time.Second != 0:
		return Plan{}, fmt.Errorf("%w: Cycle must be a whole number of seconds, got %s; %s", ErrInvalidCycle, cycle, works)
	}

	seconds := int64(cycle / time.Second)
	slots := int(gcd(seconds, Buckets))
	if slots < 2 {
		return Plan{}, fmt.Errorf("%w: Cycle %s is an odd number of seconds and yields a single slot (gcd(%d, 256) = 1); %s", ErrInvalidCycle, cycle, seconds, works)
	}
	if buckets == BucketsTwoByte {
		// The same cycles are valid with either bucket count. An even
		// number of seconds is a multiple of 16 × 125 ms, so this is at
		// least 16, and a multiple of the 256-bucket slot count: each
		// slot of this plan lies inside one slot of that plan.
		slots = int(gcd(int64(cycle/time.Millisecond), BucketsTwoByte))
	}

	return Plan{
		Cycle:          cycle,
		Buckets:        buckets,
		Slots:          slots,
		SlotDuration:   cycle / time.Duration(slots),
		BucketsPerSlot: buckets / slots,
	}, nil
}

// SlotOfBucket returns the slot (0-based) that bucket, in [0, Buckets),
// belongs to.
func (p Plan) SlotOfBucket(bucket int) int {
	return bucket / p.BucketsPerSlot
}

// BucketOf returns the bucket of the account with the given UUID bytes:
// id[15] with 256 buckets, id[15]×256 + id[14] with 65,536. It mirrors
// sqlbucket.ExprFor.
func (p Plan) BucketOf(id [16]byte) int {
	return BucketOf(id, p.Buckets)
}

// BucketOf returns id's bucket among buckets (Buckets or BucketsTwoByte):
// id[15], or id[15]×256 + id[14].
func BucketOf(id [16]byte, buckets int) int {
	if buckets == BucketsTwoByte {
		return int(id[15])<<8 | int(id[14])
	}
	return int(id[15])
}

// SlotOf returns the slot of the account with the given UUID bytes.
func (p Plan) SlotOf(id [16]byte) int {
	return p.SlotOfBucket(p.BucketOf(id))
}

// BucketRange returns the inclusive range of bucket values [lo, hi] that make
// up slot. It panics if slot is out of range, which is a programming error.
func (p Plan) BucketRange(slot int) (lo, hi int) {
	if slot < 0 || slot >= p.Slots {
		panic(fmt.Sprintf("slotplan: slot %d out of range [0, %d)", slot, p.Slots))
	}
	lo = slot * p.BucketsPerSlot
	return lo, lo + p.BucketsPerSlot - 1
}

// SlotStart returns the absolute start of slot in the cycle that starts at
// cycleStart: cycleStart + slot*SlotDuration.
func (p Plan) SlotStart(cycleStart time.Time, slot int) time.Time {
	return cycleStart.Add(time.Duration(slot) * p.SlotDuration)
}

// Offset returns the account's fixed position inside its slot, a value in
// [0, SlotDuration) truncated to whole microseconds (Postgres' timestamp
// precision). It depends only on seed, the 16 bytes of id and SlotDuration,
// so it is the same every cycle, in every process, on every machine.
func (p Plan) Offset(seed uint64, id [16]byte) time.Duration {
	return OffsetIn(Hash(seed, id), p.SlotDuration)
}

// Target returns when the account's sync is due in the cycle that starts at
// cycleStart: the start of its slot plus its offset.
func (p Plan) Target(cycleStart time.Time, seed uint64, id [16]byte) time.Time {
	return p.SlotStart(cycleStart, p.SlotOf(id)).Add(p.Offset(seed, id))
}

// Shift moves slot by shift slots around the cycle: (slot + shift) mod
// Slots. A task with a phase serves the accounts of bucket slot k in slot
// Shift(k, shift), and selects for its slot k the buckets of Shift(k,
// -shift); two tasks shifted by Slots/2 never serve an account at the same
// time.
func (p Plan) Shift(slot, shift int) int {
	return ((slot+shift)%p.Slots + p.Slots) % p.Slots
}

// ShiftedTarget is Target for a task whose slots are shifted by shift.
func (p Plan) ShiftedTarget(cycleStart time.Time, seed uint64, id [16]byte, shift int) time.Time {
	return p.SlotStart(cycleStart, p.Shift(p.SlotOf(id), shift)).Add(p.Offset(seed, id))
}

// OffsetIn maps a 64-bit hash uniformly onto [0, window), truncated to whole
// microseconds, using the high word of hash*window_in_microseconds (Lemire's
// multiply-shift reduction, no modulo bias beyond 2^-64 relative).
func OffsetIn(hash uint64, window time.Duration) time.Duration {
	micros := uint64(window / time.Microsecond)
	hi, _ := bits.Mul64(hash, micros)
	return time.Duration(hi) * time.Microsecond
}

// Hash is the seeded 64-bit hash of a UUID's 16 bytes that offsets are drawn
// from. It is two rounds of the SplitMix64 finalizer, written out here so it
// can never change with a Go release:
//
//	h = mix(seed XOR big_endian_uint64(id[0:8]))
//	h = mix(h    XOR big_endian_uint64(id[8:16]))
//
// where mix(z) is SplitMix64's step: z += 0x9e3779b97f4a7c15, then the
// variant-13 finalizer (shifts 30, 27, 31; multipliers 0xbf58476d1ce4e5b9,
// 0x94d049bb133111eb).
func Hash(seed uint64, id [16]byte) uint64 {
	hi := beUint64(id[0:8])
	lo := beUint64(id[8:16])
	return SplitMix64(SplitMix64(seed^hi) ^ lo)
}

// SplitMix64 returns the SplitMix64 output for state z (Steele, Lea and Flood,
// 2014): the state is advanced by the golden gamma, then finalized.
func SplitMix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func beUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// SeedFromName is the default offset seed of a task: the FNV-1a 64-bit hash
// of its name (offset basis 0xcbf29ce484222325, prime 0x100000001b3), written
// out so it never changes.
func SeedFromName(name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	return h
}
