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

// TestGoneOutsideItsPlace: a 410 Gone answering a triggered call, or a
// catch-up call, pauses its schedule as one at its place does: not called
// again (a second trigger answers 409), paused_reason "gone" in its GET;
// resumed, the reason is gone and the next trigger calls again. A pause
// asked for says "request".
func TestGoneOutsideItsPlace(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Hour // no call at a place during the test (its first period is the next)
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)
	ctx := context.Background()
	target, url := newAnswering(t, func(_ string, _ int, w http.ResponseWriter) { w.WriteHeader(http.StatusGone) })
	get := func(id string) serve.Schedule {
		var sc serve.Schedule // decoded afresh: an absent field stays absent
		require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+id, nil, &sc))
		return sc
	}
	paused := func(id string) func() bool { return func() bool { return get(id).Paused } }

	// A catch-up is made only while it can end before the schedule's next
	// place: a schedule whose place is not in the next minute.
	var triggered, caughtUp serve.Schedule
	n := 0
	for _, sc := range []*serve.Schedule{&triggered, &caughtUp} {
		for {
			n++
			*sc = a.schedule(map[string]any{"url": url + "/s" + strconv.Itoa(n), "period": "24h", "timeout": "2s", "retries": 3})
			now := time.Now()
			place := now.Truncate(period).Add(time.Duration(sc.OffsetSeconds * float64(time.Second)))
			if place.Before(now) {
				place = place.Add(period)
			}
			if place.Sub(now) > time.Minute {
				break
			}
		}
	}
	require.Nil(t, triggered.PausedReason)

	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 10))
	client, _ := riverslottest.StartClient(ctx, t, a.srv.Pool(), config)

	// Triggered: 410, paused, its retries not spent on it.
	path := triggered.URL[len(url):]
	jobs := pgx.Identifier{a.srv.Schema(), "river_job"}.Sanitize()
	var queued struct {
		JobID int64 `json:"job_id"`
	}
	require.Equal(t, http.StatusAccepted, a.do("POST", "/v1/schedules/"+triggered.ID.String()+"/trigger", nil, &queued))
	riverslottest.WaitFor(t, 15*time.Second, "the triggered call's 410 to pause its schedule", paused(triggered.ID.String()))
	// Its job ended (a trigger while it runs answers it, a duplicate).
	riverslottest.WaitFor(t, 15*time.Second, "the triggered call's job to end", func() bool {
		var state string
		require.NoError(t, a.srv.Pool().QueryRow(ctx, `SELECT state FROM `+jobs+` WHERE id = $1`, queued.JobID).Scan(&state))
		return state != "running"
	})
	got := get(triggered.ID.String())
	require.NotNil(t, got.PausedReason)
	require.Equal(t, serve.PausedGone, *got.PausedReason)
	require.Equal(t, "paused", got.Health.Status)
	require.NotEmpty(t, got.LastCalls)
	require.Equal(t, http.StatusGone, *got.LastCalls[0].Status)
	require.True(t, got.LastCalls[0].Triggered)
	require.Empty(t, got.NextCalls, "paused: no next calls")
	var e apiErr
	require.Equal(t, http.StatusConflict, a.do("POST", "/v1/schedules/"+triggered.ID.String()+"/trigger", nil, &e), "paused: not triggered")
	require.Len(t, target.calls(path), 1, "one call: the 410 is not retried")

	// Resumed: no reason; triggered again, called again (and paused
	// again). Paused by request: "request".
	var resumed serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+triggered.ID.String(), map[string]any{"paused": false}, &resumed))
	require.Nil(t, resumed.PausedReason)
	require.False(t, resumed.Paused)
	require.Nil(t, get(triggered.ID.String()).PausedReason)
	var again struct {
		Duplicate bool `json:"duplicate"`
	}
	require.Equal(t, http.StatusAccepted, a.do("POST", "/v1/schedules/"+triggered.ID.String()+"/trigger", nil, &again))
	require.False(t, again.Duplicate)
	riverslottest.WaitFor(t, 15*time.Second, "the second trigger's 410", paused(triggered.ID.String()))
	require.Len(t, target.calls(path), 2)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+triggered.ID.String(), map[string]any{"paused": false}, nil))
	var asked serve.Schedule
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+triggered.ID.String(), map[string]any{"paused": true}, &asked))
	require.NotNil(t, asked.PausedReason)
	require.Equal(t, serve.PausedByRequest, *asked.PausedReason)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/schedules/"+triggered.ID.String(), map[string]any{"retries": 2}, &asked))
	require.Equal(t, serve.PausedByRequest, *asked.PausedReason, "still paused: the reason it had")
	var created serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": url + "/made-paused", "period": "24h", "paused": true}, &created))
	require.Equal(t, serve.PausedByRequest, *created.PausedReason)

	// A catch-up call (as RecordMissed queues one for a period the
	// service did not start): 410, paused.
	missedPeriod := time.Now().Truncate(period).Add(-period)
	_, err := client.Insert(ctx, serve.TriggerArgs{Schedule: caughtUp.ID, At: time.Now().UTC(), Period: missedPeriod},
		&river.InsertOpts{Queue: "riverslot_calls", MaxAttempts: 4})
	require.NoError(t, err)
	riverslottest.WaitFor(t, 15*time.Second, "the catch-up call's 410 to pause its schedule", paused(caughtUp.ID.String()))
	got = get(caughtUp.ID.String())
	require.Equal(t, serve.PausedGone, *got.PausedReason)
	require.Equal(t, http.StatusGone, *got.LastCalls[0].Status)
	require.False(t, got.LastCalls[0].Triggered, "the missed period's call, not a triggered one")
	require.Len(t, target.calls(caughtUp.URL[len(url):]), 1)
}
