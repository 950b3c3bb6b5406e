package sim

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// BenchmarkWeek is the simulator's speed target: a week of 1,000,000
// accounts on a 24 h cycle (7,000,000 syncs) through riverslot, in at most
// 10 s and 512 MiB on the project's 2-core machine. It reports the peak Go
// heap (sampled every 10 ms) next to the time.
//
//	go test -run '^$' -bench Week -benchtime 1x ./internal/sim
func BenchmarkWeek(b *testing.B) {
	cfg := Config{Accounts: 1_000_000, Cycle: 24 * time.Hour, Duration: 168 * time.Hour}
	var peak uint64
	done := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	var syncs int64
	for b.Loop() {
		results, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		syncs = results[0].JobsCompleted
	}
	close(done)
	if syncs != 7_000_000 {
		b.Fatalf("completed %d syncs, want 7,000,000", syncs)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(syncs)/b.Elapsed().Seconds()*float64(b.N), "syncs/s")
}
