// Package slotplan is riverslot's schedule math: cycle to slots, bucket to
// slot, and each account's fixed offset inside its slot. It has no
// dependencies beyond the standard library, and every tier (bootstrap,
// perslot, syncjob), the SQL predicate builder and the riverslot command use
// it, so they cannot disagree.
//
// A cycle of C whole seconds is split into gcd(C, 256) slots of equal length.
// An account's bucket is the last byte of its UUID (0..255); consecutive runs
// of 256/slots buckets form one slot. Inside its slot an account is placed at
// a seeded pseudo-random offset derived from all 16 bytes of its UUID, so the
// account is due at the same moment every cycle:
//
//	plan, err := slotplan.New(24 * time.Hour) // 128 slots of 11m15s
//	slot := plan.SlotOf(accountID)            // accountID is a [16]byte / uuid.UUID
//	due := plan.Target(cycleStart, seed, accountID)
//
// A plan of 65,536 buckets (NewBuckets with BucketsTwoByte) reads two bytes:
// bucket = byte 15 × 256 + byte 14, and a cycle of C milliseconds is split
// into gcd(C, 65,536) slots (24h: 1,024 slots of 1m24.375s). The last byte
// stays the high part, so each of its slots lies inside the 256-bucket
// slot of the same accounts:
//
//	plan, err := slotplan.NewBuckets(24*time.Hour, slotplan.BucketsTwoByte)
//
// Balance, JumboThreshold and PlacePins are the weighted placement: which
// heavy accounts to pin, and to which slots, so that every slot's total
// weight stays within 1 + epsilon of the mean.
//
// Schedule describes where cycles start (an absolute grid, or wall-clock
// starts in a time zone) and doubles as a River periodic schedule.
package slotplan
