package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
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
// up to the schedule's retries. It does not go through the upstream's
// limits and is not a period's call: the schedule's next call comes at its
// place as usual.
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
	a := attempt{schedule: id, l: l, jobID: job.ID, attempt: job.Attempt, triggered: true}
	if job.Args.Period.IsZero() {
		a.l.msgID = "msg_" + id.String() + "_trigger_" + strconv.FormatInt(job.Args.At.UnixMilli(), 10)
	} else {
		// A catch-up: the missed period's call, late.
		period := job.Args.Period
		a.l.msgID, a.periodStart, a.triggered = messageID(id, period), &period, false
	}
	ok, status, _, callErr := s.make(ctx, a)
	switch {
	case ok:
		return nil
	case job.Attempt > l.retries:
		return river.JobCancel(fmt.Errorf("triggered call: giving up after %d attempts: %d %v", job.Attempt, status, callErr))
	case callErr != nil:
		return callErr
	}
	return fmt.Errorf("%s answered %d", l.url, status)
}

// trigger serves POST /v1/schedules/{id}/trigger: one call now, queued
// (202), counted apart from the period's calls.
func (s *Server) trigger(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	var retries int
	var paused bool
	err := s.cfg.Pool.QueryRow(r.Context(), `SELECT retries, paused FROM `+s.schedules+` WHERE id = $1 AND deleted_at IS NULL AND ($2::uuid IS NULL OR tenant_id = $2)`,
		id, principalOf(r).tenantFilter()).Scan(&retries, &paused)
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
	res, err := s.inserter.Insert(r.Context(), TriggerArgs{Schedule: id, At: now}, &river.InsertOpts{
		Queue: callsQueue, MaxAttempts: retries + 1,
		// Unique by schedule within triggerEvery (At is not part of the
		// key): a second request answers the call already queued.
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: triggerEvery},
	})
	if err != nil {
		return internal(err)
	}
	var queued TriggerArgs // the one queued before, for a duplicate
	if err := json.Unmarshal(res.Job.EncodedArgs, &queued); err != nil {
		return internal(err)
	}
	return http.StatusAccepted, map[string]any{"id": id, "job_id": res.Job.ID, "duplicate": res.UniqueSkippedAsDuplicate,
		"webhook_id": "msg_" + id.String() + "_trigger_" + strconv.FormatInt(queued.At.UnixMilli(), 10)}
}
