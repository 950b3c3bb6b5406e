package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/internal/testkit/measure"
)

// bankExpr is the SQL expression that puts each account at its bank, of
// count: the first UUID byte's 256 values split by sim.BankBounds (shares
// proportional to 1/(k+1)), which the simulator follows too.
func bankExpr(count int) string {
	var b strings.Builder
	b.WriteString("CASE")
	for k, hi := range sim.BankBounds(count) {
		fmt.Fprintf(&b, " WHEN get_byte(uuid_send(id), 0) < %d THEN '%s'", hi, sim.BankKey(k))
	}
	b.WriteString(" END")
	return b.String()
}

// limits are the task's Limits: u's, and a breaker after 3 failures that
// probes every 1/32 of the cycle (at least a second).
func limits(u sim.Upstreams, cycle time.Duration) riverslot.UpstreamLimits {
	return riverslot.UpstreamLimits{Rate: u.Rate, Burst: u.Burst, Concurrency: u.Concurrency,
		FailureThreshold: sim.BreakerThreshold, Cooldown: sim.BreakerCooldown(cycle)}
}

// exceptUpstreamBudget returns Check's err without its
// *riverslot.UpstreamBudgetError parts, which it reports through logf.
func exceptUpstreamBudget(err error, logf func(format string, args ...any)) error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	var rest []error
	for _, e := range errs {
		var be *riverslot.UpstreamBudgetError
		if errors.As(e, &be) {
			logf("warning: %v", e)
			continue
		}
		rest = append(rest, e)
	}
	return errors.Join(rest...)
}

// bankServer is the demo's fake upstream: one path per bank, counting what
// it receives, answering 503 for the down bank's window of each cycle.
type bankServer struct {
	url   string
	srv   *http.Server
	banks map[string]*bank
	down  func(bank string, at time.Time) bool
}

type bank struct {
	inFlight atomic.Int64
	mu       sync.Mutex
	received []int64 // Unix nanoseconds
	sent     []int64 // Unix nanoseconds
	maxIn    int64
	ok, fail int64
	lateness []time.Duration // of synced calls, after their regular time
}

// late records how late a synced call to bank started.
func (d *bankServer) late(bank string, late time.Duration) {
	if b, ok := d.banks[bank]; ok {
		b.mu.Lock()
		b.lateness = append(b.lateness, max(late, 0))
		b.mu.Unlock()
	}
}

// startBanks serves count banks (sim.BankKey) on 127.0.0.1 until close.
func startBanks(count int, down func(string, time.Time) bool) (*bankServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error starting the demo's upstream server: %w", err)
	}
	d := &bankServer{url: "http://" + ln.Addr().String(), banks: map[string]*bank{}, down: down}
	for k := range count {
		d.banks[sim.BankKey(k)] = &bank{}
	}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(slog.NewTextHandler(io.Discard, nil), slog.LevelError)}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

// close stops the server.
func (d *bankServer) close() { _ = d.srv.Close() }

