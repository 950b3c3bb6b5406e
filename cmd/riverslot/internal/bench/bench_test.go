package bench

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// BenchmarkFanOut is the fan-out comparison of `make bench` as a Go
// benchmark, for benchstat: one per-slot job's whole fan-out against River's
// InsertManyFastTx of the same number of pre-built jobs, batch 2000. Both
// report accounts/s and, as ns/op, the insert time alone (schema setup per
// iteration is excluded). It needs the test database (`make test` creates
// it, or TEST_DATABASE_URL):
//
//	go test -run '^$' -bench FanOut -benchtime 5x -count 6 ./internal/bench | tee new.txt
func BenchmarkFanOut(b *testing.B) {
	ctx := context.Background()
	pool := riverslottest.Pool(b)
	// One Runner for both sizes: schema names must not repeat (see schema).
	r := New(Config{Pool: pool, Out: io.Discard, Log: io.Discard, BatchSize: 2000})
	for _, n := range []int{10_000, 100_000} {
		accounts, drop, err := r.schema(ctx, "gobench_accounts")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(drop)
		if err := r.seedAccounts(ctx, accounts, n, 127); err != nil {
			b.Fatal(err)
		}

		run := func(b *testing.B, once func() (time.Duration, error)) {
			var total time.Duration
			iters := 0
			for b.Loop() {
				d, err := once()
				if err != nil {
					b.Fatal(err)
				}
				total += d
				iters++
			}
			b.ReportMetric(float64(n*iters)/total.Seconds(), "accounts/s")
			b.ReportMetric(float64(total.Nanoseconds())/float64(iters), "ns/op")
		}
		b.Run(fmt.Sprintf("riverslot/accounts=%d", n), func(b *testing.B) {
			run(b, func() (time.Duration, error) {
				d, _, _, err := r.fanOutOnce(ctx, accounts, n)
				return d, err
			})
		})
		b.Run(fmt.Sprintf("raw/accounts=%d", n), func(b *testing.B) {
			run(b, func() (time.Duration, error) { return r.rawInsert(ctx, n) })
		})
	}
}
