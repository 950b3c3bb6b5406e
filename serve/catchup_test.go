package serve_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// TestCatchUpAfterAStop: the service (its only River client) is stopped
// early in a period, after its first slots' fan-outs queued their calls,
// and started again (a new server and client, as a restarted process)
// 15 s into the 24 s period. A schedule whose place passed more than
// Config.CatchUpAfter (here a third of the period, 8 s) before the
// service was back follows its catch_up: "skip" gets no call in that
// period and a history entry server_down, counted in the stats; "one"
// gets one call, as soon as the service is back. A place more than half
// a period before it gets no call under either (the next is nearer than
// half a period) and an entry server_down, not "late" (asserted for the
// schedules the draw puts there). At least two schedules of each policy
// have their place in the stop and their call queued before it (their
// jobs waited, due); calls the late fan-outs queue after the stop are
// judged by the same rule, but no count of them is required. Every
// schedule is called or missed, never both, never twice, and is called
// once in the next period, at its place.
func TestCatchUpAfterAStop(t *testing.T) {
	t.Parallel()
	const (
		period  = 24 * time.Second
		after   = period / 3 // Config.CatchUpAfter's 10 s, at most a third of the period
		restart = 15 * time.Second
	)
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	rc, ts := newReceiver(t, a)

	// The schedules whose places fall where the stop will be (from 3 s,
	// after the first slot's fan-out and the second's, to 15 s less
	// CatchUpAfter and a margin), for both policies, and some after it.
	type made struct {
		serve.Schedule
		path   string
		offset time.Duration
	}
	var all []made
	count := func(policy string, lo, hi time.Duration) (n int) {
		for _, sc := range all {
			if sc.CatchUp == policy && sc.offset > lo && sc.offset < hi {
				n++
			}
		}
		return n
	}
	for i := 0; i < 200 && (count(serve.CatchUpSkip, 3500*time.Millisecond, 6*time.Second) < 2 || count(serve.CatchUpOne, 3500*time.Millisecond, 6*time.Second) < 2 ||
		count(serve.CatchUpSkip, 17*time.Second, period) < 1 || count(serve.CatchUpOne, 17*time.Second, period) < 1); i++ {
		policy := []string{serve.CatchUpSkip, serve.CatchUpOne}[i%2]
		path := "/c/" + strconv.Itoa(i)
		sc := a.schedule(map[string]any{"url": ts.URL + path, "period": "24s", "timeout": "2s", "retries": 0, "catch_up": policy})
		all = append(all, made{sc, path, time.Duration(sc.OffsetSeconds * float64(time.Second))})
	}
	t.Logf("%d schedules", len(all))

	first := func() *river.Client[pgx.Tx] {
		config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
		require.NoError(t, a.srv.Configure(config, 20))
		client, _ := riverslottest.StartClient(ctx, t, a.srv.Pool(), config)
		return client
	}()
	info, err := a.srv.Scheduler().Task(serve.TaskName(period))
	require.NoError(t, err)
	// A period its trigger bootstraps while the client runs (its lead is
	// at most half a period), after the schedules were made.
	p := info.Schedule.Next(time.Now().Add(period/2 + time.Second))
	jobs := pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()
	// Stopped once the fan-outs of the slots before 6 s have run.
	riverslottest.WaitFor(t, 2*period, "the fan-outs of the period's first two slots", func() bool {
		var n int
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE kind = 'riverslot_perslot' AND args->>'task' = $1
	AND (args->>'cycle_start')::timestamptz = $2 AND (args->>'slot')::int < 2 AND state = 'completed'`, info.Name, p).Scan(&n))
		return n == 2
	})
	stopCalled := time.Now()
	require.NoError(t, first.Stop(ctx))
	require.Less(t, stopCalled.Sub(p), 6*time.Second, "stopped before the third slot's places")
	riverslottest.WaitFor(t, period, "15 s into the period", func() bool { return time.Since(p) >= restart })

	// A new process: its own server and River client.
	restarted := time.Now()
	again, err := serve.New(serve.Config{Pool: a.srv.Pool(), Schema: a.srv.Schema(), Periods: []time.Duration{period}, Guard: &serve.Guard{AllowPrivate: true}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, again.Configure(config, 20))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	next := p.Add(period)
	riverslottest.WaitFor(t, 3*period, "the next period's calls", func() bool { return time.Now().After(next.Add(period + period/2)) })
	t.Logf("period %s: stopped at +%s, back at +%s", p.Format(time.TimeOnly), stopCalled.Sub(p).Round(time.Millisecond), restarted.Sub(p).Round(time.Millisecond))

	idOf := func(sc made, start time.Time) string {
		return "msg_" + sc.ID.String() + "_" + strconv.FormatInt(start.Unix(), 10)
	}
	callsIn := func(sc made, start time.Time) []receivedCall {
		var out []receivedCall
		for _, c := range rc.of(sc.path) {
			if c.id == idOf(sc, start) {
				out = append(out, c)
			}
		}
		return out
	}
	var downSkip, downOne, totalDowns int
	for _, sc := range all {
		place := p.Add(sc.offset)
		in := callsIn(sc, p)
		require.LessOrEqual(t, len(in), 1, "schedule %s (%s, +%s): calls in the period", sc.ID, sc.CatchUp, sc.offset)
		var got serve.Schedule
		require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+sc.ID.String(), nil, &got))
		var downs []serve.Call
		for _, c := range got.LastCalls {
			if c.Missed != nil {
				require.Equal(t, serve.MissedServerDown, *c.Missed, "schedule %s: %+v", sc.ID, c)
				require.NotNil(t, c.DueAt)
				// timestamptz keeps microseconds, rounded.
				require.WithinDuration(t, place, *c.DueAt, time.Microsecond, "schedule %s: a miss of its place %s: %s", sc.ID, place, c.DueAt)
				downs = append(downs, c)
			}
		}
		totalDowns += len(downs)
		// Called, or missed: never both, never neither.
		require.Len(t, downs, 1-len(in), "schedule %s (%s, +%s): called %d times, entries %+v", sc.ID, sc.CatchUp, sc.offset, len(in), downs)
		// Its place while the service was down: more than CatchUpAfter
		// before it was back, less than half a period (past that, the
		// next call is nearer than half a period: riverslot skips the
		// call as stale, and the next covers it).
		down := place.After(stopCalled.Add(200 * time.Millisecond))
		downFor := restarted.Sub(place)
		switch {
		case down && downFor > period/2+500*time.Millisecond:
			require.Empty(t, in, "schedule %s (%s, +%s): its place passed over half a period before the service was back", sc.ID, sc.CatchUp, sc.offset)
		case down && downFor > after+500*time.Millisecond && downFor < period/2-500*time.Millisecond && sc.CatchUp == serve.CatchUpSkip:
			downSkip++
			require.Empty(t, in, "schedule %s (skip, +%s): its place passed while the service was down", sc.ID, sc.offset)
		case down && downFor > after+500*time.Millisecond && downFor < period/2-500*time.Millisecond:
			downOne++
			require.Len(t, in, 1, "schedule %s (one, +%s): one call once the service is back", sc.ID, sc.offset)
			require.True(t, in[0].at.After(restarted), "schedule %s: called %s, before the restart", sc.ID, in[0].at)
			require.Less(t, in[0].at.Sub(restarted), period/4, "schedule %s: as soon as the service is back", sc.ID)
			require.Empty(t, downs, "schedule %s: called, no miss", sc.ID)
		case place.After(restarted.Add(1500 * time.Millisecond)):
			require.Len(t, in, 1, "schedule %s (+%s): its place after the restart", sc.ID, sc.offset)
		}
		// The next period: its call at its place.
		nextIn := callsIn(sc, next)
		require.Len(t, nextIn, 1, "schedule %s (%s, +%s): the next period's call", sc.ID, sc.CatchUp, sc.offset)
		late := nextIn[0].at.Sub(next.Add(sc.offset))
		require.True(t, late >= -50*time.Millisecond && late < period/4, "schedule %s: the next period's call %s after its place", sc.ID, late)
		for _, c := range rc.of(sc.path) {
			require.NoError(t, c.verified)
		}
	}
	require.GreaterOrEqual(t, downSkip, 2)
	require.GreaterOrEqual(t, downOne, 2)

	var stats struct {
		Points []struct {
			Missed int64 `json:"missed"`
		} `json:"points"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/stats?granularity=hour", nil, &stats))
	var missed int64
	for _, pt := range stats.Points {
		missed += pt.Missed
	}
	require.EqualValues(t, totalDowns, missed, "the stats count every entry")
	require.GreaterOrEqual(t, totalDowns, downSkip)
}
