package serve_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// received is what a loopback receiver saw: each call's path and
// webhook-id, and whether its signature verified with the tenant's secret.
type received struct {
	mu    sync.Mutex
	calls []receivedCall
	wh    *standardwebhooks.Webhook
	url   string // where it listens (newReceiverOf)
}

type receivedCall struct {
	path, id string
	at       time.Time
	verified error
}

func (rc *received) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls = append(rc.calls, receivedCall{path: r.URL.Path, id: r.Header.Get(serve.HeaderWebhookID), at: time.Now(), verified: rc.wh.Verify(body, r.Header)})
	w.WriteHeader(http.StatusNoContent)
}

// newReceiver is a loopback receiver of the default tenant's calls,
// verifying each with its signing secret.
func newReceiver(t *testing.T, a *api) (*received, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	def, err := a.srv.DefaultTenant(ctx)
	require.NoError(t, err)
	secret, err := a.srv.SigningSecret(ctx, def)
	require.NoError(t, err)
	rc, ts := newReceiverOf(t, secret)
	return rc, ts
}

// newReceiverOf is a loopback receiver verifying each call with secret.
func newReceiverOf(t *testing.T, secret string) (*received, *httptest.Server) {
	t.Helper()
	rc := &received{}
	var err error
	rc.wh, err = standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	ts := httptest.NewServer(rc)
	t.Cleanup(ts.Close)
	rc.url = ts.URL
	return rc, ts
}

