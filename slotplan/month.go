package slotplan

import (
	"errors"
	"math/bits"
	"time"
)

// Monthly is the plan of a cycle of one calendar month in a time zone. An
// account's place is a fixed fraction of the month, the same every month:
// it is due at the month's start plus that fraction of the month's length,
// so it is due once in every month, and a 28-day month carries the same
// load per second as a 31-day one (no pile-up on the 28th to the 31st, as
// with day-of-month anchors). The month's slots are its calendar days in
// the zone (23 or 25 hours on a DST change): each day's per-slot job
// selects the accounts due that day, by a range of the 65,536 buckets.
//
// The fraction is the account's bucket (BucketOf with BucketsTwoByte,
// the last two bytes of its UUID) as the high 16 bits of a 64-bit
// fixed-point fraction, and the seeded Hash of its 16 bytes as the low 48:
// accounts of one bucket are spread over their 1/65,536 of the month, and
// the buckets of a day are a contiguous range.
type Monthly struct {
	loc *time.Location
}

// NewMonthly returns the monthly plan in loc (time.UTC for UTC months).
func NewMonthly(loc *time.Location) (Monthly, error) {
	if loc == nil {
		return Monthly{}, errors.New("a monthly cycle needs a time zone (Location); use time.UTC for UTC months")
	}
	return Monthly{loc: loc}, nil
}

// Location is the plan's time zone.
func (m Monthly) Location() *time.Location { return m.loc }

// MonthStart returns the start (midnight of the first day, in the plan's
// zone) of the month holding t.
func (m Monthly) MonthStart(t time.Time) time.Time {
	y, mo, _ := t.In(m.loc).Date()
	return m.dayStart(y, mo, 1)
}

// NextMonth returns the start of the month after the one starting at
// monthStart.
func (m Monthly) NextMonth(monthStart time.Time) time.Time {
	y, mo, _ := monthStart.In(m.loc).Date()
	return m.dayStart(y, mo+1, 1)
}

// Days returns how many days (slots) the month starting at monthStart
// has.
func (m Monthly) Days(monthStart time.Time) int {
	y, mo, _ := monthStart.In(m.loc).Date()
	return time.Date(y, mo+1, 0, 12, 0, 0, 0, time.UTC).Day()
}

// DayStart returns the start of day (0-based: 0 is the 1st) of the month
// starting at monthStart; day Days(monthStart) is the next month's start.
func (m Monthly) DayStart(monthStart time.Time, day int) time.Time {
	y, mo, _ := monthStart.In(m.loc).Date()
	return m.dayStart(y, mo, 1+day)
}

// dayStart is the first instant of the local date (y, mo, d), normalized
// as time.Date does: midnight, or the first instant after a gap at
// midnight (a zone that springs forward at 00:00).
func (m Monthly) dayStart(y int, mo time.Month, d int) time.Time {
	return wallClock(y, mo, d, 0, m.loc)
}

// Fraction returns the account's place in every month, a 64-bit
// fixed-point fraction (the month's start is 0, its end 2^64).
func Fraction(seed uint64, id [16]byte) uint64 {
	return uint64(BucketOf(id, BucketsTwoByte))<<48 | Hash(seed, id)>>16
}

// Target returns when the account is due in the month starting at
// monthStart: its start plus the account's fraction of the month's
// length, truncated to whole microseconds.
func (m Monthly) Target(monthStart time.Time, seed uint64, id [16]byte) time.Time {
	return monthStart.Add(fractionOf(Fraction(seed, id), m.NextMonth(monthStart).Sub(monthStart)))
}

// fractionOf is fraction f (of 2^64) of length, truncated to whole
// microseconds.
func fractionOf(f uint64, length time.Duration) time.Duration {
	hi, _ := bits.Mul64(f, uint64(length/time.Microsecond))
	return time.Duration(hi) * time.Microsecond
}

// DayOf returns the day (0-based) of the month starting at monthStart on
// which the account is due.
func (m Monthly) DayOf(monthStart time.Time, seed uint64, id [16]byte) int {
	return m.dayAt(monthStart, m.Target(monthStart, seed, id))
}

// dayAt returns the day (0-based) of the month starting at monthStart
// that holds the instant due, in the month.
func (m Monthly) dayAt(monthStart, due time.Time) int {
	// The days' starts are increasing: find the last at or before due.
	lo, hi := 0, m.Days(monthStart)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if m.DayStart(monthStart, mid).After(due) {
			hi = mid - 1
		} else {
			lo = mid
		}
	}
	return lo
}

// DayBuckets returns the inclusive range [lo, hi] of the 65,536 buckets
// whose accounts may be due on day of the month starting at monthStart.
// A bucket on the boundary of two days belongs to both ranges: its
// accounts are split between the days by their Target (DayOf).
func (m Monthly) DayBuckets(monthStart time.Time, day int) (lo, hi int) {
	length := m.NextMonth(monthStart).Sub(monthStart)
	from, to := m.DayStart(monthStart, day).Sub(monthStart), m.DayStart(monthStart, day+1).Sub(monthStart)
	// The first bucket whose span ends after from, the last whose span
	// starts before to: bucket b spans [fractionOf(b<<48), fractionOf((b+1)<<48)).
	lo = bucketAt(from, length)
	hi = bucketAt(to, length)
	if hi > lo && fractionOf(uint64(hi)<<48, length) >= to {
		hi-- // to is on the bucket's first microsecond: the next day's
	}
	return lo, min(hi, BucketsTwoByte-1)
}

// bucketAt returns the bucket whose span holds offset d of a month of
// length (BucketsTwoByte at or past its end).
func bucketAt(d, length time.Duration) int {
	if d >= length {
		return BucketsTwoByte
	}
	lo, hi := 0, BucketsTwoByte-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fractionOf(uint64(mid)<<48, length) > d {
			hi = mid - 1
		} else {
			lo = mid
		}
	}
	return lo
}

// BucketDay returns the day (0-based) of the month starting at monthStart
// on which bucket (of the 65,536) starts: all its accounts are due that
// day, but for a bucket on the boundary of two days, whose later accounts
// are due the next (DayOf tells each account's).
func (m Monthly) BucketDay(monthStart time.Time, bucket int) int {
	length := m.NextMonth(monthStart).Sub(monthStart)
	return m.dayAt(monthStart, monthStart.Add(fractionOf(uint64(bucket)<<48, length)))
}
