package riverslot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/sqlbucket"
)

// AccountStatus is where one account stands in a task: where the plan puts
// it, its pin, and its sync jobs.
type AccountStatus struct {
	Task      string
	AccountID uuid.UUID
	// Plan is the plan of the task's cycle running now (CycleStart: the
	// latest in the ledger that has started, as Status chooses it; before
	// the task's first cycle starts, the latest prepared; with no cycle in
	// the ledger, the schedule's at now), under which Bucket, Slot and
	// Offset are computed: the account's bucket (the last byte of its
	// UUID, the last two for a task of 65,536 buckets), its hash slot
	// (shifted by the task's phase) and its fixed offset inside a slot. For a calendar-month task, Slot is the day of that month it is
	// due on and Offset its time after that day's start (its place is a
	// fraction of each month, so both change month by month).
	Plan       string
	CycleStart time.Time
	Bucket     int
	Slot       int
	Offset     time.Duration
	// Pinned is set when that cycle's placement pins the account:
	// PinnedSlot is the slot it is served in (the pin, shifted for a task
	// OppositeOf a weighted one), PinWeight its weight then.
	Pinned     bool
	PinnedSlot int
	PinWeight  float64
	// NextSyncs are the account's regular sync times in the next cycles
	// from now: the slot it is served in (pinned, when the cycle running
	// pins it) plus its offset. Pins of later cycles may differ.
	NextSyncs []time.Time
	// Current and Previous are the account's sync in the cycle running now
	// (CycleStart; a cycle prepared ahead of its start, see
	// TaskStatus.Prepared, is neither) and the one before it, as the
	// ledger records the cycles: the sync job itself while River has it
	// queued or running (Source "river"), else what the ledger says of the
	// account's slot (Source "ledger": its fan-out finished, so the sync
	// was enqueued for the account's regular time, and how it ended is
	// counted in the cycle's totals; or the slot failed or did not fan
	// out). Nil when the ledger records no such cycle.
	Current, Previous *AccountSync
}

// AccountSync is an account's sync in one cycle.
type AccountSync struct {
	// Source is "river" (the sync job, queued or running) or "ledger"
	// (the cycle's ledger rows: River has no unfinished job of it).
	Source     string
	JobID      int64 // 0 from the ledger
	CycleStart time.Time
	Plan       string
	Slot       int
	// State is River's job state (scheduled, available, pending, running,
	// retryable) from River; from the ledger, the slot's: SlotDone (its
	// fan-out enqueued the account's sync; the sync has ended), SlotFailed,
	// SlotScheduled (its fan-out is to run or running) or SlotMissing.
	State string
	// ScheduledAt is the job's scheduled time from River; from the ledger,
	// the account's regular time in the cycle (a late fan-out may have
	// spread it later).
	ScheduledAt time.Time
	AttemptedAt *time.Time
	// FanOutAt is, from the ledger, when the slot's fan-out finished.
	FanOutAt *time.Time
	Attempts int
	// LastError is River's last recorded error of the job, or the slot's
	// fan-out error the ledger records.
	LastError string
}

// nextSyncsShown is how many next syncs Account lists.
const nextSyncsShown = 3

// accountJobsCTE lists every job whose args name account $1 through
// River's GIN index on args (a handful per account: one per cycle River
// keeps, per task), materialized so that the planner never trades it for
// the kind or state indexes, and never matches the task or cycle through
// the GIN index (their values are in every sync job of the cycle).
const accountJobsCTE = `WITH j AS MATERIALIZED (SELECT * FROM %s WHERE args @> jsonb_build_object('account_id', $1::text)) `

// accountSyncSQL reads the account's latest unfinished sync job of task $3
// and cycle $4.
const accountSyncSQL = accountJobsCTE + `SELECT id, state, scheduled_at, attempted_at, attempt, errors
	FROM j WHERE kind = $2 AND args->>'task' = $3 AND args->>'cycle_start' = $4
	  AND state IN ('scheduled', 'available', 'pending', 'running', 'retryable') ORDER BY id DESC LIMIT 1`

// Account returns where the account stands in the named task's cycle
// running now, the one Status describes (a cycle bootstrapped ahead of its
// start by EnqueueCycle, or by the trigger's lead, does not hide it):
// bucket, slot, offset and pin under the cycle's plan and placement, its
// next regular syncs, and its sync in this cycle and the one before.
// Every read is an index lookup: the ledger's key for the cycles and
// slots, River's GIN index on args for the account's unfinished jobs, the
// pins table's key for its pin.
func (s *Scheduler) Account(ctx context.Context, taskName string, id uuid.UUID) (*AccountStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	return s.account(ctx, spec, id, time.Now())
}