func (rc *received) of(path string) []receivedCall {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []receivedCall
	for _, c := range rc.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// TestTriggerAndMissed: a triggered call comes at once, signed, with an id
// of its own, once however often it is asked for within 10 s, and counted
// apart; a sync riverslot skips as stale is a history entry "late"; each
// call periods the service did not run (no cycle) did not make is a
// history entry "server_down", once, also when another process sweeps the
// same periods, and never for a paused schedule; the stats count them.
func TestTriggerAndMissed(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	acme := a.tenant("acme", nil)
	as := a.as(acme.Token)
	rc := &received{}
	var err error
	rc.wh, err = standardwebhooks.NewWebhook(acme.SigningSecret)
	require.NoError(t, err)
	ts := httptest.NewServer(rc)
	t.Cleanup(ts.Close)

	var live []serve.Schedule
	for i := range 4 {
		live = append(live, as.schedule(map[string]any{"url": ts.URL + "/s/" + string(rune('a'+i)), "period": "24s", "timeout": "2s"}))
	}
	// The last one catches up a period the service did not start.
	var e0 apiErr
	require.Equal(t, http.StatusBadRequest, as.do("PATCH", "/v1/schedules/"+live[3].ID.String(), map[string]any{"catch_up": "all"}, &e0))
	require.Equal(t, "catch_up", e0.Field)
	require.Equal(t, http.StatusOK, as.do("PATCH", "/v1/schedules/"+live[3].ID.String(), map[string]any{"catch_up": serve.CatchUpOne}, &live[3]))
	require.Equal(t, serve.CatchUpOne, live[3].CatchUp)
	require.Equal(t, serve.CatchUpSkip, live[0].CatchUp, "the default")
	paused := as.schedule(map[string]any{"url": ts.URL + "/paused", "period": "24s", "paused": true})
	var e apiErr
	require.Equal(t, http.StatusConflict, as.do("POST", "/v1/schedules/"+paused.ID.String()+"/trigger", nil, &e))
	require.Equal(t, "paused", e.Field)

	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	client, _ := riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	// Triggered twice: one call, at once (long before its place, most
	// likely), with the webhook-id the answer named.
	type queued struct {
		JobID     int64  `json:"job_id"`
		WebhookID string `json:"webhook_id"`
		Duplicate bool   `json:"duplicate"`
	}
	var first, second queued
	require.Equal(t, http.StatusAccepted, as.do("POST", "/v1/schedules/"+live[0].ID.String()+"/trigger", nil, &first))
	require.Equal(t, http.StatusAccepted, as.do("POST", "/v1/schedules/"+live[0].ID.String()+"/trigger", nil, &second))
	require.False(t, first.Duplicate)
	require.True(t, second.Duplicate)
	require.Equal(t, first.JobID, second.JobID)
	require.Equal(t, first.WebhookID, second.WebhookID)
	require.True(t, strings.HasPrefix(first.WebhookID, "msg_"+live[0].ID.String()+"_trigger_"), first.WebhookID)
	riverslottest.WaitFor(t, 10*time.Second, "the triggered call", func() bool {
		for _, c := range rc.of("/s/a") {
			if c.id == first.WebhookID {
				return true
			}
		}
		return false
	})

	// A sync of a long-gone period whose NotAfter has passed: skipped as
	// stale, and the schedule's history says so.
	gone := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = client.Insert(ctx, riverslot.SyncArgs{Task: serve.TaskName(period), AccountID: live[1].ID, CycleStart: gone, NotAfter: gone.Add(period)},
		&river.InsertOpts{Queue: "riverslot_calls"})
	require.NoError(t, err)
	riverslottest.WaitFor(t, 15*time.Second, "the stale sync's history entry", func() bool {
		var sc struct {
			LastCalls []serve.Call `json:"last_calls"`
		}
		require.Equal(t, http.StatusOK, as.do("GET", "/v1/schedules/"+live[1].ID.String(), nil, &sc))
		for _, c := range sc.LastCalls {
			if c.Missed != nil && *c.Missed == serve.MissedLate {
				return true
			}
		}
		return false
	})
	require.Empty(t, rc.of("/s/b"), "the stale sync made no call")

	// Every schedule called once at its place: the service ran, so the
	// periods after are promised.
	riverslottest.WaitFor(t, 4*period, "a call of every schedule at its place", func() bool {
		for i := range live {
			n := 0
			for _, c := range rc.of("/s/" + string(rune('a'+i))) {
				if !strings.Contains(c.id, "_trigger_") {
					n++
				}
			}
			if n == 0 {
				return false
			}
		}
		return true
	})

	// Ten periods on, no process having run the last ones: the sweep
	// writes one entry per schedule and period (it looks at the last 4),
	// and a second process sweeping the same periods writes none.
	// A catch-up is made only while it can end before the schedule's next
	// place (its timeout and a second), judged by the real clock when its
	// job starts: sweep while d's next place is at least 10 s ahead (the
	// sweep's clock is moved, the worker's is not; a CI run swept 2 s
	// before d's place and rightly saw no catch-up).
	offset := time.Duration(live[3].OffsetSeconds * float64(time.Second))
	riverslottest.WaitFor(t, period, "d's next place 10 s ahead or more", func() bool {
		now := time.Now()
		next := now.Truncate(period).Add(offset)
		if !next.After(now) {
			next = next.Add(period)
		}
		return next.Sub(now) >= 10*time.Second
	})
	later := time.Now().Add(10 * period)
	n, err := a.srv.RecordMissedAt(ctx, later)
	require.NoError(t, err)
	require.EqualValues(t, 4*len(live), n)
	// The catch-up: one call of the newest missed period, with its
	// webhook-id, for the schedule that asked for it only.
	newest := later.Truncate(period).Add(-period)
	if later.Sub(later.Truncate(period)) < time.Second {
		newest = newest.Add(-period) // a period ends a second before it is looked at
	}
	wantID := "msg_" + live[3].ID.String() + "_" + strconv.FormatInt(newest.Unix(), 10)
	riverslottest.WaitFor(t, 15*time.Second, "the catch-up call", func() bool {
		for _, c := range rc.of("/s/d") {
			if c.id == wantID {
				return true
			}
		}
		return false
	})
	other, err := serve.New(serve.Config{Pool: a.srv.Pool(), Schema: a.srv.Schema(), Periods: []time.Duration{period}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, other.Configure(&river.Config{Schema: a.srv.Schema()}, 1)) // a process that runs, not started here
	n, err = other.RecordMissedAt(ctx, later)
	require.NoError(t, err)
	require.Zero(t, n)

	caughtUp := func(path string) (n int) {
		for _, c := range rc.of(path) {
			if strings.HasSuffix(c.id, "_"+strconv.FormatInt(newest.Unix(), 10)) {
				n++
			}
		}
		return n
	}
	require.Equal(t, 1, caughtUp("/s/d"), "one catch-up call")
	for _, p := range []string{"/s/a", "/s/b", "/s/c"} {
		require.Zero(t, caughtUp(p), "%s: catch_up skip", p)
	}
	var jobs int
	require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()+`
WHERE kind = 'riverslot_serve_trigger' AND args->>'schedule' = $1`, live[3].ID.String()).Scan(&jobs))
	require.Equal(t, 1, jobs, "queued once, the second process's sweep included")

	for i, sc := range live {
		var got serve.Schedule
		require.Equal(t, http.StatusOK, as.do("GET", "/v1/schedules/"+sc.ID.String(), nil, &got))
		// The entries' times are their places, ahead of the catch-up call
		// here (the sweep ran as of ten periods on).
		require.Equal(t, "missed", got.Health.Status, "schedule %d", i)
		downs := map[time.Time]bool{}
		for _, c := range got.LastCalls {
			if c.Missed != nil && *c.Missed == serve.MissedServerDown {
				require.NotNil(t, c.DueAt)
				require.Equal(t, *c.DueAt, c.StartedAt, "a missed call's time is its place")
				downs[*c.DueAt] = true
			}
		}
		require.Len(t, downs, 4, "one entry per period")
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		for due := range downs {
			require.InDelta(t, offset.Seconds(), due.Sub(due.Truncate(period)).Seconds(), 1e-3, "at the schedule's place in its period")
		}
	}
	var pausedNow serve.Schedule
	require.Equal(t, http.StatusOK, as.do("GET", "/v1/schedules/"+paused.ID.String(), nil, &pausedNow))
	require.Empty(t, pausedNow.LastCalls, "a paused schedule misses nothing")

	var stats struct {
		Points []struct {
			Missed, Triggered int64
		}
	}
	require.Equal(t, http.StatusOK, as.do("GET", "/v1/stats?granularity=hour", nil, &stats))
	var missed, triggered int64
	for _, p := range stats.Points {
		missed += p.Missed
		triggered += p.Triggered
	}
	require.EqualValues(t, 4*len(live)+1, missed, "the sweep's and the stale one")
	require.EqualValues(t, 1, triggered, "the catch-up is its period's call, not a triggered one")
	for _, c := range rc.of("/s/a") {
		require.NoError(t, c.verified)
	}
}

