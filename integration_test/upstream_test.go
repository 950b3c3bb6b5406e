package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/metrics"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// fakeBanks is an HTTP server on loopback, one path per bank, that records
// every request it receives: when it came, and how many of the bank's
// requests were in flight then. A bank marked down answers 503.
type fakeBanks struct {
	srv *httptest.Server

	mu       sync.Mutex
	arrivals map[string][]time.Time
	sent     map[string][]time.Time // the X-Riverslot-Sent-At of each request
	inFlight map[string]*atomic.Int64
	maxIn    map[string]int64
	down     map[string]bool
	whileDn  map[string]int // requests received while down
	// throttle: the bank's next request is answered 429 with this
	// Retry-After (whole seconds); throttledAt is when it was.
	throttle    map[string]time.Duration
	throttledAt map[string]time.Time
}

func newFakeBanks(t *testing.T, banks []string, work time.Duration) *fakeBanks {
	t.Helper()
	f := &fakeBanks{arrivals: map[string][]time.Time{}, sent: map[string][]time.Time{}, inFlight: map[string]*atomic.Int64{}, maxIn: map[string]int64{}, down: map[string]bool{}, whileDn: map[string]int{},
		throttle: map[string]time.Duration{}, throttledAt: map[string]time.Time{}}
	for _, b := range banks {
		f.inFlight[b] = &atomic.Int64{}
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bank := r.URL.Path[1:]
		counter, ok := f.inFlight[bank]
		if !ok {
			http.NotFound(w, r)
			return
		}
		n := counter.Add(1)
		defer counter.Add(-1)
		f.mu.Lock()
		f.arrivals[bank] = append(f.arrivals[bank], time.Now())
		if at, err := time.Parse(time.RFC3339Nano, r.Header.Get(sentAtHeader)); err == nil {
			f.sent[bank] = append(f.sent[bank], at)
		}
		f.maxIn[bank] = max(f.maxIn[bank], n)
		down := f.down[bank]
		if down {
			f.whileDn[bank]++
		}
		retry, throttle := f.throttle[bank]
		if throttle {
			delete(f.throttle, bank)
			f.throttledAt[bank] = time.Now()
		}
		f.mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", fmt.Sprint(int(retry.Seconds())))
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		time.Sleep(work)
		if down {
			http.Error(w, "bank down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeBanks) setDown(bank string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[bank] = down
}

// throttleNext makes the bank answer its next request 429 with
// Retry-After retry.
func (f *fakeBanks) throttleNext(bank string, retry time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle[bank] = retry
}

// arrivalsBetween counts the bank's requests that arrived in (from, to).
func (f *fakeBanks) arrivalsBetween(bank string, from, to time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, at := range f.arrivals[bank] {
		if at.After(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// sentAtHeader carries when the sync sent the request: the limiter bounds
// when syncs start; the server also sees how long each request took to
// reach it, which a busy machine stretches unevenly.
const sentAtHeader = "X-Riverslot-Sent-At"

// sendJitter is how much later than its start the limiter decided a call
// may be sent on a busy 2-core machine (the process descheduled between
// the decision and the send). Calls whose starts fit the rate in every
// second fit it in every window of a second less sendJitter, however
// they were delayed by up to sendJitter: the tests bound that window.
const sendJitter = 100 * time.Millisecond

// mostInOneSecond is the most requests of the bank sent in any window of
// one second less sendJitter (and, for the log, received in one), by the
// send time each request carries; -1 when a request carries none.
func (f *fakeBanks) mostInOneSecond(bank string) (sent, received int) {
	f.mu.Lock()
	s, r := slices.Clone(f.sent[bank]), slices.Clone(f.arrivals[bank])
	f.mu.Unlock()
	if len(s) != len(r) {
		return -1, -1 // a request without its send time: the bound would prove nothing
	}
	return mostInWindow(s, time.Second-sendJitter), mostInWindow(r, time.Second)
}

// mostInWindow is the most times of at in any half-open window of length w.
func mostInWindow(at []time.Time, w time.Duration) int {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < w; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// TestUpstreamLimitsAndBreaker runs one 48 s cycle of 900 accounts spread
// unevenly over three banks (an HTTP server on loopback, 30 ms a call),
// with limits per bank of 12 calls a second (burst 2), 3 in flight, and a
// breaker opening after 3 failures for 2 s; bank-2 answers 503 for 16 s
// of the cycle. The server's own record shows: no bank ever got more than
// 14 calls in a second or more than 3 at once; while bank-2 was down it got
// only the failures that opened its breaker, the calls already in flight
// and one probe per cooldown; bank-1 and bank-3 were never deferred by it;
// and every account was synced exactly once in the cycle, bank-2's
// deferred syncs after it came back, or skipped and reported: bank-2's
// whose NotAfter came before their place in the line after the outage as
// upstream_down, and on a machine too busy to start syncs in time, stale
// or upstream_throttled (checkSyncedOrReported).
func TestUpstreamLimitsAndBreaker(t *testing.T) {
	parallel(t)

	const (
		accounts = 900
		cycle    = 48 * time.Second // 16 slots of 3 s
		outage   = 16 * time.Second
	)
	limits := riverslot.UpstreamLimits{Rate: 12, Burst: 2, Concurrency: 3, FailureThreshold: 3, Cooldown: 2 * time.Second}
	banks := []string{"bank-1", "bank-2", "bank-3"}
	ctx, b := setup(t, accounts)
	bankOf := assignBanks(ctx, t, b, banks)

	fake := newFakeBanks(t, banks, 30*time.Millisecond)
	record := b.recordSync()
	httpClient := &http.Client{Timeout: 10 * time.Second}
	syncFn := func(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fake.srv.URL+"/"+job.Args.Upstream, nil)
		if err != nil {
			return err
		}
		req.Header.Set(sentAtHeader, time.Now().UTC().Format(time.RFC3339Nano))
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("bank %s answered %d", job.Args.Upstream, resp.StatusCode)
		}
		return record(ctx, id, job)
	}
	offset, start := offsetForStartIn(cycle, 6*time.Second)
	task := riverslot.Task{Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: b.schema, Table: "accounts", Filter: "active",
		Upstream: "bank", Limits: limits, Sync: syncFn}
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, provider.Shutdown(context.Background())) })
	scheduler, err := riverslot.New(b.pool, &riverslot.Config{Logger: riverslottest.Logger(t), MeterProvider: provider, Tasks: []riverslot.Task{task}})
	require.NoError(t, err)
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)
	_, err = scheduler.EnqueueCycle(ctx, client, "transactions", start)
	require.NoError(t, err)

	// bank-2 goes down a third into the cycle, for a third of it.
	downFrom, downTo := start.Add(cycle/3), start.Add(cycle/3+outage)
	time.Sleep(time.Until(downFrom)) // a moment on the wall clock, not a condition
	fake.setDown("bank-2", true)
	time.Sleep(time.Until(downTo))
	fake.setDown("bank-2", false)

	waitSyncsFinished(ctx, t, b, start.Add(cycle))

	res := checkSyncedOrReported(ctx, t, b, bankOf, "bank-2")
	skippedDown := res.skipped["bank-2"][syncjob.SkippedUpstreamDown]
	var syncedAfterOutage int
	for id, at := range res.synced {
		if bankOf[id] == "bank-2" && at.After(downTo) {
			syncedAfterOutage++
		}
	}
	require.Positive(t, syncedAfterOutage, "bank-2's deferred syncs ran after it came back")
	t.Logf("bank-2: %d accounts synced after the outage", syncedAfterOutage)

	states, err := scheduler.Upstreams(ctx, "transactions", "", 0)
	require.NoError(t, err)
	byKey := map[string]riverslot.UpstreamState{}
	for _, s := range states {
		byKey[s.Key] = s
	}
	for _, bank := range banks {
		most, received := fake.mostInOneSecond(bank)
		fake.mu.Lock()
		maxIn, calls := fake.maxIn[bank], len(fake.arrivals[bank])
		fake.mu.Unlock()
		t.Logf("%s: %d accounts, %d calls, most sent in 0.9 s %d (received in 1 s %d), most in flight %d; limiter: throttled %d, deferred %d, probes %d, opens %d, skipped %d",
			bank, len(idsAt(b.ids, bankOf, bank)), calls, most, received, maxIn, byKey[bank].Throttled, byKey[bank].Deferred, byKey[bank].Probes, byKey[bank].Opens, byKey[bank].Skipped)
		require.GreaterOrEqual(t, most, 0, "%s: every request carries its send time", bank)
		require.LessOrEqual(t, most, int(limits.Rate)+limits.Burst, "%s: calls sent in a second less the send jitter", bank)
		require.LessOrEqual(t, maxIn, int64(limits.Concurrency), "%s: calls in flight", bank)
		// What the bank saw: calls admitted in a second are at most Rate +
		// Burst, and those admitted earlier that arrive in it were in
		// flight at its start, each holding one of Concurrency leases.
		require.LessOrEqual(t, received, int(limits.Rate)+limits.Burst+limits.Concurrency, "%s: calls the bank received in one second", bank)
	}
	for _, bank := range banks {
		limiterSkips := res.skipped[bank][syncjob.SkippedUpstreamDown] + res.skipped[bank][syncjob.SkippedUpstreamThrottled]
		require.EqualValues(t, limiterSkips, byKey[bank].Skipped, "%s: the limiter counts what it skipped", bank)
	}
	require.Positive(t, byKey["bank-1"].Throttled, "bank-1's syncs came faster than its rate at times: the limit held them")
	for _, bank := range []string{"bank-1", "bank-3"} {
		require.Zero(t, byKey[bank].Deferred, "%s is not held back by bank-2's outage", bank)
		require.Zero(t, byKey[bank].Opens, bank)
	}
	down := byKey["bank-2"]
	require.Positive(t, down.Opens, "bank-2's breaker opened")
	require.Positive(t, down.Deferred, "bank-2's syncs were deferred, not failed")
	require.Positive(t, down.Probes)
	require.Equal(t, "closed", down.Breaker, "bank-2 came back")
	fake.mu.Lock()
	whileDown := fake.whileDn["bank-2"]
	fake.mu.Unlock()
	// The failures that opened it, the calls already in flight, one probe
	// per cooldown (and one more each time a probe failed and reopened it).
	bound := limits.FailureThreshold + limits.Concurrency + int(outage/limits.Cooldown) + 1
	require.LessOrEqual(t, whileDown, bound, "calls bank-2 got while down")
	require.LessOrEqual(t, int64(whileDown), int64(limits.FailureThreshold+limits.Concurrency)+down.Probes, "calls while down: the opening failures, those in flight, probes")

	// The metrics count by task and outcome or cause, never by bank: as
	// the limiter and the server count.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	points := map[string][]metricdata.DataPoint[int64]{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				points[m.Name] = sum.DataPoints
			}
		}
	}
	by := func(name, attr string) map[string]int64 {
		out := map[string]int64{}
		for _, p := range points[name] {
			for _, kv := range p.Attributes.ToSlice() {
				require.NotEqual(t, "upstream", string(kv.Key), "no per-upstream label")
			}
			v, _ := p.Attributes.Value(attribute.Key(attr))
			out[v.AsString()] += p.Value
		}
		return out
	}
	var calls, callsOK, waits int64
	for _, bank := range banks {
		calls += byKey[bank].Calls
		waits += byKey[bank].Throttled + byKey[bank].Deferred
	}
	outcomes := by(metrics.UpstreamCalls, "outcome")
	for _, n := range outcomes {
		callsOK += n
	}
	require.Equal(t, calls, callsOK, "every call through the limiter is counted once, by outcome: %v", outcomes)
	require.Positive(t, outcomes["failed"], "bank-2's failures")
	fake.mu.Lock()
	served := len(fake.arrivals["bank-1"]) + len(fake.arrivals["bank-2"]) + len(fake.arrivals["bank-3"])
	fake.mu.Unlock()
	require.EqualValues(t, served, outcomes["succeeded"]+outcomes["failed"], "the server saw every call the metrics count")
	causes := by(metrics.UpstreamWaits, "cause")
	require.Positive(t, causes["rate"])
	require.Positive(t, causes["open"]+causes["probe"], "waits for bank-2's breaker: %v", causes)
	require.GreaterOrEqual(t, causes["rate"]+causes["concurrency"]+causes["paused"]+causes["open"]+causes["probe"], waits, "a sync waits at least once each time the limiter counts it")
	require.EqualValues(t, skippedDown, by(metrics.SyncSkipped, "reason")[syncjob.SkippedUpstreamDown])

	// Status, its JSON and the operator's page show the upstreams with the
	// limits in force, the one that most needs a look first.
	st, err := scheduler.Status(ctx, "transactions")
	require.NoError(t, err)
	require.NotNil(t, st.Upstreams)
	require.Equal(t, 3, st.Upstreams.Keys)
	require.Zero(t, st.Upstreams.NotClosed)
	require.Len(t, st.Upstreams.Top, 3)
	worst := banks[0]
	for _, bank := range banks[1:] {
		w, c := byKey[worst], byKey[bank]
		if c.Skipped > w.Skipped || c.Skipped == w.Skipped && c.Throttled > w.Throttled {
			worst = bank
		}
	}
	require.Equal(t, worst, st.Upstreams.Top[0].Key, "most skipped, then most throttled, first")
	for _, u := range st.Upstreams.Top {
		require.InDelta(t, limits.Rate, u.RateLimit, 0)
		require.Equal(t, limits.Concurrency, u.ConcurrencyLimit)
		require.Equal(t, byKey[u.Key].Calls, u.Calls)
	}
	js, err := json.Marshal(st)
	require.NoError(t, err)
	require.Contains(t, string(js), `"upstreams":{"keys":3,"not_closed":0,"top":[{"key":"`+worst+`"`)
	handler, err := riverslotweb.New(scheduler, &riverslotweb.Config{})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?task=transactions", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `<table id="upstreams">`)
	require.Contains(t, rec.Body.String(), `<td class="l">bank-2</td>`)
}

