package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/internal/testkit/measure"
)

// demoUpstreamOptions are the demo's --upstream* flags.
type demoUpstreamOptions struct {
	count       int
	rate        float64
	burst       int
	concurrency int
	down        string // KEY:FROM-TO, fractions of the cycle
	downKey     string
	downFrom    float64
	downTo      float64
}

func addDemoUpstreamFlags(fs *flag.FlagSet, o *demoUpstreamOptions) {
	fs.IntVar(&o.count, "upstreams", 0, "spread the accounts over this many upstreams (bank-00, bank-01, ...) of uneven size (bank-k gets a share in 1/(k+1)), each a path of an HTTP server the demo runs on 127.0.0.1 that its syncs call; 0: none")
	fs.Float64Var(&o.rate, "upstream-rate", 0, "each upstream's Limits.Rate: calls started per second (0: none)")
	fs.IntVar(&o.burst, "upstream-burst", 0, "each upstream's Limits.Burst (default 1 with --upstream-rate)")
	fs.IntVar(&o.concurrency, "upstream-concurrency", 0, "each upstream's Limits.Concurrency: calls in flight (0: none)")
	fs.StringVar(&o.down, "upstream-down", "", "KEY:FROM-TO: the upstream KEY answers 503 from FROM to TO (fractions of each cycle), e.g. bank-03:0.2-0.6")
}

// check validates the flags.
func (o *demoUpstreamOptions) check() error {
	switch {
	case o.count < 0 || o.count > 1000:
		return usageErr("--upstreams must be 0 (none) to 1000, got %d", o.count)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return usageErr("--upstream-rate must be a finite number of calls per second, 0 for none, got %v", o.rate)
	case o.burst < 0:
		return usageErr("--upstream-burst must be 0 or more, got %d", o.burst)
	case o.concurrency < 0:
		return usageErr("--upstream-concurrency must be 0 (none) or more, got %d", o.concurrency)
	case o.count == 0 && (o.rate != 0 || o.burst != 0 || o.concurrency != 0 || o.down != ""):
		return usageErr("--upstream-rate, --upstream-burst, --upstream-concurrency and --upstream-down need --upstreams")
	}
	if o.down == "" {
		return nil
	}
	key, span, ok := strings.Cut(o.down, ":")
	from, to, ok2 := strings.Cut(span, "-")
	var err1, err2 error
	if ok && ok2 {
		o.downFrom, err1 = strconv.ParseFloat(from, 64)
		o.downTo, err2 = strconv.ParseFloat(to, 64)
	}
	if !ok || !ok2 || err1 != nil || err2 != nil || !(o.downFrom >= 0 && o.downFrom < o.downTo && o.downTo <= 1) {
		return usageErr("--upstream-down must be KEY:FROM-TO with 0 <= FROM < TO <= 1 (fractions of the cycle), e.g. bank-03:0.2-0.6, got %q", o.down)
	}
	if !slices.Contains(o.keys(), key) {
		return usageErr("--upstream-down: no upstream %q among the %d of --upstreams (bank-00 to %s)", key, o.count, o.keys()[o.count-1])
	}
	o.downKey = key
	return nil
}

// keys are the upstreams' names.
func (o *demoUpstreamOptions) keys() []string {
	out := make([]string, o.count)
	for i := range out {
		out[i] = sim.BankKey(i)
	}
	return out
}

// bankExpr is the SQL expression that puts each account at its bank: the
// first UUID byte's 256 values split by sim.BankBounds (shares
// proportional to 1/(k+1)), which the simulator follows too.
func (o *demoUpstreamOptions) bankExpr() string {
	var b strings.Builder
	b.WriteString("CASE")
	keys := o.keys()
	for k, hi := range sim.BankBounds(o.count) {
		fmt.Fprintf(&b, " WHEN get_byte(uuid_send(id), 0) < %d THEN '%s'", hi, keys[k])
	}
	b.WriteString(" END")
	return b.String()
}

// simUpstreams is the simulator's model of the flags.
func (o *demoUpstreamOptions) simUpstreams() sim.Upstreams {
	u := sim.Upstreams{Count: o.count, Rate: o.rate, Burst: o.burst, Concurrency: o.concurrency}
	if o.downKey != "" {
		u.Down = &sim.Down{Bank: slices.Index(o.keys(), o.downKey), From: o.downFrom, To: o.downTo}
	}
	return u
}

