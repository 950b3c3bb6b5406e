package slotplan

import (
	"testing"
	"time"
)

// The per-account cost of the schedule math in a fan-out's hot loop.
func BenchmarkTarget(b *testing.B) {
	p, err := New(24 * time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	var id [16]byte
	var sink time.Time
	for i := 0; b.Loop(); i++ {
		id[0], id[15] = byte(i), byte(i>>8)
		sink = p.Target(start, 42, id)
	}
	_ = sink
}

func BenchmarkScheduleStartLocation(b *testing.B) {
	london, err := time.LoadLocation("Europe/London")
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSchedule(24*time.Hour, 30*time.Minute, london)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for b.Loop() {
		_ = s.Start(at)
	}
}
