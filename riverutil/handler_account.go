package riverutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/sqlbucket"
	"github.com/riverslot/riverslot/syncjob"
)

// AccountStatus is where one account stands in a task: where the plan puts
// it, its pin, and its sync jobs.
type AccountStatus struct {
	Task      string
	AccountID uuid.UUID
	// Plan is the plan of the task's latest cycle (CycleStart), under which
	// Bucket, Slot and Offset are computed: the account's bucket (the last
	// byte of its UUID, the last two for a task of 65,536 buckets), its
	// hash slot (shifted by the task's phase) and its fixed offset inside a
	// slot.
	Plan       string
	CycleStart time.Time
	Bucket     int
	Slot       int
	Offset     time.Duration
	// Pinned is set when the latest cycle's placement pins the account:
	// PinnedSlot is the slot it is served in (the pin, shifted for a task
	// OppositeOf a weighted one), PinWeight its weight then.
	Pinned     bool
	PinnedSlot int
	PinWeight  float64
	// NextSyncs are the account's regular sync times in the next cycles
	// from now: the slot it is served in (pinned, when the latest cycle
	// pins it) plus its offset. Pins of later cycles may differ.
	NextSyncs []time.Time
	// Current and Previous are the account's sync job in the latest cycle
	// and the one before it; nil when it has none (not selected yet, or
	// deleted by River's retention).
	Current, Previous *AccountSync
	// LastSynced is when the account's most recent sync job that called
	// Sync completed, among those River keeps; zero when none.
	LastSynced time.Time
}

// AccountSync is one sync job of an account.
type AccountSync struct {
	JobID       int64
	CycleStart  time.Time
	Slot        int
	State       string
	ScheduledAt time.Time
	AttemptedAt *time.Time
	FinalizedAt *time.Time
	Attempts    int
	// Skipped is why the job completed without calling Sync
	// (syncjob.SkippedStale or SkippedTooSoon), "" when it called it.
	Skipped string
	// LastError is River's last recorded error of the job.
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

// accountSyncSQL reads the account's latest sync job of task $3 and cycle
// $4.
const accountSyncSQL = accountJobsCTE + `SELECT id, (args->>'cycle_start')::timestamptz, coalesce((args->>'slot')::int, -1), state, scheduled_at, attempted_at, finalized_at, attempt,
		coalesce(metadata->'` + rivertype.MetadataKeyOutput + `'->>'` + syncjob.OutputSkipped + `', ''), errors
	FROM j WHERE kind = $2 AND args->>'task' = $3 AND args->>'cycle_start' = $4 ORDER BY id DESC LIMIT 1`

// lastSyncedSQL finds when the account was last synced by task $3 (Sync
// called) among the jobs River keeps.
const lastSyncedSQL = accountJobsCTE + `SELECT max(finalized_at) FROM j WHERE kind = $2 AND args->>'task' = $3 AND state = 'completed'
	AND NOT coalesce(metadata->'` + rivertype.MetadataKeyOutput + `' ? '` + syncjob.OutputSkipped + `', false)`

// Account returns where the account stands in the named task's latest
// cycle: bucket, slot, offset and pin under the cycle's plan and placement,
// its next regular syncs, and its sync jobs of this cycle and the one
// before. Every read is an index lookup: River's GIN index on args for the
// account's jobs, the pins table's key for its pin.
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
	latest, plan, found, err := s.ledger().LatestCycle(ctx, s.pool, spec.Name, spec.PlanID)
	if err != nil {
		return nil, err
	}
	var placement string
	var ref *taskspec.PinsRef
	if !found {
		latest = spec.Schedule.Start(now)
	} else {
		if spec, err = planSpec(spec, plan, latest); err != nil {
			return nil, err
		}
		// The pin, when the latest cycle follows pins, as its record says.
		c, ok, err := s.ledger().CycleRecord(ctx, s.pool, spec.Name, spec.PlanID, latest)
		if err != nil {
			return nil, err
		}
		if ok {
			placement, ref = c.Placement, c.Pins
		}
	}
	a.Plan, a.CycleStart = spec.PlanID, latest
	a.Bucket = spec.Plan.BucketOf(id)
	a.Slot = spec.Plan.Shift(spec.Plan.SlotOf(id), spec.Shift)
	a.Offset = spec.Plan.Offset(spec.Seed, id)

	if placement == perslot.PlacementPinned && ref != nil && ref.Task != "" {
		schema := ref.Schema
		if schema == "" {
			schema = spec.Schema
		}
		var slot int
		err := spec.AccountsDB(s.pool).QueryRow(ctx, "SELECT slot, weight FROM "+sqlbucket.QualifiedTable(schema, taskspec.PinsTable)+
			" WHERE task = $1 AND plan = $2 AND cycle_start = $3 AND account_id = $4", ref.Task, ref.Plan, ref.PinsCycle(latest), id).Scan(&slot, &a.PinWeight)
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
		if at := spec.Plan.SlotStart(start, served).Add(a.Offset); at.After(now) {
			a.NextSyncs = append(a.NextSyncs, at.UTC())
		}
	}

	prevStart := latest.Add(-spec.Plan.Cycle)
	if spec.Schedule.Location != nil {
		prevStart = spec.Schedule.Start(latest.Add(-time.Nanosecond)).UTC()
	}
	for _, c := range []struct {
		start time.Time
		into  **AccountSync
	}{{latest, &a.Current}, {prevStart, &a.Previous}} {
		if *c.into, err = s.accountSync(ctx, table, spec.Name, id, c.start); err != nil {
			return nil, err
		}
	}
	var last *time.Time
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(lastSyncedSQL, table), id.String(), syncjob.Kind, spec.Name).Scan(&last); err != nil {
		return nil, fmt.Errorf("error finding the account's last sync: %w", err)
	}
	if last != nil {
		a.LastSynced = last.UTC()
	}
	return a, nil
}

func (s *Scheduler) accountSync(ctx context.Context, table, task string, id uuid.UUID, cycleStart time.Time) (*AccountSync, error) {
	j := &AccountSync{}
	var errs []json.RawMessage
	err := s.pool.QueryRow(ctx, fmt.Sprintf(accountSyncSQL, table), id.String(), syncjob.Kind, task, cycleStart.UTC().Format(time.RFC3339Nano)).
		Scan(&j.JobID, &j.CycleStart, &j.Slot, &j.State, &j.ScheduledAt, &j.AttemptedAt, &j.FinalizedAt, &j.Attempts, &j.Skipped, &errs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("error reading the account's sync job: %w", err)
	}
	j.CycleStart, j.ScheduledAt = j.CycleStart.UTC(), j.ScheduledAt.UTC()
	if len(errs) > 0 {
		var last struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(errs[len(errs)-1], &last) == nil {
			j.LastError = last.Error
		}
	}
	return j, nil
}