// limits are the task's Limits: the flags, and a breaker after 3 failures
// that probes every 1/32 of the cycle (at least a second).
func (o *demoUpstreamOptions) limits(cycle time.Duration) riverslot.UpstreamLimits {
	return riverslot.UpstreamLimits{Rate: o.rate, Burst: o.burst, Concurrency: o.concurrency,
		FailureThreshold: sim.BreakerThreshold, Cooldown: sim.BreakerCooldown(cycle)}
}

// demoBanks is the demo's fake upstream: one path per bank, counting what
// it receives, answering 503 for the down bank's window of each cycle.
type demoBanks struct {
	url   string
	srv   *http.Server
	banks map[string]*demoBank
	down  func(bank string, at time.Time) bool
}

type demoBank struct {
	inFlight atomic.Int64
	mu       sync.Mutex
	received []int64 // Unix nanoseconds
	sent     []int64 // Unix nanoseconds
	maxIn    int64
	ok, fail int64
	lateness []time.Duration // of synced calls, after their regular time
}

// late records how late a synced call to bank started.
func (d *demoBanks) late(bank string, late time.Duration) {
	if b, ok := d.banks[bank]; ok {
		b.mu.Lock()
		b.lateness = append(b.lateness, max(late, 0))
		b.mu.Unlock()
	}
}

// startDemoBanks serves the banks on 127.0.0.1 until close.
func startDemoBanks(keys []string, down func(string, time.Time) bool) (*demoBanks, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error starting the demo's upstream server: %w", err)
	}
	d := &demoBanks{url: "http://" + ln.Addr().String(), banks: map[string]*demoBank{}, down: down}
	for _, k := range keys {
		d.banks[k] = &demoBank{}
	}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(slog.NewTextHandler(io.Discard, nil), slog.LevelError)}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

// close stops the server.
func (d *demoBanks) close() { _ = d.srv.Close() }

func (d *demoBanks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
func (d *demoBanks) call(ctx context.Context, client *http.Client, key string) error {
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

// demoUpstream is one upstream in --json's upstreams.
type demoUpstream struct {
	// The fields riverslot simulate predicts, under the same keys
	// (MaxPerSecond: the most calls the bank's server received in any
	// one second; Synced: the calls it answered 200, each then recorded
	// by the demo's sync; LatenessP99Seconds: how late its synced calls
	// started after their accounts' regular times).
	sim.UpstreamResult
	// MaxSentPerSecond is the most calls sent in one second (by the send
	// time each call carries), what the limit bounds.
	MaxSentPerSecond int `json:"max_sent_per_second"`
}

// report measures each upstream: the server's counts, the limiter's.
func (d *demoBanks) report(ctx context.Context, scheduler *riverslot.Scheduler, task string, o *demoUpstreamOptions, cycle time.Duration, accounts map[string]int64) ([]demoUpstream, error) {
	states, err := scheduler.Upstreams(ctx, task, "", 0)
	if err != nil {
		return nil, err
	}
	byKey := map[string]riverslot.UpstreamState{}
	for _, s := range states {
		byKey[s.Key] = s
	}
	limits := o.limits(cycle)
	burst := limits.Burst
	if limits.Rate > 0 && burst == 0 {
		burst = 1
	}
	var out []demoUpstream
	for _, key := range o.keys() {
		b := d.banks[key]
		b.mu.Lock()
		u := demoUpstream{UpstreamResult: sim.UpstreamResult{Key: key, Accounts: accounts[key], RateLimit: limits.Rate, Burst: burst, ConcurrencyLimit: limits.Concurrency,
			MaxPerSecond: measure.PeakPerSecond(b.received), MaxInFlight: b.maxIn,
			Calls: int64(len(b.received)), Synced: b.ok, LatenessP99Seconds: quantile(b.lateness, 0.99).Seconds()}, MaxSentPerSecond: measure.PeakPerSecond(b.sent)}
		b.mu.Unlock()
		s := byKey[key]
		u.Throttled, u.Probes, u.Deferred, u.Skipped = s.Throttled, s.Probes, s.Deferred, s.Skipped
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

func printDemoUpstreams(w io.Writer, ups []demoUpstream) {
	if len(ups) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "upstream\taccounts\tlimit/s\tmost sent in 1s\tmost received in 1s\tmost in flight\tcalls\tsynced\tthrottled\tdeferred\tprobes\tskipped\tlateness p99\t")
	for _, u := range ups {
		fmt.Fprintf(tw, "%s\t%d\t%g+%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3fs\t\n", u.Key, u.Accounts, u.RateLimit, u.Burst, u.MaxSentPerSecond, u.MaxPerSecond,
			u.MaxInFlight, u.Calls, u.Synced, u.Throttled, u.Deferred, u.Probes, u.Skipped, u.LatenessP99Seconds)
	}
	_ = tw.Flush()
}
