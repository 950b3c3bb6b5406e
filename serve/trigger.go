package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot/internal/upstream"
)

// TriggerArgs is the River job of a call made now, outside the schedule's
// place (POST /v1/schedules/{id}/trigger).
type TriggerArgs struct {
	Schedule uuid.UUID `json:"schedule" river:"unique"`
	// At is when it was asked for: with the schedule, the call's
	// webhook-id.
	At time.Time `json:"at"`
	// Period, when set, makes it the catch-up call of the period starting
	// then, which the service did not start (CatchUpOne): its webhook-id
	// is that period's, and it is recorded as that period's call.
	Period time.Time `json:"period,omitzero" river:"unique"`
}

// Kind is the job's kind.
func (TriggerArgs) Kind() string { return "riverslot_serve_trigger" }

// triggerEvery is how often one schedule may be triggered: a second
// request within it answers the call already queued.
const triggerEvery = 10 * time.Second

type triggerWorker struct {
	river.WorkerDefaults[TriggerArgs]
	s *Server
}

func (w *triggerWorker) Timeout(*river.Job[TriggerArgs]) time.Duration {
	return MaxTimeout + 5*time.Second
}

// Work makes the triggered call: signed like any call (webhook-id
// msg_<schedule>_trigger_<unix ms>), recorded with triggered set, retried
// up to the schedule's retries. It is not a period's call: the schedule's
// next call comes at its place as usual. A catch-up call (Period set) is
// that period's call, made only while it cannot overlap the schedule's
// next call (NotAfter: the next place less its timeout and a second).
//
// Both go through the limits of the schedule's upstream key, as its calls
// at their places do (rate, concurrency, a pause its 429 or 503 asked for,
// the breaker; a 429 they get pauses the key), and through the tenant's
// max_calls_per_second: a catch-up and every retry wait their turn in
// line; a triggered call's first attempt took its turn when it was asked
// for (POST /v1/schedules/{id}/trigger answers 429 when the quota has no
// room). Neither starts while another call of the schedule is in flight.
func (w *triggerWorker) Work(ctx context.Context, job *river.Job[TriggerArgs]) error {
	s := w.s
	id := job.Args.Schedule
	l, err := s.load(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !l.live {
		return nil // deleted or paused since: not called
	}
	if err != nil {
		return fmt.Errorf("error reading schedule %s: %w", id, err)
	}
	catchUp := !job.Args.Period.IsZero()
	var notAfter time.Time // none: a triggered call waits as long as its upstream asks
	if catchUp {
		info, ok := s.tasks[time.Duration(l.periodMS)*time.Millisecond]
		if !ok {
			return nil // its period is not served here any more
		}
		notAfter = nextPlace(info, id, time.Now()).Add(-l.timeout - time.Second)
		if time.Now().After(notAfter) {
			s.cfg.Logger.InfoContext(ctx, "riverslot serve: a catch-up call came too close to the schedule's next call, which covers it; not made",
				slog.String("schedule", id.String()), slog.Time("period", job.Args.Period))
			return nil
		}
	}
	made, claimed, err := s.claimCall(ctx, id, job.ID, l.timeout)
	if err != nil {
		return err
	}
	if !claimed {
		return river.JobSnooze(time.Second) // the call in flight first: never two at once
	}
	defer s.releaseCall(ctx, id, job.ID)
	if made > l.retries {
		return river.JobCancel(fmt.Errorf("giving up: %d calls made, the schedule's retries are %d", made, l.retries))
	}
	hr := s.hostRequest(l, job.ID, notAfter)
	d, err := s.admit(ctx, hr)
	if err != nil {
		return fmt.Errorf("error deciding schedule %s's call with its upstream: %w", id, err)
	}
	switch d.Verdict {
	case upstream.Wait:
		return river.JobSnooze(d.Wait)
	case upstream.Skip:
		s.cfg.Logger.InfoContext(ctx, "riverslot serve: a catch-up call's upstream had no room for it before the schedule's next call; not made",
			slog.String("schedule", id.String()), slog.String("reason", d.Reason))
		return nil
	}
	outcome, retryAfter := upstream.Neutral, time.Duration(0)
	defer func() { s.release(ctx, hr, outcome, retryAfter) }()
	// A triggered call's first attempt took its start under the quota when
	// it was asked for; one that runs more than a second after that (held
	// by its upstream's limits or by another call in flight) takes a new
	// turn, so that it does not land beside a call that took the next.
	stale := job.AttemptedAt != nil && job.AttemptedAt.Sub(job.Args.At) > time.Second
	if qr, ok := quotaRequest(l.tenant, l.maxCPS, job.ID, notAfter); ok && (catchUp || made > 0 || stale) {
		d, err := s.admit(ctx, qr)
		if err != nil {
			return fmt.Errorf("error deciding schedule %s's call under its tenant's quota: %w", id, err)
		}
		switch d.Verdict {
		case upstream.Wait:
			return river.JobSnooze(d.Wait)
		case upstream.Skip:
			s.cfg.Logger.InfoContext(ctx, "riverslot serve: a catch-up call's tenant quota had no room for it before the schedule's next call; not made",
				slog.String("schedule", id.String()))
			return nil
		}
		defer s.release(ctx, qr, upstream.Succeeded, 0)
	}
	a := attempt{schedule: id, l: l, jobID: job.ID, attempt: job.Attempt, triggered: true}
	if catchUp {
		// The missed period's call, late.
		period := job.Args.Period
		a.l.msgID, a.periodStart, a.triggered = messageID(id, period), &period, false
	} else {
		a.l.msgID = "msg_" + id.String() + "_trigger_" + strconv.FormatInt(job.Args.At.UnixMilli(), 10)
	}
	ok, status, wait, callErr := s.make(ctx, a)
	failure := callErr
	switch {
	case ok:
		outcome = upstream.Succeeded
		return nil
	case status == http.StatusGone:
		// As at its place: the schedule is paused, not called again.
		if err := s.pauseGone(ctx, id, l.url); err != nil {
			return err
		}
		return river.JobCancel(fmt.Errorf("%s answered 410 Gone: schedule paused", l.url))
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable && wait > 0:
		// As at its place: its upstream's key pauses (at most half the
		// period), and the call, retries left, comes after the pause.
		outcome, retryAfter = upstream.Throttled, max(wait, time.Second)
		if l.periodMS > 0 {
			retryAfter = min(retryAfter, time.Duration(l.periodMS)*time.Millisecond/2)
		}
		failure = fmt.Errorf("%s %s answered %d, Retry-After %s", l.method, l.url, status, retryAfter)
	case callErr == nil:
		outcome, failure = upstream.Failed, fmt.Errorf("%s answered %d", l.url, status)
	default:
		outcome = upstream.Failed
	}
	if made+1 > l.retries {
		return river.JobCancel(fmt.Errorf("giving up after %d calls: %w", made+1, failure))
	}
	if outcome == upstream.Throttled {
		return river.JobSnooze(retryAfter)
	}
	return failure
}

// trigger serves POST /v1/schedules/{id}/trigger: one call now, queued
// (202), counted apart from the period's calls.
func (s *Server) trigger(w http.ResponseWriter, r *http.Request) (int, any) {
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	var (
		retries int
		paused  bool
		tenant  uuid.UUID
		maxCPS  float64
	)
	err := s.cfg.Pool.QueryRow(r.Context(), `SELECT s.retries, s.paused, s.tenant_id, coalesce(t.max_calls_per_second, 0)
FROM `+s.schedules+` s LEFT JOIN `+s.tenants+` t ON t.id = s.tenant_id
WHERE s.id = $1 AND s.deleted_at IS NULL AND ($2::uuid IS NULL OR s.tenant_id = $2)`,
		id, principalOf(r).tenantFilter()).Scan(&retries, &paused, &tenant, &maxCPS)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return internal(err)
	}
	if paused {
		return 0, &apiError{status: http.StatusConflict, Field: "paused", Error: "paused: the schedule is paused; resume it (PATCH {\"paused\": false}) to trigger it"}
	}
	now := time.Now().UTC()
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	res, err := s.inserter.InsertTx(r.Context(), tx, TriggerArgs{Schedule: id, At: now}, &river.InsertOpts{
		Queue: callsQueue, MaxAttempts: retries + 1,
		// Unique by schedule within triggerEvery (At is not part of the
		// key): a second request answers the call already queued.
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: triggerEvery},
	})
	if err != nil {
		return internal(err)
	}
	// A new call takes its start under the tenant's quota now, or is not
	// queued: 429, the quota named, with when to ask again.
	if qr, ok := quotaRequest(tenant, maxCPS, res.Job.ID, noWait); ok && !res.UniqueSkippedAsDuplicate {
		d, err := s.limiter.Acquire(r.Context(), s.cfg.Pool, qr)
		if err != nil {
			return internal(err)
		}
		if d.Verdict != upstream.Run {
			retry, err := s.quotaRoomIn(r.Context(), tenant, maxCPS)
			if err != nil {
				return internal(err)
			}
			w.Header().Set("Retry-After", strconv.Itoa(int(retry/time.Second)))
			return 0, quotaExceeded("max_calls_per_second", maxCPS, fmt.Sprintf("the tenant's calls (at their places, retried, triggered, caught up) take the quota now; ask again in %s", retry))
		}
		s.release(r.Context(), qr, upstream.Succeeded, 0)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	var queued TriggerArgs // the one queued before, for a duplicate
	if err := json.Unmarshal(res.Job.EncodedArgs, &queued); err != nil {
		return internal(err)
	}
	return http.StatusAccepted, map[string]any{"id": id, "job_id": res.Job.ID, "duplicate": res.UniqueSkippedAsDuplicate,
		"webhook_id": "msg_" + id.String() + "_trigger_" + strconv.FormatInt(queued.At.UnixMilli(), 10)}
}