// assignBanks adds a bank column to the accounts and spreads them
// unevenly over banks (three): half at the first, 30% at the second, 20%
// at the third.
func assignBanks(ctx context.Context, t *testing.T, b *testBundle, banks []string) map[uuid.UUID]string {
	t.Helper()
	return assignBanksBy(ctx, t, b, banks, func(i int) string {
		switch {
		case i%10 >= 8:
			return banks[2]
		case i%10 >= 5:
			return banks[1]
		}
		return banks[0]
	})
}

// assignBanksUneven puts the accounts at banks in shares proportional to
// 1/(k+1), as riverslot demo --upstreams does: the first bank about a
// quarter of 23 banks' accounts, the last about 1%.
func assignBanksUneven(ctx context.Context, t *testing.T, b *testBundle, banks []string) map[uuid.UUID]string {
	t.Helper()
	var h float64
	for k := range banks {
		h += 1 / float64(k+1)
	}
	return assignBanksBy(ctx, t, b, banks, func(i int) string {
		// A fixed, well-mixed place in [0, 1) per account.
		at, cum := float64((i*7919)%1000)/1000, 0.0
		for k, bank := range banks {
			if cum += 1 / float64(k+1) / h; at < cum {
				return bank
			}
		}
		return banks[len(banks)-1]
	})
}

