package upstream_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/upstream"
)

// TestBreakerRecoversWithoutAHerd: with no rate, the syncs an open breaker
// deferred through an outage of five cooldowns come back after the probe
// closes it as spaced as they came (in their order, each as long after the
// close as it was deferred after the outage began), not all within a
// cooldown; one whose NotAfter comes sooner than that is spread into the
// time it has left and admitted before its NotAfter. A new sync is not
// held, and no counter counts a sync twice.
func TestBreakerRecoversWithoutAHerd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := upstream.Limits{FailureThreshold: 1, Cooldown: time.Second}
	first := b.req("bank-1", limits)
	require.Equal(t, upstream.Run, b.acquire(t, first).Verdict)
	opened := time.Now()
	rel, err := b.lim.Release(b.ctx, b.pool, first, upstream.Failed, 0)
	require.NoError(t, err)
	require.True(t, rel.Open, "one failure opens it")
	require.NoError(t, b.lim.MarkDeferred(b.ctx, b.pool, first)) // as the sync worker does

	// The outage: syncs come every 250 ms from 2 s after it began; each is
	// deferred, and after each cooldown one of them probes and fails (the
	// breaker opens again: the same outage), deferred as the worker does.
	// The 2 s before the first leaves the steps after the close that long
	// (on a stalled machine) before the first deferred sync's wake.
	time.Sleep(2 * time.Second)
	var (
		deferred []upstream.Request
		arrived  []time.Time
		probes   int
	)
	// deferNext asks for r while the breaker is open: deferred, or run as
	// the probe, which fails.
	deferNext := func(r upstream.Request) {
		t.Helper()
		d := b.acquire(t, r)
		if d.Verdict == upstream.Wait {
			require.Contains(t, []string{"open", "probe"}, d.Reason)
			return
		}
		require.Equal(t, upstream.Run, d.Verdict)
		require.True(t, d.Probe, "only a probe runs while it is open")
		probes++
		rel, err := b.lim.Release(b.ctx, b.pool, r, upstream.Failed, 0)
		require.NoError(t, err)
		require.True(t, rel.Open, "the probe failed: open again")
		require.NoError(t, b.lim.MarkDeferred(b.ctx, b.pool, r))
	}
	for range 12 {
		time.Sleep(250 * time.Millisecond)
		r := b.req("bank-1", limits)
		r.NotAfter = time.Now().Add(time.Hour)
		at := time.Now()
		deferNext(r)
		deferred, arrived = append(deferred, r), append(arrived, at)
	}
	require.Positive(t, probes, "an outage of several cooldowns is probed")
	// A sync deferred last, whose NotAfter is 4 s away: less than it came
	// after the outage began (some 5 s), so it cannot wait that long after
	// the close.
	short := b.req("bank-1", limits)
	short.NotAfter = time.Now().Add(4 * time.Second)
	deferNext(short)

	// The cooldown ends now (by the database's clock: no sleep) and the
	// probe finds the upstream back.
	_, err = b.pool.Exec(b.ctx, `UPDATE `+pgx.Identifier{b.schema, upstream.Table}.Sanitize()+` SET open_until = clock_timestamp()
WHERE task = 'transactions' AND key = 'bank-1' AND state = 'open'`)
	require.NoError(t, err)
	probe := b.req("bank-1", limits)
	d := b.acquire(t, probe)
	require.Equal(t, upstream.Run, d.Verdict)
	require.True(t, d.Probe)
	closed := time.Now()
	b.release(t, probe, upstream.Succeeded, 0)
	require.Equal(t, "closed", b.state(t, "bank-1").Breaker)
	outage := closed.Sub(opened)

	var wakes []time.Time
	for i, r := range deferred {
		at := time.Now()
		d := b.acquire(t, r)
		require.Equal(t, upstream.Wait, d.Verdict, "deferred sync %d is not admitted at the close", i)
		require.Equal(t, upstream.WaitRecovery, d.Reason)
		wakes = append(wakes, at.Add(d.Wait))
	}
	// The database's clock decided each wake: a gap is the arrivals', give
	// or take two queries' latencies.
	for i := 1; i < len(wakes); i++ {
		require.True(t, wakes[i].After(wakes[i-1]), "sync %d wakes after the one before it (%s, %s)", i, wakes[i-1], wakes[i])
	}
	span, came := wakes[len(wakes)-1].Sub(wakes[0]), arrived[len(arrived)-1].Sub(arrived[0])
	require.InDelta(t, came.Seconds(), span.Seconds(), came.Seconds()/3, "woken over %s, as they came over %s", span, came)
	require.Greater(t, span, 2*limits.Cooldown, "spread wider than a cooldown")
	require.Greater(t, wakes[0].Sub(closed), arrived[0].Sub(opened)/2,
		"the first wakes about as long after the close as it came after the outage began (%s)", arrived[0].Sub(opened))
	last := wakes[len(wakes)-1].Sub(closed)
	require.Greater(t, last, outage/2, "the last wakes most of an outage (%s) after the close, not within a cooldown: %s", outage, last)

	// The short one: scaled into the time it has left, before its NotAfter.
	at := time.Now()
	d = b.acquire(t, short)
	require.Equal(t, upstream.Wait, d.Verdict, "held for part of the time it has left")
	require.Equal(t, upstream.WaitRecovery, d.Reason)
	require.True(t, at.Add(d.Wait).Before(short.NotAfter), "woken %s, before its NotAfter %s", at.Add(d.Wait), short.NotAfter)
	sleepUntilDue(d)
	require.Equal(t, upstream.Run, b.acquire(t, short).Verdict, "admitted at its wake")

	// A new sync, never deferred, is not held.
	require.Equal(t, upstream.Run, b.acquire(t, b.req("bank-1", limits)).Verdict)

	st := b.state(t, "bank-1")
	require.EqualValues(t, 1+len(deferred)+1, st.Deferred, "each deferred sync counted once, the waits after the close not at all")
	require.EqualValues(t, probes+1, st.Probes)
	require.Zero(t, st.Skipped)
	require.Zero(t, st.Throttled)
}

