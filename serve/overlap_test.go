package serve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// heldReceiver is a loopback target that holds its first call in flight
// until let is called, and counts the calls, the most in flight at once,
// when the first ended and when the second came.
type heldReceiver struct {
	url                 string
	mu                  sync.Mutex
	got, inFlight, most int
	firstEnded          time.Time
	secondAt            time.Time
	let                 func()
}

func newHeldReceiver(t *testing.T) *heldReceiver {
	t.Helper()
	h := &heldReceiver{}
	hold := make(chan struct{})
	var release sync.Once
	h.let = func() { release.Do(func() { close(hold) }) }
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.got++
		n := h.got
		h.inFlight++
		h.most = max(h.most, h.inFlight)
		if n == 2 {
			h.secondAt = time.Now()
		}
		h.mu.Unlock()
		if n == 1 {
			select { // the first call, held in flight
			case <-hold:
			case <-r.Context().Done():
			}
		}
		h.mu.Lock()
		h.inFlight--
		if n == 1 {
			h.firstEnded = time.Now()
		}
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(h.let) // a failure leaves nothing held
	h.url = ts.URL
	return h
}

// count returns the calls received so far.
func (h *heldReceiver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

// heldPeriod is the period of setupHeld's schedule.
const heldPeriod = 24 * time.Hour

// setupHeld starts a server with one schedule of heldPeriod calling a
// heldReceiver, and a River client working its calls.
func setupHeld(t *testing.T) (*api, *heldReceiver, serve.Schedule, *river.Client[pgx.Tx]) {
	t.Helper()
	a := setup(t, &serve.Guard{AllowPrivate: true}, heldPeriod)
	h := newHeldReceiver(t)
	sc := a.schedule(map[string]any{"url": h.url + "/x", "period": heldPeriod.String(), "timeout": "10s"})
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	client, _ := riverslottest.StartClient(context.Background(), t, a.srv.Pool(), config)
	return a, h, sc, client
}

// TestCallsNeverOverlap: a schedule's call at its place that comes while a
// triggered call of the schedule is in flight waits for it to end (its
// attempt snoozes without calling), then calls: the receiver never has two of the schedule's calls at once, and
// gets both.
func TestCallsNeverOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, h, sc, client := setupHeld(t)

	require.Equal(t, http.StatusAccepted, a.do("POST", "/v1/schedules/"+sc.ID.String()+"/trigger", nil, nil))
	riverslottest.WaitFor(t, 10*time.Second, "the triggered call in flight", func() bool { return h.count() == 1 })
	// The period's call, queued now (as its slot's fan-out queues it at its
	// place), starts while the triggered call is in flight.
	info, err := a.srv.Scheduler().Task(serve.TaskName(heldPeriod))
	require.NoError(t, err)
	res, err := client.Insert(ctx, riverslot.SyncArgs{Task: info.Name, AccountID: sc.ID, CycleStart: info.Schedule.Start(time.Now()), NotAfter: time.Now().Add(time.Minute)},
		&river.InsertOpts{Queue: "riverslot_calls"})
	require.NoError(t, err)
	jobs := pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()
	// Its first attempt over: snoozed back (it found the triggered call in
	// flight), or completed (it called anyway: the receiver then has it).
	riverslottest.WaitFor(t, 10*time.Second, "the period's call's first attempt to end", func() bool {
		// (River gives a snoozed job its attempt back, not its attempted_at.)
		var state string
		var attempted bool
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT state, attempted_at IS NOT NULL FROM `+jobs+` WHERE id = $1`, res.Job.ID).Scan(&state, &attempted))
		return attempted && state != "running"
	})
	require.Equal(t, 1, h.count(), "the period's call waits while the triggered one is in flight")
	h.let()
	riverslottest.WaitFor(t, 10*time.Second, "the period's call, after", func() bool { return h.count() == 2 })
	h.mu.Lock()
	mostInFlight, ended, second := h.most, h.firstEnded, h.secondAt
	h.mu.Unlock()
	require.Equal(t, 1, mostInFlight, "never two calls of the schedule at once")
	require.False(t, second.Before(ended), "the second call starts after the first ended")
}

// TestTriggerWaitsForTheCallInFlight: a triggered call asked for while the
// schedule's call at its place is in flight waits for it to end, then
// calls; and a schedule's claim left by a process killed mid-call (its
// hold not passed) holds a call back, which calls once the hold has
// passed.
func TestTriggerWaitsForTheCallInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, h, sc, client := setupHeld(t)
	count := h.count

	info, err := a.srv.Scheduler().Task(serve.TaskName(heldPeriod))
	require.NoError(t, err)
	_, err = client.Insert(ctx, riverslot.SyncArgs{Task: info.Name, AccountID: sc.ID, CycleStart: info.Schedule.Start(time.Now()), NotAfter: time.Now().Add(time.Minute)},
		&river.InsertOpts{Queue: "riverslot_calls"})
	require.NoError(t, err)
	riverslottest.WaitFor(t, 10*time.Second, "the call at its place in flight", func() bool { return count() == 1 })
	require.Equal(t, http.StatusAccepted, a.do("POST", "/v1/schedules/"+sc.ID.String()+"/trigger", nil, nil))
	jobs := pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 10*time.Second, "the triggered call's first attempt to end", func() bool {
		var n int
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT count(*) FROM `+jobs+` WHERE kind = $1 AND attempted_at IS NOT NULL AND state <> 'running'`, serve.TriggerArgs{}.Kind()).Scan(&n))
		return n == 1
	})
	require.Equal(t, 1, count(), "the triggered call waits while the call at its place is in flight")
	h.let()
	riverslottest.WaitFor(t, 10*time.Second, "the triggered call, after", func() bool { return count() == 2 })
	h.mu.Lock()
	most := h.most
	h.mu.Unlock()
	require.Equal(t, 1, most, "never two calls of the schedule at once")

	// A claim a killed process left, its hold 3 s from now: the next call
	// (the next period's, queued now) waits it out, then calls.
	schedules := pgx.Identifier{a.srv.Schema(), serve.SchedulesTable}.Sanitize()
	riverslottest.WaitFor(t, 10*time.Second, "the triggered call's claim given back", func() bool {
		var held bool
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT call_job IS NOT NULL FROM `+schedules+` WHERE id = $1`, sc.ID).Scan(&held))
		return !held
	})
	var until time.Time
	require.NoError(t, a.srv.Pool().QueryRow(ctx, `UPDATE `+schedules+` SET call_job = -1, call_until = clock_timestamp() + interval '3 seconds' WHERE id = $1 RETURNING call_until`, sc.ID).Scan(&until))
	_, err = client.Insert(ctx, riverslot.SyncArgs{Task: info.Name, AccountID: sc.ID, CycleStart: info.Schedule.Next(info.Schedule.Start(time.Now())), NotAfter: time.Now().Add(time.Minute)},
		&river.InsertOpts{Queue: "riverslot_calls"})
	require.NoError(t, err)
	riverslottest.WaitFor(t, 20*time.Second, "the call after the dead claim's hold", func() bool { return count() == 3 })
	require.False(t, time.Now().Before(until), "called only after the dead claim's hold passed (%s)", until)
}