func (s *Scheduler) account(ctx context.Context, spec *taskspec.Spec, id uuid.UUID, now time.Time) (*AccountStatus, error) {
	table := s.riverTable(spec)
	a := &AccountStatus{Task: spec.Name, AccountID: id, Plan: spec.PlanID}
	// The cycle running at now, as Status chooses it (before the task's
	// first cycle starts, the latest prepared); a cycle prepared ahead of
	// its start does not hide it.
	current, plan, _, err := s.runningCycle(ctx, spec, now)
	found := err == nil
	if errors.Is(err, ErrNoCycle) {
		err = nil // no cycle in the ledger: the one the schedule has at now
	}
	if err != nil {
		return nil, err
	}
	var placement string
	var ref *taskspec.PinsRef
	if !found {
		current = spec.Schedule.Start(now)
	} else {
		if spec, err = planSpec(spec, plan, current); err != nil {
			return nil, err
		}
		// The pin, when the cycle follows pins, as its record says.
		c, ok, err := s.ledger().CycleRecord(ctx, s.pool, spec.Name, spec.PlanID, current)
		if err != nil {
			return nil, err
		}
		if ok {
			placement, ref = c.Placement, c.Pins
		}
	}
	a.Plan, a.CycleStart = spec.PlanID, current
	a.Bucket = spec.Plan.BucketOf(id)
	a.Slot = spec.SlotOf(current, id)
	a.Offset = spec.Regular(current, a.Slot, id).Sub(spec.SlotStart(current, a.Slot))

	if placement == perslot.PlacementPinned && ref != nil && ref.Task != "" {
		schema := ref.Schema
		if schema == "" {
			schema = spec.Schema
		}
		var slot int
		err := spec.AccountsDB(s.pool).QueryRow(ctx, "SELECT slot, weight FROM "+sqlbucket.QualifiedTable(schema, taskspec.PinsTable)+
			" WHERE task = $1 AND plan = $2 AND cycle_start = $3 AND account_id = $4", ref.Task, ref.Plan, ref.PinsCycle(current), id).Scan(&slot, &a.PinWeight)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("error reading the account's pin: %w", err)
		case slot >= 0 && slot < spec.Plan.Slots:
			a.Pinned, a.PinnedSlot = true, spec.Plan.Shift(slot, ref.Shift)
		}
	}
	served := a.Slot
	if a.Pinned {
		served = a.PinnedSlot
	}
	for start := spec.Schedule.Start(now); len(a.NextSyncs) < nextSyncsShown; start = spec.Schedule.Next(start) {
		at := spec.Plan.SlotStart(start, served).Add(a.Offset)
		if spec.Monthly() {
			at = spec.Regular(start, spec.SlotOf(start, id), id) // a fraction of each month
		}
		if at.After(now) {
			a.NextSyncs = append(a.NextSyncs, at.UTC())
		}
	}

	if !found {
		return a, nil
	}
	cycles := []ledger.Cycle{{Task: spec.Name, Plan: spec.Key, Start: current}}
	prev, err := s.ledger().Cycles(ctx, s.pool, spec.Name, time.Time{}, current, 1)
	if err != nil {
		return nil, err
	}
	cycles = append(cycles, prev...)
	for i, c := range cycles {
		cs, err := planSpec(spec, c.Plan, c.Start)
		if err != nil {
			return nil, err
		}
		slot := served
		if cs.PlanID != spec.PlanID || cs.Monthly() {
			slot = cs.SlotOf(c.Start, id) // a month's day differs month by month
		}
		sync, err := s.accountSync(ctx, table, cs, id, c.Start, slot)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			a.Current = sync
		} else {
			a.Previous = sync
		}
	}
	return a, nil
}

func (s *Scheduler) accountSync(ctx context.Context, table string, spec *taskspec.Spec, id uuid.UUID, cycleStart time.Time, slot int) (*AccountSync, error) {
	j := &AccountSync{Source: "river", CycleStart: cycleStart.UTC(), Plan: spec.PlanID, Slot: slot}
	var errs []json.RawMessage
	err := s.pool.QueryRow(ctx, fmt.Sprintf(accountSyncSQL, table), id.String(), syncjob.Kind, spec.Name, cycleStart.UTC().Format(time.RFC3339Nano)).
		Scan(&j.JobID, &j.State, &j.ScheduledAt, &j.AttemptedAt, &j.Attempts, &errs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// River has no unfinished job of it: the ledger says what its
		// slot did.
		slots, err := s.ledger().Slots(ctx, s.pool, spec.Name, spec.PlanID, cycleStart)
		if err != nil {
			return nil, err
		}
		j.Source, j.State = "ledger", SlotMissing
		j.ScheduledAt = spec.Regular(cycleStart, slot, id).UTC()
		if r, ok := slots[slot]; ok {
			switch {
			case r.Finished != nil:
				j.State, j.FanOutAt = SlotDone, r.Finished
			case r.FailedAt != nil:
				j.State, j.LastError = SlotFailed, r.Error
			default:
				j.State, j.LastError = SlotScheduled, r.Error
			}
		}
		return j, nil
	case err != nil:
		return nil, fmt.Errorf("error reading the account's sync job: %w", err)
	}
	j.ScheduledAt = j.ScheduledAt.UTC()
	j.LastError = lastError(errs)
	return j, nil
}