// TestBreakerRecoveryAfterHours: an upstream down for three hours (its
// history written into its rows) gets its deferred syncs back over the
// three hours after the close, 30 minutes apart as they came; one whose
// NotAfter is 20 minutes after the close, deferred near the outage's end,
// is spread into those 20 minutes, ahead of syncs deferred before it.
func TestBreakerRecoveryAfterHours(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := upstream.Limits{FailureThreshold: 1}
	first := b.req("bank-1", limits)
	require.Equal(t, upstream.Run, b.acquire(t, first).Verdict)
	b.release(t, first, upstream.Failed, 0)
	var reqs []upstream.Request
	for range 6 {
		r := b.req("bank-1", limits)
		r.NotAfter = time.Now().Add(24 * time.Hour)
		require.Equal(t, upstream.Wait, b.acquire(t, r).Verdict)
		reqs = append(reqs, r)
	}
	short := b.req("bank-1", limits)
	short.NotAfter = time.Now().Add(20 * time.Minute)
	require.Equal(t, upstream.Wait, b.acquire(t, short).Verdict)

	// Three hours ago the breaker opened; sync i was deferred 30 min × i
	// after (sync 0 at 0 min, sync 5 at 150 min), the short one at 170 min.
	// The cooldown ends now.
	table, places := pgx.Identifier{b.schema, upstream.Table}.Sanitize(), pgx.Identifier{b.schema, upstream.PlacesTable}.Sanitize()
	_, err := b.pool.Exec(b.ctx, `UPDATE `+table+` SET open_since = clock_timestamp() - interval '3 hours', open_until = clock_timestamp()
WHERE task = 'transactions' AND key = 'bank-1'`)
	require.NoError(t, err)
	for i, r := range append(reqs, short) {
		minutes := 30 * i
		if i == len(reqs) {
			minutes = 170 // the short one
		}
		tag, err := b.pool.Exec(b.ctx, `UPDATE `+places+` p SET deferred_at = u.open_since + $2 * interval '1 minute'
FROM `+table+` u WHERE u.task = p.task AND u.key = p.key AND p.task = 'transactions' AND p.key = 'bank-1' AND p.job_id = $1 AND p.deferred`, r.JobID, minutes)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "sync %d holds a deferral", i)
	}
	probe := b.req("bank-1", limits)
	require.True(t, b.acquire(t, probe).Probe)
	b.release(t, probe, upstream.Succeeded, 0)

	// Sync 5 was last heard of two hours ago: still waiting for its wake
	// (150 min after the close), it is no abandoned place for the
	// decisions of the others to sweep.
	_, err = b.pool.Exec(b.ctx, `UPDATE `+places+` SET updated_at = now() - interval '2 hours' WHERE job_id = $1`, reqs[5].JobID)
	require.NoError(t, err)

	// The statements between the close and each decision take moments:
	// each wait is its sync's place, less up to 30 s.
	for i, r := range reqs {
		d := b.acquire(t, r)
		want := time.Duration(30*i) * time.Minute
		if i == 0 {
			require.True(t, d.Verdict == upstream.Run || d.Wait < 30*time.Second, "the first deferred comes back at the close: %+v", d)
			continue
		}
		require.Equal(t, upstream.Wait, d.Verdict)
		require.Equal(t, upstream.WaitRecovery, d.Reason)
		require.LessOrEqual(t, d.Wait, want, "sync %d", i)
		require.Greater(t, d.Wait, want-30*time.Second, "sync %d", i)
	}
	d := b.acquire(t, short)
	require.Equal(t, upstream.Wait, d.Verdict)
	// 170/180 of its 20 minutes less the margin for River's wake (a second).
	want := (20*time.Minute - time.Second) * 170 / 180
	require.InDelta(t, want.Seconds(), d.Wait.Seconds(), 30, "spread into the 20 minutes it has left")
	require.Less(t, d.Wait, 20*time.Minute-time.Second/2, "before its NotAfter")
}