// TestNextCallsComeTrue: right after a fresh start (its first period is
// the next one: Task.FirstCycle), each schedule's first next_calls entry
// is the first call it gets (within a quarter period), never one in a period the
// service does not serve.
func TestNextCallsComeTrue(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	rc, ts := newReceiver(t, a)

	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)
	// The server's start has decided its first period: made (it began
	// within the trigger's lead) or left to the next (FirstCycleNext).
	riverslottest.WaitFor(t, 30*time.Second, "the first bootstrap to end", func() bool {
		var n int
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()+`
WHERE kind = 'riverslot_bootstrap' AND state = 'completed'`).Scan(&n))
		return n > 0
	})
	var list []serve.Schedule
	for i := range 12 {
		list = append(list, a.schedule(map[string]any{"url": ts.URL + "/n/" + string(rune('a'+i)), "period": "24s", "timeout": "2s"}))
	}
	riverslottest.WaitFor(t, 3*period+10*time.Second, "every schedule's first call", func() bool {
		for i := range list {
			if len(rc.of("/n/"+string(rune('a'+i)))) == 0 {
				return false
			}
		}
		return true
	})
	for i, sc := range list {
		require.NotEmpty(t, sc.NextCalls)
		first := rc.of("/n/" + string(rune('a'+i)))[0]
		// The receiver's clock: the call's arrival, a moment after its start.
		at := first.at
		// A quarter period: a promise a period off (the fault) is 24 s
		// wrong; a busy machine's lateness is far less.
		require.WithinDuration(t, sc.NextCalls[0], at, period/4, "schedule %d: promised %s, first called %s", i, sc.NextCalls[0], at)
	}
}

