package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// BenchmarkServeFleet measures `riverslot serve` as a platform runs it:
// RIVERSLOT_SERVE_FLEET schedules (default 20,000) of 1 minute against a
// loopback target, two serve processes on one schema, five periods, the
// first process killed with SIGKILL half-way through the third. For each
// schedule and period it checks the call came exactly once, within 1 s of
// its place; it reports lateness p50/p99, calls a second delivered
// against planned, and each process's peak RSS. A measurement, not a
// test: run it with
//
//	TEST_DATABASE_URL=... go test -run '^$' -bench ServeFleet -benchtime 1x -timeout 20m ./integration_test/
//
// (docs/serve.md has the figures of a run and the machine).
func BenchmarkServeFleet(b *testing.B) {
	n := 20_000
	if v, err := strconv.Atoi(os.Getenv("RIVERSLOT_SERVE_FLEET")); err == nil && v > 0 {
		n = v
	}
	const (
		period  = time.Minute
		periods = 5
	)
	for range b.N {
		ctx := context.Background()
		pool := riverslottest.Pool(b)
		schema := riverslottest.EmptySchema(ctx, b, pool)
		tokenFile := filepath.Join(b.TempDir(), "token")

		var (
			mu       sync.Mutex
			arrivals = make([][]time.Time, n)
		)
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/s/"))
			if err == nil && i >= 0 && i < n {
				at := time.Now()
				mu.Lock()
				arrivals[i] = append(arrivals[i], at)
				mu.Unlock()
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		b.Cleanup(target.Close)

		args := []string{"--periods", "1m", "--max-conns", "12", "--workers", "100", "--tenant-max-schedules", "-1"}
		procs := []*serveProcess{startServeWith(b, schema, tokenFile, args...), startServeWith(b, schema, tokenFile, args...)}
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			b.Fatal(err)
		}
		// Peak RSS of each process, sampled every second.
		peaks := make([]atomic.Int64, len(procs))
		stopSampling := make(chan struct{})
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-tick.C:
					for i, p := range procs {
						if kb := rssKB(p.cmd.Process.Pid); kb > peaks[i].Load() {
							peaks[i].Store(kb)
						}
					}
				}
			}
		}()
		defer close(stopSampling)

		// The schedules, through the first process's API, 8 clients.
		offsets := make([]time.Duration, n)
		var (
			next     atomic.Int64
			wg       sync.WaitGroup
			firstErr atomic.Pointer[error]
		)
		created := time.Now()
		for range 8 {
			wg.Go(func() {
				client := &http.Client{Timeout: 30 * time.Second}
				for {
					i := int(next.Add(1)) - 1
					if i >= n || firstErr.Load() != nil {
						return
					}
					body, _ := json.Marshal(map[string]any{"url": target.URL + "/s/" + strconv.Itoa(i), "period": "1m", "timeout": "5s"})
					req, _ := http.NewRequest("POST", procs[0].api+"/v1/schedules", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
					resp, err := client.Do(req)
					if err == nil && resp.StatusCode != http.StatusCreated {
						err = fmt.Errorf("create: %d", resp.StatusCode)
					}
					if err != nil {
						firstErr.Store(&err)
						return
					}
					var sc struct {
						OffsetSeconds float64 `json:"offset_seconds"`
					}
					err = json.NewDecoder(resp.Body).Decode(&sc)
					resp.Body.Close()
					if err != nil {
						firstErr.Store(&err)
						return
					}
					offsets[i] = time.Duration(sc.OffsetSeconds * float64(time.Second))
				}
			})
		}
		wg.Wait()
		if p := firstErr.Load(); p != nil {
			b.Fatal(*p)
		}
		b.Logf("%d schedules created in %s", n, time.Since(created).Round(time.Millisecond))

		// Five whole periods from the next one; the first process killed
		// half-way through the third.
		from := time.Now().Truncate(period).Add(period)
		to := from.Add(periods * period)
		kill := from.Add(5 * period / 2)
		b.Logf("measuring %s to %s, SIGKILL of the first process at %s", from.Format("15:04:05"), to.Format("15:04:05"), kill.Format("15:04:05"))
		time.Sleep(time.Until(kill))
		_ = procs[0].cmd.Process.Signal(syscall.SIGKILL)
		time.Sleep(time.Until(to.Add(period / 2)))

		mu.Lock()
		var (
			once, late, missed, twice int
			lateness                  []time.Duration
			delivered                 int
		)
		for i := range n {
			for k := range periods {
				due := from.Add(time.Duration(k)*period + offsets[i])
				var in []time.Time
				for _, at := range arrivals[i] {
					if !at.Before(due.Add(-period/2)) && at.Before(due.Add(period/2)) {
						in = append(in, at)
					}
				}
				for _, at := range in {
					lateness = append(lateness, at.Sub(due))
				}
				switch {
				case len(in) == 0:
					missed++
				case len(in) > 1:
					twice++
				case in[0].Sub(due).Abs() <= time.Second:
					once++
				default:
					late++
				}
			}
			for _, at := range arrivals[i] {
				if !at.Before(from) && at.Before(to) {
					delivered++
				}
			}
		}
		mu.Unlock()
		slices.Sort(lateness)
		pct := func(p float64) time.Duration {
			if len(lateness) == 0 {
				return 0
			}
			return lateness[min(len(lateness)-1, int(float64(len(lateness))*p))]
		}
		total := n * periods
		planned := float64(n) / period.Seconds()
		got := float64(delivered) / to.Sub(from).Seconds()
		b.ReportMetric(float64(once)/float64(total), "once-at-place")
		b.ReportMetric(pct(0.5).Seconds(), "lateness-p50-s")
		b.ReportMetric(pct(0.99).Seconds(), "lateness-p99-s")
		b.ReportMetric(got, "calls/s")
		b.Logf("%d schedules of 1m, %d periods, 2 processes (the first killed at 2.5 periods): %d of %d calls exactly once within 1 s of their place, %d once but later, %d missed, %d more than once; lateness p50 %s, p99 %s; %.1f calls/s delivered, %.1f planned; peak RSS %d MiB (killed) and %d MiB (survivor)",
			n, periods, once, total, late, missed, twice, pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), got, planned,
			peaks[0].Load()/1024, peaks[1].Load()/1024)
	}
}

// rssKB is a process's resident set size in KiB, from /proc (0 when
// unknown).
func rssKB(pid int) int64 {
	bs, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(bs), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}