func (d *bankServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/")
	b, ok := d.banks[key]
	if !ok {
		http.NotFound(w, r)
		return
	}
	now := time.Now()
	n := b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	down := d.down(key, now)
	b.mu.Lock()
	b.received = append(b.received, now.UnixNano())
	if at, err := time.Parse(time.RFC3339Nano, r.Header.Get("X-Riverslot-Sent-At")); err == nil {
		b.sent = append(b.sent, at.UnixNano())
	}
	b.maxIn = max(b.maxIn, n)
	if down {
		b.fail++
	} else {
		b.ok++
	}
	b.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // a bank's answer takes a moment
	if down {
		http.Error(w, "bank down", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// call is the demo's sync of an account at its bank.
func (d *bankServer) call(ctx context.Context, client *http.Client, key string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/"+key, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Riverslot-Sent-At", time.Now().UTC().Format(time.RFC3339Nano))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("upstream %s answered %d", key, resp.StatusCode)
	}
	return nil
}

// Upstream is one upstream in the summary's upstreams.
type Upstream struct {
	// The fields riverslot simulate predicts, under the same keys
	// (MaxPerSecond: the most calls the bank's server received in any
	// one second; Synced: the calls it answered 200, each then recorded
	// by the demo's sync; LatenessP99Seconds: how late its synced calls
	// started after their accounts' regular times).
	sim.UpstreamResult
	// MaxSentPerSecond is the most calls sent in one second (by the send
	// time each call carries), what the limit bounds.
	MaxSentPerSecond int `json:"max_sent_per_second"`
	// MaxReceivedAboveRate is the most calls the bank's server received
	// in any window of time beyond the rate limit times the window's
	// length (0 without a rate): the limiter keeps it within Burst +
	// Concurrency on any machine (mostAboveRate).
	MaxReceivedAboveRate float64 `json:"max_received_above_rate"`
}

// mostAboveRate is the most of times (Unix nanoseconds, a bank's received
// calls) in any window [a, b] beyond rate x (b - a) seconds, 0 without a
// rate. Under a limit of rate with burst B and concurrency C it is at most
// B + C, however late a busy machine delivers the calls: those started in
// the window are at most B + rate x its length (the limiter's GCRA start
// clock), and one started before it but received in it holds, at a, one of
// the C leases a call holds from its start until its outcome is recorded.
func mostAboveRate(times []int64, rate float64) float64 {
	if rate <= 0 || len(times) == 0 {
		return 0
	}
	times = slices.Clone(times)
	slices.Sort(times)
	// Calls i..j are j-i+1 over rate x (t_j - t_i): for each j the best i
	// maximizes x_i - i, x the time in calls' worth of the rate.
	most, first := math.Inf(-1), math.Inf(-1)
	for j, t := range times {
		x := rate * float64(t-times[0]) / float64(time.Second)
		first = max(first, x-float64(j))
		most = max(most, float64(j+1)-x+first)
	}
	return most
}

// report measures each upstream: the server's counts, the limiter's.
func (d *bankServer) report(ctx context.Context, scheduler *riverslot.Scheduler, task string, u sim.Upstreams, cycle time.Duration, accounts, skipped map[string]int64) ([]Upstream, error) {
	states, err := scheduler.Upstreams(ctx, task, "", 0)
	if err != nil {
		return nil, err
	}
	byKey := map[string]riverslot.UpstreamState{}
	for _, s := range states {
		byKey[s.Key] = s
	}
	limits := limits(u, cycle)
	burst := limits.Burst
	if limits.Rate > 0 && burst == 0 {
		burst = 1
	}
	var out []Upstream
	for k := range u.Count {
		key := sim.BankKey(k)
		b := d.banks[key]
		b.mu.Lock()
		u := Upstream{UpstreamResult: sim.UpstreamResult{Key: key, Accounts: accounts[key], RateLimit: limits.Rate, Burst: burst, ConcurrencyLimit: limits.Concurrency,
			MaxPerSecond: measure.PeakPerSecond(b.received), MaxInFlight: b.maxIn,
			Calls: int64(len(b.received)), Synced: b.ok, LatenessP99Seconds: quantile(b.lateness, 0.99).Seconds()}, MaxSentPerSecond: measure.PeakPerSecond(b.sent),
			MaxReceivedAboveRate: mostAboveRate(b.received, limits.Rate)}
		b.mu.Unlock()
		s := byKey[key]
		// Skipped: every sync of the bank's accounts that completed
		// without calling Sync (the limiter's and the stale ones).
		u.Throttled, u.Probes, u.Deferred, u.Skipped = s.Throttled, s.Probes, s.Deferred, skipped[key]
		out = append(out, u)
	}
	return out, nil
}

// quantile is the q-quantile of ds (0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[min(max(int(math.Ceil(q*float64(len(ds))))-1, 0), len(ds)-1)]
}

// writeUpstreams prints the upstreams' table (nothing without upstreams).
func writeUpstreams(w io.Writer, ups []Upstream) error {
	if len(ups) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "upstream\taccounts\tlimit/s\tmost sent in 1s\tmost received in 1s\tmost received above rate\tmost in flight\tcalls\tsynced\tthrottled\tdeferred\tprobes\tskipped\tlateness p99\t")
	for _, u := range ups {
		fmt.Fprintf(tw, "%s\t%d\t%g+%d\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3fs\t\n", u.Key, u.Accounts, u.RateLimit, u.Burst, u.MaxSentPerSecond, u.MaxPerSecond,
			u.MaxReceivedAboveRate, u.MaxInFlight, u.Calls, u.Synced, u.Throttled, u.Deferred, u.Probes, u.Skipped, u.LatenessP99Seconds)
	}
	return tw.Flush()
}
