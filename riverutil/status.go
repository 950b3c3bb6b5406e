package riverutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/bootstrap"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/perslot"
	"github.com/riverslot/riverslot/sqlbucket"
	"github.com/riverslot/riverslot/syncjob"
)

// Slot fan-out states in SlotStatus.State.
const (
	SlotScheduled = "scheduled" // the per-slot job waits for its time
	SlotRunning   = "running"   // fanning out (or retrying after an error)
	SlotDone      = "done"
	SlotFailed    = "failed" // discarded or cancelled: see Error
	SlotMissing   = "missing"
)

// TaskStatus is where a task's cycles stand: the current one and the one
// before it.
type TaskStatus struct {
	Task     string
	Current  *CycleStatus
	Previous *CycleStatus // nil when the task has no earlier cycle
}

// CycleStatus is one cycle of one task, read from River's job table and the
// accounts table.
type CycleStatus struct {
	CycleStart time.Time
	Slots      int
	// PerSlot has one entry per slot, in slot order.
	PerSlot []SlotStatus

	SlotsDone, SlotsFailed int

	// Sync jobs of the cycle: Enqueued is what the fan-outs inserted (their
	// cursors), Skipped the late accounts they skipped. By state: Pending
	// (scheduled or available), Running, Retryable, Completed (Enqueued less
	// the others), Discarded, Cancelled.
	Enqueued, Skipped               int64
	Pending, Running, Retryable     int64
	Completed, Discarded, Cancelled int64
	AccountsExpected                int64
	LatenessP50, LatenessP99        time.Duration
	LatenessSample                  int
	NextSlot                        int // -1 when every slot has started
	NextSlotAt                      time.Time
	Verdict                         string
	OnTrack                         bool
	BehindSlots                     int
	FailedSlot                      int // -1 when none failed
	FailedError                     string
}

// SlotStatus is one slot's fan-out.
type SlotStatus struct {
	Slot     int
	Start    time.Time
	State    string
	Attempts int
	// Enqueued and Skipped are the accounts the fan-out enqueued and
	// skipped as late so far; Batches the transactions it committed.
	Enqueued, Skipped int64
	Batches           int
	// Expected is the accounts the slot selects today.
	Expected int64
	// Error is River's last recorded error of a failed or retrying slot.
	Error string
}

// latenessSample bounds how many recently completed sync jobs Status reads
// for lateness percentiles.
const latenessSample = 2000

// Status returns where the named task's current cycle (the latest with a
// bootstrap job) and the one before it stand. It reads River's job table
// through River's indexes (the cycle's per-slot jobs, the unfinished sync
// jobs, which slot scheduling keeps few, and recently finished ones) and
// counts the accounts per slot through the bucket index; it never scans
// every sync job. Lateness percentiles come from the cycle's most recently
// completed sync jobs, at most 2,000. The accounts per slot are counted at
// most once a minute per task (a count of a million accounts takes a few
// hundred milliseconds).
func (s *Scheduler) Status(ctx context.Context, taskName string) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	var latest *time.Time
	if err := s.pool.QueryRow(ctx, "SELECT max((args->>'cycle_start')::timestamptz) FROM "+s.riverTable(spec)+
		" WHERE kind = $1 AND args->>'task' = $2 AND args->>'plan' = $3", bootstrap.Kind, spec.Name, spec.PlanID).Scan(&latest); err != nil {
		return nil, fmt.Errorf("error finding the task's latest cycle: %w", err)
	}
	if latest == nil {
		return nil, fmt.Errorf("task %q has no cycle yet: no bootstrap job of its plan %s in River's job table", spec.Name, spec.PlanID)
	}
	return s.statusAt(ctx, spec, latest.UTC())
}

// StatusAt is Status for the cycle starting at cycleStart.
func (s *Scheduler) StatusAt(ctx context.Context, taskName string, cycleStart time.Time) (*TaskStatus, error) {
	spec, err := s.spec(taskName)
	if err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errNoRiverSchema
	}
	if start := spec.Schedule.Start(cycleStart); !start.Equal(cycleStart) {
		return nil, fmt.Errorf("cycleStart %s is not a cycle start of task %q; the cycle containing it starts at %s",
			cycleStart.UTC().Format(time.RFC3339), taskName, start.UTC().Format(time.RFC3339))
	}
	return s.statusAt(ctx, spec, cycleStart.UTC())
}