// TestMissedInAStartedPeriod: in a period the service started, a call its
// fan-out queued that never ran (its job deleted here) is a history entry
// "fan_out_late", once its late call could no longer come; a schedule
// paused and resumed in that period misses nothing (what it was at its
// place is not known), and one called misses nothing.
func TestMissedInAStartedPeriod(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	rc, ts := newReceiver(t, a)
	called := a.schedule(map[string]any{"url": ts.URL + "/called", "period": "24s", "timeout": "2s"})
	lost := a.schedule(map[string]any{"url": ts.URL + "/lost", "period": "24s", "timeout": "2s"})
	toggled := a.schedule(map[string]any{"url": ts.URL + "/toggled", "period": "24s", "timeout": "2s"})

	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)
	jobs := pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()
	// The first period the service starts with these schedules in it:
	// the lost one's call is deleted as soon as its fan-out queues it, the
	// toggled one is paused before its place and resumed after the period.
	var c time.Time
	riverslottest.WaitFor(t, 3*period, "the lost schedule's call queued", func() bool {
		rows, err := a.srv.Pool().Query(ctx, `DELETE FROM `+jobs+` WHERE kind = 'riverslot_sync' AND args->>'account_id' = $1 RETURNING (args->>'cycle_start')::timestamptz`,
			lost.ID.String())
		require.NoError(t, err)
		starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		if len(starts) > 0 {
			c = starts[0].UTC()
		}
		return len(starts) > 0
	})
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+toggled.ID.String(), map[string]any{"paused": true}, nil))
	riverslottest.WaitFor(t, 2*period, "the period's end", func() bool { return time.Now().After(c.Add(period)) })
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+toggled.ID.String(), map[string]any{"paused": false}, nil))
	riverslottest.WaitFor(t, 2*period, "the called schedule's call of the period", func() bool {
		for _, call := range rc.of("/called") {
			if call.id == "msg_"+called.ID.String()+"_"+strconv.FormatInt(c.Unix(), 10) {
				return true
			}
		}
		return false
	})

	// As of when its late calls could no longer come.
	n, err := a.srv.RecordMissedAt(ctx, c.Add(period+period/2+period/2+2*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the lost call only")
	var got serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+lost.ID.String(), nil, &got))
	require.NotEmpty(t, got.LastCalls)
	require.NotNil(t, got.LastCalls[0].Missed)
	require.Equal(t, serve.MissedFanOutLate, *got.LastCalls[0].Missed, "the period started: not server_down")
	for _, sc := range []serve.Schedule{called, toggled} {
		got = serve.Schedule{} // decoded afresh: JSON leaves absent fields as they were
		require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+sc.ID.String(), nil, &got))
		for _, call := range got.LastCalls {
			require.Nil(t, call.Missed, "schedule %s: %+v (period %s)", sc.URL, call, c)
		}
	}
}

