package slotplan

import (
	"testing"
	"time"
)

// FuzzPlan checks the plan math for any cycle, id and seed: New either
// rejects the cycle with ErrInvalidCycle or returns a plan whose slots tile
// the cycle and the 256 buckets, and whose offsets stay inside the slot; the
// 65,536-bucket plan of the same cycle nests in it. The
// seed corpus runs with every `go test`; `make fuzz` explores further.
func FuzzPlan(f *testing.F) {
	f.Add(int64(86400), []byte("0123456789abcdef"), uint64(0))
	f.Add(int64(120), []byte{15: 255}, uint64(42))
	f.Add(int64(3), []byte{}, uint64(1))
	f.Add(int64(-7), []byte{1, 2, 3}, uint64(1<<63))
	f.Add(int64(1<<40), []byte{15: 128}, ^uint64(0))
	f.Add(int64(86400), []byte{3, 0}, uint64(1741413600)) // Havana, 2025-03-08 06:00 UTC
	f.Add(int64(3600), []byte{6, 128}, uint64(972788460)) // Goose Bay, 2000-10-29 03:01 UTC

	f.Fuzz(func(t *testing.T, cycleSeconds int64, raw []byte, seed uint64) {
		if cycleSeconds > 1<<33 || cycleSeconds < -1<<33 {
			return // keep Duration arithmetic in range
		}
		var id [16]byte
		copy(id[:], raw)
		cycle := time.Duration(cycleSeconds) * time.Second

		p, err := New(cycle)
		if err != nil {
			if cycleSeconds >= 2 && cycleSeconds%2 == 0 {
				t.Fatalf("even cycle %s rejected: %v", cycle, err)
			}
			return
		}
		if p.Slots < 2 || p.Slots > 256 || p.Slots&(p.Slots-1) != 0 {
			t.Fatalf("slots %d not a power of two in [2, 256]", p.Slots)
		}
		if p.SlotDuration*time.Duration(p.Slots) != cycle || p.SlotDuration%time.Second != 0 {
			t.Fatalf("slot duration %s × %d != cycle %s", p.SlotDuration, p.Slots, cycle)
		}
		slot := p.SlotOf(id)
		lo, hi := p.BucketRange(slot)
		if int(id[15]) < lo || int(id[15]) > hi {
			t.Fatalf("bucket %d outside slot %d range [%d, %d]", id[15], slot, lo, hi)
		}
		off := p.Offset(seed, id)
		if off < 0 || off >= p.SlotDuration {
			t.Fatalf("offset %s outside [0, %s)", off, p.SlotDuration)
		}

		// The 65,536-bucket plan of the same cycle: valid exactly when the
		// 256-bucket plan is, whole milliseconds, and nested in it (each
		// fine slot inside the coarse slot of the same accounts).
		fp, err := NewBuckets(cycle, BucketsTwoByte)
		if err != nil {
			t.Fatalf("cycle %s valid with 256 buckets, rejected with 65536: %v", cycle, err)
		}
		if fp.Slots < 16 || fp.Slots > 65536 || fp.Slots&(fp.Slots-1) != 0 || fp.Slots%p.Slots != 0 {
			t.Fatalf("two-byte slots %d: not a power of two in [16, 65536] and a multiple of %d", fp.Slots, p.Slots)
		}
		if fp.SlotDuration*time.Duration(fp.Slots) != cycle || fp.SlotDuration%time.Millisecond != 0 {
			t.Fatalf("two-byte slot duration %s × %d != cycle %s", fp.SlotDuration, fp.Slots, cycle)
		}
		bucket := int(id[15])*256 + int(id[14])
		flo, fhi := fp.BucketRange(fp.SlotOf(id))
		if bucket < flo || bucket > fhi {
			t.Fatalf("two-byte bucket %d outside its slot's range [%d, %d]", bucket, flo, fhi)
		}
		from := fp.SlotStart(time.Time{}, fp.SlotOf(id))
		if c := p.SlotStart(time.Time{}, slot); from.Before(c) || from.Add(fp.SlotDuration).After(c.Add(p.SlotDuration)) {
			t.Fatalf("two-byte slot %d of %x not inside one-byte slot %d", fp.SlotOf(id), id, slot)
		}

		s := Schedule{Cycle: cycle}
		at := time.Unix(int64(seed%4_000_000_000), 0)
		start, next := s.Start(at), s.Next(at)
		if start.After(at) || !next.After(at) || next.Sub(start) != cycle {
			t.Fatalf("schedule at %s: start %s next %s", at, start, next)
		}

		// Wall-clock schedules: any zone of the list, any offset, any time
		// 1970-2096, for cycles that divide a day.
		if day%cycle != 0 {
			return
		}
		loc, err := time.LoadLocation(fuzzZones[int(id[0])%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		ws, err := NewSchedule(cycle, time.Duration(id[1])*cycle/256/time.Second*time.Second, loc)
		if err != nil {
			t.Fatal(err)
		}
		checkScheduleAt(t, ws, at)
	})
}

// fuzzZones are zones with unusual clock changes: at midnight, by 30 minutes,
// twice a year in both hemispheres, a skipped day, none.
var fuzzZones = []string{
	"UTC", "Europe/London", "America/New_York", "America/Havana", "America/Santiago",
	"Atlantic/Azores", "America/Goose_Bay", "Australia/Lord_Howe", "Pacific/Apia",
	"Asia/Tehran", "Africa/Casablanca", "Antarctica/Troll", "Asia/Kolkata", "America/Asuncion",
}