// TestFailedProbeKeepsItsDeferral: a deferred sync that runs as the probe
// and fails keeps its first deferral: after the breaker closes it wakes in
// the order it was first deferred, ahead of a sync deferred after it, and
// the deferred counter counts it once. A deferred sync whose probe closes
// the breaker leaves no deferral behind.
func TestFailedProbeKeepsItsDeferral(t *testing.T) {
	t.Parallel()
	b := setup(t)
	limits := upstream.Limits{FailureThreshold: 1}
	table, places := pgx.Identifier{b.schema, upstream.Table}.Sanitize(), pgx.Identifier{b.schema, upstream.PlacesTable}.Sanitize()
	first := b.req("bank-1", limits)
	require.Equal(t, upstream.Run, b.acquire(t, first).Verdict)
	rel, err := b.lim.Release(b.ctx, b.pool, first, upstream.Failed, 0)
	require.NoError(t, err)
	require.True(t, rel.Open, "one failure opens it")
	require.NoError(t, b.lim.MarkDeferred(b.ctx, b.pool, first)) // as the sync worker does

	// Three syncs deferred 30, 60 and 90 minutes into an outage that began
	// three hours ago (their history written into their rows).
	var a, c, d upstream.Request
	for i, r := range []*upstream.Request{&a, &c, &d} {
		*r = b.req("bank-1", limits)
		r.NotAfter = time.Now().Add(24 * time.Hour)
		got := b.acquire(t, *r)
		require.Equal(t, upstream.Wait, got.Verdict, "sync %d", i)
		require.Equal(t, "open", got.Reason, "sync %d", i)
	}
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET open_since = clock_timestamp() - interval '3 hours', open_until = clock_timestamp()
WHERE task = 'transactions' AND key = 'bank-1'`)
	require.NoError(t, err)
	for i, r := range []upstream.Request{a, c, d} {
		tag, err := b.pool.Exec(b.ctx, `UPDATE `+places+` p SET deferred_at = u.open_since + $2 * interval '1 minute'
FROM `+table+` u WHERE u.task = p.task AND u.key = p.key AND p.task = 'transactions' AND p.key = 'bank-1' AND p.job_id = $1 AND p.deferred`, r.JobID, 30*(i+1))
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "sync %d holds a deferral", i)
	}
	require.EqualValues(t, 4, b.state(t, "bank-1").Deferred)

	// The cooldown ends: a, deferred first, probes, and fails; the worker
	// defers it again.
	got := b.acquire(t, a)
	require.Equal(t, upstream.Run, got.Verdict)
	require.True(t, got.Probe)
	rel, err = b.lim.Release(b.ctx, b.pool, a, upstream.Failed, 0)
	require.NoError(t, err)
	require.True(t, rel.Open, "the probe failed: open again")
	require.NoError(t, b.lim.MarkDeferred(b.ctx, b.pool, a))
	var into float64 // seconds
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT extract(epoch FROM p.deferred_at - u.open_since)::float8
FROM `+places+` p JOIN `+table+` u USING (task, key) WHERE p.task = 'transactions' AND p.key = 'bank-1' AND p.job_id = $1 AND p.deferred`, a.JobID).Scan(&into))
	require.InDelta(t, (30 * time.Minute).Seconds(), into, 1, "its first deferral is kept across its probe")
	require.EqualValues(t, 4, b.state(t, "bank-1").Deferred, "the failed probe's sync is counted once")

	// The next cooldown ends: d, deferred too, probes, and the upstream is
	// back.
	_, err = b.pool.Exec(b.ctx, `UPDATE `+table+` SET open_until = clock_timestamp() WHERE task = 'transactions' AND key = 'bank-1'`)
	require.NoError(t, err)
	got = b.acquire(t, d)
	require.Equal(t, upstream.Run, got.Verdict)
	require.True(t, got.Probe)
	b.release(t, d, upstream.Succeeded, 0)
	require.Equal(t, "closed", b.state(t, "bank-1").Breaker)
	var left bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM `+places+` WHERE job_id = $1)`, d.JobID).Scan(&left))
	require.False(t, left, "the probe that closed the breaker leaves no deferral behind")

	// a wakes 30 minutes after the close, c 60: in the order they were
	// first deferred, less the moments the statements since the close took.
	wa, wc := b.acquire(t, a), b.acquire(t, c)
	for i, w := range []upstream.Decision{wa, wc} {
		require.Equal(t, upstream.Wait, w.Verdict, "sync %d", i)
		require.Equal(t, upstream.WaitRecovery, w.Reason, "sync %d", i)
		want := time.Duration(30*(i+1)) * time.Minute
		require.LessOrEqual(t, w.Wait, want, "sync %d", i)
		require.Greater(t, w.Wait, want-30*time.Second, "sync %d", i)
	}
	require.Less(t, wa.Wait, wc.Wait, "the sync deferred first wakes first")
	require.Equal(t, upstream.Run, b.acquire(t, d).Verdict, "the probe's sync is not held after the close")

	st := b.state(t, "bank-1")
	require.EqualValues(t, 4, st.Deferred, "each deferred sync counted once")
	require.EqualValues(t, 2, st.Probes)
	require.Zero(t, st.Skipped)
}