func (s *Scheduler) statusAt(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) (*TaskStatus, error) {
	expected, err := s.expectedPerSlot(ctx, spec)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	current, err := s.cycleStatus(ctx, spec, cycleStart, expected, now)
	if err != nil {
		return nil, err
	}
	st := &TaskStatus{Task: spec.Name, Current: current}
	prevStart := cycleStart.Add(-spec.Plan.Cycle) // on a wall-clock schedule, the previous start of the grid
	if spec.Schedule.Location != nil {
		prevStart = spec.Schedule.Start(cycleStart.Add(-time.Nanosecond)).UTC()
	}
	prev, err := s.cycleStatus(ctx, spec, prevStart, expected, now)
	if err != nil {
		return nil, err
	}
	if prev.SlotsDone+prev.SlotsFailed > 0 || slices.ContainsFunc(prev.PerSlot, func(p SlotStatus) bool { return p.State != SlotMissing }) {
		st.Previous = prev
	}
	return st, nil
}

func (s *Scheduler) riverTable(*taskspec.Spec) string {
	return sqlbucket.QualifiedTable(s.riverSchema, "river_job")
}

// expectedTTL is how long Status reuses its count of the accounts per slot:
// counting a million accounts takes a few hundred milliseconds, and the
// count moves slowly.
const expectedTTL = time.Minute

type expectedCount struct {
	at     time.Time
	counts []int64
}

// expectedPerSlot counts the accounts each slot selects, through the bucket
// index, at most once per expectedTTL per task.
func (s *Scheduler) expectedPerSlot(ctx context.Context, spec *taskspec.Spec) ([]int64, error) {
	s.expectedMu.Lock()
	cached, ok := s.expected[spec.Name]
	s.expectedMu.Unlock()
	if ok && time.Since(cached.at) < expectedTTL {
		return cached.counts, nil
	}
	counts, err := s.countPerSlot(ctx, spec)
	if err != nil {
		return nil, err
	}
	s.expectedMu.Lock()
	if s.expected == nil {
		s.expected = make(map[string]expectedCount)
	}
	s.expected[spec.Name] = expectedCount{at: time.Now(), counts: counts}
	s.expectedMu.Unlock()
	return counts, nil
}

func (s *Scheduler) countPerSlot(ctx context.Context, spec *taskspec.Spec) ([]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+sqlbucket.Expr(spec.IDColumn)+" / $1 AS bucket_slot, count(*) FROM "+spec.QualifiedTable+
		" WHERE true"+spec.FilterClause+" GROUP BY 1", spec.Plan.BucketsPerSlot)
	if err != nil {
		return nil, fmt.Errorf("error counting accounts per slot: %w", err)
	}
	out := make([]int64, spec.Plan.Slots)
	var slot int
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&slot, &n}, func() error {
		out[spec.Plan.Shift(slot, spec.Shift)] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error counting accounts per slot: %w", err)
	}
	return out, nil
}

