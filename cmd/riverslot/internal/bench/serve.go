package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/serve"
)

// serveBench measures riverslot serve: the API's latency over
// ServeSchedules schedules of 1h (create, list a page, get one), and a
// compressed run of ServeRunSchedules schedules of 16 s for three periods
// against a loopback target (calls a second delivered against planned,
// lateness), with the Go heap.
func (r *Runner) serveBench(ctx context.Context) error {
	target := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }), ReadHeaderTimeout: 5 * time.Second}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = target.Serve(tln) }()
	defer target.Close()
	targetURL := "http://" + tln.Addr().String() + "/hook"

	api := func(schema string, periods ...time.Duration) (*serve.Server, string, string, func(), error) {
		if err := serve.Migrate(ctx, r.cfg.Pool, schema); err != nil {
			return nil, "", "", nil, err
		}
		srv, err := serve.New(serve.Config{Pool: r.cfg.Pool, Schema: schema, Periods: periods, Guard: &serve.Guard{AllowPrivate: true},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, "", "", nil, err
		}
		if err := srv.CreateIndexes(ctx); err != nil {
			return nil, "", "", nil, err
		}
		token, err := srv.AddToken(ctx, "bench")
		if err != nil {
			return nil, "", "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", "", nil, err
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		return srv, "http://" + ln.Addr().String(), token, func() { _ = hs.Close() }, nil
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	call := func(base, token, method, path string, body any) (time.Duration, []byte, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		begun := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(begun)
		if resp.StatusCode >= 300 {
			return took, out, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return took, out, err
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}

	// The API over ServeSchedules schedules of 1h.
	schema, drop, err := r.schema(ctx, "serve")
	if err != nil {
		return err
	}
	defer drop()
	_, base, token, closeAPI, err := api(schema, time.Hour, 16*time.Second)
	if err != nil {
		return err
	}
	defer closeAPI()
	n := r.cfg.ServeSchedules
	const clients = 8
	creates := make([]time.Duration, n)
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	begun := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				took, out, err := call(base, token, "POST", "/v1/schedules", map[string]any{"url": targetURL, "period": "1h"})
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				var sc struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(out, &sc)
				creates[i], ids[i] = took, sc.ID
				if i > 0 && i%20000 == 0 {
					r.logf("serve: %d of %d schedules created", i, n)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	createdIn := time.Since(begun)
	var lists []time.Duration
	after := ""
	for {
		took, out, err := call(base, token, "GET", "/v1/schedules?limit=100"+after, nil)
		if err != nil {
			return err
		}
		lists = append(lists, took)
		var page struct {
			Next *uuid.UUID `json:"next"`
		}
		if err := json.Unmarshal(out, &page); err != nil {
			return err
		}
		if page.Next == nil {
			break
		}
		after = "&after=" + page.Next.String()
	}
	gets := make([]time.Duration, 0, 2000)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		took, _, err := call(base, token, "GET", "/v1/schedules/"+ids[rng.IntN(n)], nil)
		if err != nil {
			return err
		}
		gets = append(gets, took)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.row(fmt.Sprintf("serve API latency (%d schedules of 1h, %d clients on loopback; p50 / p99)", n, clients), human(n),
		fmt.Sprintf("create %s / %s (%.0f/s); list a page of 100 %s / %s (%d pages); get %s / %s",
			pct(creates, 0.5).Round(10*time.Microsecond), pct(creates, 0.99).Round(10*time.Microsecond), perSec(n, createdIn),
			pct(lists, 0.5).Round(10*time.Microsecond), pct(lists, 0.99).Round(10*time.Microsecond), len(lists),
			pct(gets, 0.5).Round(10*time.Microsecond), pct(gets, 0.99).Round(10*time.Microsecond)),
		fmt.Sprintf("Go heap in use %.1f MiB, process RSS %s", float64(ms.HeapInuse)/(1<<20), rss()), "-")

	// The compressed run: ServeRunSchedules schedules of 16 s, three
	// periods, calls delivered to the loopback target.
	runSchema, dropRun, err := r.schema(ctx, "serve_run")
	if err != nil {
		return err
	}
	defer dropRun()
	srv, runBase, runToken, closeRun, err := api(runSchema, 16*time.Second)
	if err != nil {
		return err
	}
	defer closeRun()
	m := r.cfg.ServeRunSchedules
	for i := range m {
		if _, _, err := call(runBase, runToken, "POST", "/v1/schedules", map[string]any{"url": targetURL, "period": "16s", "timeout": "2s"}); err != nil {
			return err
		}
		if i > 0 && i%1000 == 0 {
			r.logf("serve run: %d of %d schedules created", i, m)
		}
	}
	config := &river.Config{Schema: runSchema, FetchPollInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := srv.Configure(config, 100); err != nil {
		return err
	}
	rc, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), config)
	if err != nil {
		return err
	}
	if err := rc.Start(ctx); err != nil {
		return err
	}
	// The first whole period after the next starts (FirstCycleNext), then
	// three periods.
	const period = 16 * time.Second
	from := time.Now().Truncate(period).Add(2 * period)
	to := from.Add(3 * period)
	r.logf("serve run: %d schedules of 16 s, measuring %s to %s", m, from.Format("15:04:05"), to.Format("15:04:05"))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(to.Add(period / 2))):
	}
	_ = rc.Stop(context.WithoutCancel(ctx))
	runtime.ReadMemStats(&ms)
	var calls, failed int64
	var p50, p99 *float64
	if err := r.cfg.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT ok),
	percentile_cont(0.5) WITHIN GROUP (ORDER BY lateness_ms) / 1000, percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness_ms) / 1000
FROM `+pgx.Identifier{runSchema, serve.CallsTable}.Sanitize()+` WHERE due_at >= $1 AND due_at < $2`, from, to).Scan(&calls, &failed, &p50, &p99); err != nil {
		return err
	}
	planned := float64(m) / period.Seconds()
	got := float64(calls) / to.Sub(from).Seconds()
	lat := "n/a"
	if p50 != nil && p99 != nil {
		lat = fmt.Sprintf("lateness p50 %.2f s, p99 %.2f s", *p50, *p99)
	}
	r.row(fmt.Sprintf("serve calls (%d schedules of 16 s, 3 periods, loopback target; calls due in them)", m), human(m),
		fmt.Sprintf("%.1f calls/s delivered (%d, %d failed), %s, Go heap in use %.1f MiB, process RSS %s", got, calls, failed, lat, float64(ms.HeapInuse)/(1<<20), rss()),
		fmt.Sprintf("%.1f calls/s planned (%d)", planned, 3*m), fmt.Sprintf("%.2f", got/planned))
	return nil
}

// rss is this process's resident set size (the API server, the River
// client and the bench's own clients share it), from /proc; "n/a" where
// there is none.
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))); err == nil {
				return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
			}
		}
	}
	return "n/a"
}