// assignBanksBy adds a bank column to the accounts table and sets each
// account's (the i-th of b.ids) to bankAt(i).
func assignBanksBy(ctx context.Context, t *testing.T, b *testBundle, banks []string, bankAt func(i int) string) map[uuid.UUID]string {
	t.Helper()
	accountsTable := pgx.Identifier{b.schema, "accounts"}.Sanitize()
	_, err := b.pool.Exec(ctx, "ALTER TABLE "+accountsTable+" ADD COLUMN bank text")
	require.NoError(t, err)
	bankOf := map[uuid.UUID]string{}
	names := make([]string, len(b.ids))
	for i, id := range b.ids {
		names[i] = bankAt(i)
		bankOf[id] = names[i]
	}
	_, err = b.pool.Exec(ctx, "UPDATE "+accountsTable+" a SET bank = v.bank FROM unnest($1::uuid[], $2::text[]) v(id, bank) WHERE a.id = v.id", b.ids, names)
	require.NoError(t, err)
	return bankOf
}

// waitSyncsFinished waits until the cycle ending at end is over and no
// sync job is left to run.
func waitSyncsFinished(ctx context.Context, t *testing.T, b *testBundle, end time.Time) {
	t.Helper()
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	waitFor(t, time.Until(end)+90*time.Second, "every sync job of the cycle to finish", func() bool {
		return time.Now().After(end) &&
			b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state NOT IN ('completed', 'cancelled', 'discarded')", syncjob.Kind) == 0
	})
}