// TestNextCallsOfALateFanOut: a schedule created after its place in a
// begun period, while its slot's fan-out has not run (late), is promised
// a call in this period, now or at its place (the fan-out to come takes
// it); one whose slot began more than half a period ago, or whose slot's
// fan-out is still ahead, keeps the promise it had.
func TestNextCallsOfALateFanOut(t *testing.T) {
	t.Parallel()
	// A period whose current start is well behind (a fifth to a half of
	// it), whatever the time of day, so that many slots have begun and
	// less than half a period ago.
	var period time.Duration
	best := -1.0
	for _, p := range []time.Duration{24 * time.Hour, 8 * time.Hour, 3 * time.Hour, time.Hour, 20 * time.Minute, 5 * time.Minute} {
		f := float64(time.Now().UnixNano()%int64(p)) / float64(p)
		if score := min(f, 0.5) - max(0, f-0.5)/4; score > best {
			period, best = p, score
		}
	}
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	info, err := a.srv.Scheduler().Task(serve.TaskName(period))
	require.NoError(t, err)
	now := time.Now()
	start := info.Schedule.Start(now)
	// The period begun (its bootstrap queued, and the previous period's:
	// the service ran before, so the bootstrap makes this period late
	// rather than leave it to the next, FirstCycleNext), no client working
	// it: no slot's fan-out runs.
	insertOnly, err := river.NewClient(riverpgxv5.New(a.srv.Pool()), &river.Config{Schema: a.srv.Schema()})
	require.NoError(t, err)
	_, err = a.srv.Scheduler().EnqueueCycle(ctx, insertOnly, info.Name, info.Schedule.Start(start.Add(-time.Nanosecond)))
	require.NoError(t, err)
	_, err = a.srv.Scheduler().EnqueueCycle(ctx, insertOnly, info.Name, start)
	require.NoError(t, err)

	var late, farBack, ahead int
	for range 40 {
		before := time.Now()
		sc := a.schedule(map[string]any{"url": "http://127.0.0.1:9/x", "period": period.String()})
		after := time.Now()
		require.NotEmpty(t, sc.NextCalls)
		due, slotStart := info.Due(start, sc.ID), info.SlotStartOf(start, sc.ID)
		switch {
		case slotStart.Add(-info.Lead).After(after):
			ahead++
			require.True(t, sc.NextCalls[0].Equal(due), "fan-out ahead: its place %s, promised %s", due, sc.NextCalls[0])
		case after.Sub(slotStart) < period/2-time.Second && before.Sub(slotStart) > 0:
			late++
			if due.After(after) {
				require.True(t, sc.NextCalls[0].Equal(due), "late fan-out, place ahead: %s, promised %s", due, sc.NextCalls[0])
			} else {
				require.WithinRange(t, sc.NextCalls[0], before.Truncate(time.Microsecond), after, "late fan-out, place %s passed: promised now", due)
			}
		case before.Sub(slotStart) > period/2+time.Second:
			farBack++
			require.True(t, sc.NextCalls[0].Equal(info.Due(info.Schedule.Next(start), sc.ID)), "slot begun over half a period ago: the next period's place, promised %s", sc.NextCalls[0])
		}
	}
	t.Logf("period %s, 40 schedules: %d with their slot's fan-out late, %d over half a period back, %d ahead", period, late, farBack, ahead)
	require.Positive(t, late, "the case: schedules whose slot's fan-out is late")
}

// TestNextCallsWhileAFreshStartsBootstrapWaits: a fresh start's first
// period, begun more than LateGrace (a slot) before its bootstrap runs, is
// left to the next (FirstCycleNext): while that bootstrap is still queued
// no schedule is promised a call in it.
func TestNextCallsWhileAFreshStartsBootstrapWaits(t *testing.T) {
	t.Parallel()
	// A period begun at least two slots ago with room left, whatever the
	// time of day: slots of a period p are p/gcd(p, 256 s) long.
	var period time.Duration
	best := -1.0
	for _, p := range []time.Duration{24 * time.Hour, 8 * time.Hour, 3 * time.Hour, time.Hour, 20 * time.Minute, 5 * time.Minute} {
		f := float64(time.Now().UnixNano()%int64(p)) / float64(p)
		if score := min(f, 1-f); f > 0.25 && score > best {
			period, best = p, score
		}
	}
	require.NotZero(t, period, "a period a quarter to three quarters begun")
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	info, err := a.srv.Scheduler().Task(serve.TaskName(period))
	require.NoError(t, err)
	start := info.Schedule.Start(time.Now())
	require.Greater(t, time.Since(start), info.Plan.SlotDuration, "the first period begun more than LateGrace ago")
	insertOnly, err := river.NewClient(riverpgxv5.New(a.srv.Pool()), &river.Config{Schema: a.srv.Schema()})
	require.NoError(t, err)
	_, err = a.srv.Scheduler().EnqueueCycle(ctx, insertOnly, info.Name, start)
	require.NoError(t, err)

	next := info.Schedule.Next(start)
	var wouldBeThisPeriod int
	for range 20 {
		sc := a.schedule(map[string]any{"url": "http://127.0.0.1:9/x", "period": period.String()})
		require.NotEmpty(t, sc.NextCalls)
		if info.Due(start, sc.ID).After(time.Now()) {
			wouldBeThisPeriod++
		}
		require.True(t, sc.NextCalls[0].Equal(info.Due(next, sc.ID)), "schedule %s: promised %s; the first period is left to the next, whose place is %s", sc.ID, sc.NextCalls[0], info.Due(next, sc.ID))
	}
	t.Logf("period %s begun %s ago: 20 schedules promised the next period, %d of them with a place still ahead in this one", period, time.Since(start).Round(time.Second), wouldBeThisPeriod)
	require.Positive(t, wouldBeThisPeriod, "the case: places still ahead in the first period")
}
