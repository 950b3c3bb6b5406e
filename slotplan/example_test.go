package slotplan_test

import (
	"fmt"
	"time"

	"github.com/riverslot/riverslot/slotplan"
)

// A 24h cycle: 86,400 = 2^7 × 675, so 128 slots of 675 s; each slot holds
// two bucket values.
func ExampleNew() {
	plan, err := slotplan.New(24 * time.Hour)
	if err != nil {
		panic(err)
	}
	lo, hi := plan.BucketRange(100)
	fmt.Println(plan.Slots, plan.SlotDuration, plan.BucketsPerSlot)
	fmt.Printf("slot 100 holds buckets %d-%d\n", lo, hi)

	_, err = slotplan.New(3 * time.Second)
	fmt.Println(err != nil)
	// Output:
	// 128 11m15s 2
	// slot 100 holds buckets 200-201
	// true
}

// 65,536 buckets: 86,400,000 ms = 2^10 × 84,375, so a day has 1,024 slots
// of 1m24.375s, each 64 two-byte buckets. The account of ExamplePlan_Target
// (bytes 14-15 0xd4 0x79: bucket 0x79d4 = 31,188) is in slot 487, the
// eighth of the eight fine slots inside its one-byte slot 60 (480-487).
func ExampleNewBuckets() {
	plan, err := slotplan.NewBuckets(24*time.Hour, slotplan.BucketsTwoByte)
	if err != nil {
		panic(err)
	}
	id := [16]byte{0xf4, 0x7a, 0xc1, 0x0b, 0x58, 0xcc, 0x43, 0x72, 0xa5, 0x67, 0x0e, 0x02, 0xb2, 0xc3, 0xd4, 0x79}
	fmt.Println(plan.Slots, plan.SlotDuration, plan.BucketsPerSlot)
	fmt.Println(plan.BucketOf(id), plan.SlotOf(id))

	_, err = slotplan.NewBuckets(24*time.Hour, 4096)
	fmt.Println(err)
	// Output:
	// 1024 1m24.375s 64
	// 31188 487
	// invalid bucket count: Buckets must be 256 (one UUID byte) or 65536 (two bytes), got 4096
}

// An account's due time in a cycle: its slot's start plus its fixed offset.
func ExamplePlan_Target() {
	plan, _ := slotplan.New(24 * time.Hour)
	// f47ac10b-58cc-4372-a567-0e02b2c3d479: last byte 0x79 = 121, slot 60.
	id := [16]byte{0xf4, 0x7a, 0xc1, 0x0b, 0x58, 0xcc, 0x43, 0x72, 0xa5, 0x67, 0x0e, 0x02, 0xb2, 0xc3, 0xd4, 0x79}
	cycleStart := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

	fmt.Println(plan.SlotOf(id))
	fmt.Println(plan.Offset(12345, id))
	fmt.Println(plan.Target(cycleStart, 12345, id).Format(time.RFC3339Nano))
	// Output:
	// 60
	// 3m31.628538s
	// 2026-11-22T11:18:31.628538Z
}

// Cycle starts at 00:30 London time, every day, across DST.
func ExampleSchedule() {
	london, _ := time.LoadLocation("Europe/London")
	s, _ := slotplan.NewSchedule(24*time.Hour, 30*time.Minute, london)
	next := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	for range 3 {
		fmt.Println(next.UTC().Format(time.RFC3339), next.In(london).Format("15:04 MST"))
		next = s.Next(next)
	}
	// Output:
	// 2026-03-29T00:30:00Z 00:30 GMT
	// 2026-03-29T23:30:00Z 00:30 BST
	// 2026-03-30T23:30:00Z 00:30 BST
}

// Balance pins heavy accounts so no slot exceeds the bound. Four slots hold
// 100, 120, 80 and 80 of ordinary weight; two jumbo accounts of 20 and 10
// hash to slots 1 and 2. The mean slot weight is (380 + 30) / 4 = 102.5, so a
// new placement must stay within 1.05 × 102.5 = 107.625: the 20 walks from
// slot 1 (140, too heavy) to slot 2 (100); the 10 then walks from slot 2
// (110, too heavy) to slot 3 (90).
func ExampleBalance() {
	base := []float64{100, 120, 80, 80}
	slots := slotplan.Balance(base, []slotplan.Jumbo{
		{ID: [16]byte{1}, Weight: 20, Home: 1, Prev: -1},
		{ID: [16]byte{2}, Weight: 10, Home: 2, Prev: -1},
	}, 0.10)
	fmt.Println(slots)
	// Output: [2 3]
}

// An account of bucket 0x8000 (the month's middle) in Europe/London: due
// half-way through every month, whatever its length: 14 days into
// February's 28, 371.5 hours into March's 743 (the clocks spring forward
// on the 28th), 360 hours into April's 720 (in summer time).
func ExampleMonthly() {
	london, _ := time.LoadLocation("Europe/London")
	m, _ := slotplan.NewMonthly(london)
	id := [16]byte{14: 0x00, 15: 0x80}
	for month := m.MonthStart(time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC)); month.Month() <= time.April; month = m.NextMonth(month) {
		due := m.Target(month, 1, id)
		fmt.Println(m.Days(month), "days:", due.In(london).Format("Jan 2 15h MST"), "day", m.DayOf(month, 1, id))
	}
	// Output:
	// 28 days: Feb 15 00h GMT day 14
	// 31 days: Mar 16 11h GMT day 15
	// 30 days: Apr 16 00h BST day 15
}