// syncedOrReported is what became of every account's sync in a cycle.
type syncedOrReported struct {
	synced  map[uuid.UUID]time.Time   // when Sync recorded it
	skipped map[string]map[string]int // by bank and reason
}

// checkSyncedOrReported checks that every account was synced exactly once
// or its sync job completed without calling Sync and said why (nothing
// lost, nothing twice, no job discarded or cancelled); that only downBank's
// syncs were skipped as upstream_down; and that the cycle's other syncs
// were all synced, except, on a machine too busy to start them in time,
// those skipped as stale or upstream_throttled (by their own NotAfter, not
// by downBank's outage). It logs the skips by bank and reason.
func checkSyncedOrReported(ctx context.Context, t *testing.T, b *testBundle, bankOf map[uuid.UUID]string, downBank string) syncedOrReported {
	t.Helper()
	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	require.Zero(t, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state <> 'completed'", syncjob.Kind), "no sync job discarded or cancelled")
	rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, metadata->'output'->>'riverslot_skipped' FROM "+jobs+
		" WHERE kind = $1 AND metadata->'output'->>'riverslot_skipped' IS NOT NULL", syncjob.Kind)
	require.NoError(t, err)
	reasons := map[uuid.UUID]string{}
	var (
		id     uuid.UUID
		reason string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &reason}, func() error {
		require.NotContains(t, reasons, id, "account %s has two sync jobs", id)
		reasons[id] = reason
		return nil
	})
	require.NoError(t, err)
	out := syncedOrReported{synced: map[uuid.UUID]time.Time{}, skipped: map[string]map[string]int{}}
	calls := b.calls(ctx, t)
	for _, id := range b.ids {
		bank := bankOf[id]
		if reason, ok := reasons[id]; ok {
			require.Empty(t, calls[id], "account %s: skipped (%s) and synced", id, reason)
			switch reason {
			case syncjob.SkippedUpstreamDown:
				require.Equal(t, downBank, bank, "account %s: only the bank that was down has syncs skipped as upstream_down", id)
			case syncjob.SkippedStale, syncjob.SkippedUpstreamThrottled:
			default:
				t.Fatalf("account %s of %s skipped for %q", id, bank, reason)
			}
			if out.skipped[bank] == nil {
				out.skipped[bank] = map[string]int{}
			}
			out.skipped[bank][reason]++
			continue
		}
		require.Len(t, calls[id], 1, "account %s of %s: synced once, or skipped and reported", id, bank)
		out.synced[id] = calls[id][0]
	}
	t.Logf("%d accounts synced; skipped by bank and reason: %v", len(out.synced), out.skipped)
	return out
}

// idsAt returns the ids of bank's accounts.
func idsAt(ids []uuid.UUID, bankOf map[uuid.UUID]string, bank string) []uuid.UUID {
	var out []uuid.UUID
	for _, id := range ids {
		if bankOf[id] == bank {
			out = append(out, id)
		}
	}
	return out
}