func (s *Scheduler) cycleStatus(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time, expected []int64, now time.Time) (*CycleStatus, error) {
	c := &CycleStatus{CycleStart: cycleStart, Slots: spec.Plan.Slots, NextSlot: -1, FailedSlot: -1, PerSlot: make([]SlotStatus, spec.Plan.Slots)}
	for i := range c.PerSlot {
		c.PerSlot[i] = SlotStatus{Slot: i, Start: spec.Plan.SlotStart(cycleStart, i), State: SlotMissing, Expected: expected[i]}
		c.AccountsExpected += expected[i]
		if c.NextSlot < 0 && c.PerSlot[i].Start.After(now) {
			c.NextSlot, c.NextSlotAt = i, c.PerSlot[i].Start
		}
	}
	table := s.riverTable(spec)
	cycleKey := cycleStart.Format(time.RFC3339Nano)

	// The cycle's per-slot jobs (through the kind index: a few hundred).
	rows, err := s.pool.Query(ctx, "SELECT (args->>'slot')::int, state, attempt, metadata, errors, created_at FROM "+table+
		" WHERE kind = $1 AND args->>'task' = $2 AND args->>'plan' = $3 AND args->>'cycle_start' = $4",
		perslot.Kind, spec.Name, spec.PlanID, cycleKey)
	if err != nil {
		return nil, fmt.Errorf("error reading the cycle's per-slot jobs: %w", err)
	}
	var (
		slot     int
		state    string
		attempt  int
		metadata []byte
		errs     []json.RawMessage
		created  time.Time
		// since bounds the cycle's jobs' finalized_at from below: no sync
		// job of the cycle exists before its first per-slot job.
		since = cycleStart
	)
	if _, err := pgx.ForEachRow(rows, []any{&slot, &state, &attempt, &metadata, &errs, &created}, func() error {
		if created.Before(since) {
			since = created
		}
		if slot < 0 || slot >= len(c.PerSlot) {
			return nil
		}
		p := &c.PerSlot[slot]
		p.Attempts = attempt
		var md struct {
			Output  *perslot.Result `json:"output"`
			Cursors map[string]struct {
				Inserted int64 `json:"inserted"`
				Skipped  int64 `json:"skipped"`
				Batches  int   `json:"batches"`
			} `json:"river:resumable_cursor"`
		}
		if err := json.Unmarshal(metadata, &md); err == nil {
			if cur, ok := md.Cursors["fan_out"]; ok {
				p.Enqueued, p.Skipped, p.Batches = cur.Inserted, cur.Skipped, cur.Batches
			}
			if md.Output != nil {
				p.Enqueued, p.Skipped, p.Batches = md.Output.Inserted, md.Output.Skipped, md.Output.Batches
			}
		}
		if len(errs) > 0 {
			var last struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(errs[len(errs)-1], &last) == nil {
				p.Error = last.Error
			}
		}
		switch state {
		case "completed":
			p.State, p.Error = SlotDone, ""
			c.SlotsDone++
		case "discarded", "cancelled":
			p.State = SlotFailed
			c.SlotsFailed++
			if c.FailedSlot < 0 {
				c.FailedSlot, c.FailedError = slot, p.Error
			}
		case "running", "retryable":
			p.State = SlotRunning
		default:
			p.State = SlotScheduled
		}
		c.Enqueued += p.Enqueued
		c.Skipped += p.Skipped
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the cycle's per-slot jobs: %w", err)
	}

	// Unfinished sync jobs (few, by design: through River's fetching index)
	// and finished-but-failed ones (through its finalized_at index).
	if err := s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state IN ('scheduled', 'available', 'pending')),
			count(*) FILTER (WHERE state = 'running'),
			count(*) FILTER (WHERE state = 'retryable')
		FROM `+table+` WHERE state IN ('scheduled', 'available', 'pending', 'running', 'retryable')
		  AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3`,
		syncjob.Kind, spec.Name, cycleKey).Scan(&c.Pending, &c.Running, &c.Retryable); err != nil {
		return nil, fmt.Errorf("error counting the cycle's unfinished sync jobs: %w", err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 'discarded'),
			count(*) FILTER (WHERE state = 'cancelled')
		FROM `+table+` WHERE state IN ('discarded', 'cancelled') AND finalized_at >= $4
		  AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3`,
		syncjob.Kind, spec.Name, cycleKey, since).Scan(&c.Discarded, &c.Cancelled); err != nil {
		return nil, fmt.Errorf("error counting the cycle's failed sync jobs: %w", err)
	}
	c.Completed = max(c.Enqueued-c.Pending-c.Running-c.Retryable-c.Discarded-c.Cancelled, 0)

	var p50, p99 float64
	if err := s.pool.QueryRow(ctx, `SELECT count(*),
			coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY l), 0)::float8,
			coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY l), 0)::float8
		FROM (SELECT extract(epoch FROM attempted_at - scheduled_at) AS l FROM `+table+`
			WHERE state = 'completed' AND finalized_at >= $4
			  AND kind = $1 AND args->>'task' = $2 AND args->>'cycle_start' = $3
			ORDER BY finalized_at DESC LIMIT $5) recent`,
		syncjob.Kind, spec.Name, cycleKey, since, latenessSample).Scan(&c.LatenessSample, &p50, &p99); err != nil {
		return nil, fmt.Errorf("error reading sync lateness: %w", err)
	}
	c.LatenessP50 = time.Duration(p50 * float64(time.Second))
	c.LatenessP99 = time.Duration(p99 * float64(time.Second))

	// Behind: slots past their middle whose fan-out has not finished.
	for _, p := range c.PerSlot {
		if p.State != SlotDone && p.State != SlotFailed && !now.Before(p.Start.Add(spec.Plan.SlotDuration/2)) {
			c.BehindSlots++
		}
	}
	switch {
	case c.FailedSlot >= 0:
		c.Verdict = fmt.Sprintf("failed slot %d: %s", c.FailedSlot, c.FailedError)
	case c.BehindSlots > 0:
		c.Verdict = fmt.Sprintf("behind by %d slots", c.BehindSlots)
	default:
		c.OnTrack, c.Verdict = true, "on track"
	}
	return c, nil
}

// errNoRiverSchema is returned when Status runs before Configure.
var errNoRiverSchema = errors.New("call Configure before Status: Status reads River's tables in river.Config.Schema")
