package pinning

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// Beginner starts transactions: the pool of the database holding a
// weighted task's accounts and pins tables.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Census is a weight census of a weighted task's (task, plan): what the
// pins of a cycle are computed from, in place of two full scans of the
// accounts table. It is taken in taskspec.CensusSteps steps, each one
// bucket range in a short transaction of its own (Step), into one
// riverslot_pin_census row: a step that fails or times out is rolled back
// and the next one starts again from the row's next bucket, so no bucket is
// counted twice or skipped, whoever takes the step (the census job, or a
// bootstrap that found no finished census).
type Census struct {
	// CycleStart is the cycle the census was taken for, StartedAt when
	// its first step ran: its weights were read between StartedAt and its
	// last step.
	CycleStart, StartedAt time.Time
	// NextBucket is the first bucket not yet counted; Finished is set once
	// every bucket is.
	NextBucket int
	Finished   bool
	// Steps is how many steps committed, Accounts how many accounts they
	// counted.
	Steps    int
	Accounts int64
	// Totals is the weight of each slot's accounts, by the slot serving
	// their bucket (the task's phase applied), SumSq the sum of squared
	// weights.
	Totals []float64
	SumSq  float64
	// Candidates are the heaviest accounts counted (at most
	// taskspec.PinCandidatesMax), heaviest first, ties by id. While the
	// census is taken they are rows of riverslot_pin_census_candidates
	// (Step leaves this nil); its last step folds them into the census
	// row, which a bootstrap reads once.
	Candidates []Candidate

	counted bool // the step that returned it counted a range
}

// Candidate is one of a census's heaviest accounts.
type Candidate struct {
	ID     uuid.UUID
	Bucket int
	Weight float64
}

// scanCensus scans a census row: CensusLock's columns, then the
// candidate arrays when candidates, then extra.
func scanCensus(row pgx.Row, c *Census, candidates bool, extra ...any) error {
	var (
		ids     []uuid.UUID
		buckets []int32
		weights []float64
	)
	dest := []any{&c.NextBucket, &c.Finished, &c.StartedAt, &c.Steps, &c.Accounts, &c.Totals, &c.SumSq}
	if candidates {
		dest = append(dest, &ids, &buckets, &weights)
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return err
	}
	if !candidates {
		return nil
	}
	if len(ids) != len(buckets) || len(ids) != len(weights) {
		return fmt.Errorf("the census row's candidate arrays differ in length (%d ids, %d buckets, %d weights)", len(ids), len(buckets), len(weights))
	}
	c.Candidates = make([]Candidate, len(ids))
	for i := range ids {
		c.Candidates[i] = Candidate{ID: ids[i], Bucket: int(buckets[i]), Weight: weights[i]}
	}
	return nil
}

// readCensus reads the census of spec's (task, plan) for cycleStart,
// candidates included, through q (pgx.ErrNoRows: none).
func readCensus(ctx context.Context, q Querier, spec *taskspec.Spec, cycleStart time.Time) (Census, error) {
	c := Census{CycleStart: cycleStart.UTC()}
	rows, err := q.Query(ctx, spec.Pins.CensusRead, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return Census{}, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Census{}, err
		}
		return Census{}, pgx.ErrNoRows
	}
	if err := scanCensus(rows, &c, true); err != nil {
		return Census{}, err
	}
	rows.Close()
	return c, rows.Err()
}

// Step takes one step of the census of spec's (task, plan) for the cycle
// starting at cycleStart, in a transaction of its own on db (the database
// of the accounts and pins tables): it locks the census row (creating it
// at the first step), counts the next bucket range (taskspec.CensusSteps
// of the task's buckets: one of 256, 256 of 65,536) into its totals, adds
// the range's heaviest accounts to its candidates (trimmed to the k
// heaviest whenever they pass 2k) and commits. Each statement runs under the statement_timeout left before
// deadline (none when zero): a step past it returns an error wrapping
// ErrTimeout, and leaves the census as it was. It returns the census as
// the step left it; a finished census is returned unchanged.
func Step(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time) (Census, error) {
	c, _, err := step(ctx, db, spec, cycleStart, deadline, taskspec.PinCandidatesMax, 0)
	return c, err
}

// step is Step keeping the k heaviest accounts and counting width buckets
// (0: Buckets/CensusSteps); counted is false when the census was finished
// already.
func step(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time, k, width int) (c Census, counted bool, err error) {
	c, err = stepTx(ctx, db, spec, cycleStart, deadline, k, width)
	return c, err == nil && c.counted, err
}

func stepTx(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time, k, width int) (Census, error) {
	if !spec.Weighted() {
		return Census{}, fmt.Errorf("task %q has no Weight: it takes no weight census", spec.Name)
	}
	q := spec.Pins
	b := budget{deadline}
	cycleStart = cycleStart.UTC()
	// A connection waited for from an exhausted pool counts against the
	// deadline too (a bootstrap stepping inline holds one already).
	beginCtx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		beginCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	tx, err := db.Begin(beginCtx)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return Census{}, fmt.Errorf("%w: no connection for a census step before the deadline", ErrTimeout)
		}
		return Census{}, b.check(fmt.Errorf("error starting a census step: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	c := Census{CycleStart: cycleStart}
	var (
		floor float64
		kept  int
	)
	lock := func() error {
		if err := b.arm(ctx, tx); err != nil {
			return err
		}
		if err := scanCensus(tx.QueryRow(ctx, q.CensusLock, spec.Name, spec.PlanID, cycleStart), &c, false, &floor, &kept); err != nil {
			return b.check(fmt.Errorf("error reading the weight census (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCensusTable, err))
		}
		return nil
	}
	err = lock()
	if errors.Is(err, pgx.ErrNoRows) {
		// The first step: the row, then its lock (another first step may
		// have inserted it meanwhile).
		if _, err := tx.Exec(ctx, q.CensusStart, spec.Name, spec.PlanID, cycleStart, spec.Plan.Slots); err != nil {
			return Census{}, b.check(fmt.Errorf("error starting the weight census: %w", err))
		}
		err = lock()
	}
	if err != nil {
		return Census{}, err
	}
	buckets := cmp.Or(spec.Plan.Buckets, slotplan.Buckets)
	if c.Finished || c.NextBucket >= buckets {
		return c, nil
	}
	if len(c.Totals) != spec.Plan.Slots {
		return Census{}, fmt.Errorf("the weight census of task %q, plan %s, cycle %s has %d slot totals, the plan %d", spec.Name, spec.PlanID,
			cycleStart.Format(time.RFC3339), len(c.Totals), spec.Plan.Slots)
	}
	lo := c.NextBucket
	hi := min(lo+max(width, baseWidth(spec)), buckets) - 1
	c.NextBucket, c.Finished = hi+1, hi+1 >= buckets

	// Totals by home slot, as compute() adds the per-bucket sums.
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	rows, err := tx.Query(ctx, q.CensusSums, lo, hi)
	if err != nil {
		return Census{}, b.check(fmt.Errorf("error summing the weights of buckets %d-%d: %w", lo, hi, err))
	}
	var (
		bucket  int
		sum, sq float64
		n       int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&bucket, &sum, &sq, &n}, func() error {
		c.Totals[homeSlot(spec, bucket)] += sum
		c.SumSq += sq
		c.Accounts += n
		return nil
	}); err != nil {
		return Census{}, b.check(fmt.Errorf("error summing the weights of buckets %d-%d: %w", lo, hi, err))
	}

	// The range's heaviest accounts at or above the floor join the
	// candidates; past 2k of them, those after the kth heaviest go.
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	tag, err := tx.Exec(ctx, q.CensusAdd, spec.Name, spec.PlanID, cycleStart, lo, hi, floor, k)
	if err != nil {
		return Census{}, b.check(fmt.Errorf("error adding the heaviest accounts of buckets %d-%d to the weight census: %w", lo, hi, err))
	}
	kept += int(tag.RowsAffected())
	if kept > 2*k || (c.Finished && kept > k) {
		if err := b.arm(ctx, tx); err != nil {
			return Census{}, err
		}
		var kthID uuid.UUID
		if err := tx.QueryRow(ctx, q.CensusKth, spec.Name, spec.PlanID, cycleStart, k).Scan(&floor, &kthID); err != nil {
			return Census{}, b.check(fmt.Errorf("error finding the weight census's %dth heaviest account: %w", k, err))
		}
		if err := b.arm(ctx, tx); err != nil {
			return Census{}, err
		}
		if _, err := tx.Exec(ctx, q.CensusTrim, spec.Name, spec.PlanID, cycleStart, floor, kthID); err != nil {
			return Census{}, b.check(fmt.Errorf("error trimming the weight census's candidates: %w", err))
		}
		kept = k
	}
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	if _, err := tx.Exec(ctx, q.CensusSave, spec.Name, spec.PlanID, cycleStart, c.NextBucket, c.Accounts, c.Totals, c.SumSq, floor, kept, c.Finished); err != nil {
		return Census{}, b.check(fmt.Errorf("error saving the weight census: %w", err))
	}
	if c.Finished {
		if err := b.arm(ctx, tx); err != nil {
			return Census{}, err
		}
		if _, err := tx.Exec(ctx, q.CensusFold, spec.Name, spec.PlanID, cycleStart, k); err != nil {
			return Census{}, b.check(fmt.Errorf("error storing the weight census's heaviest accounts: %w", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Census{}, b.check(fmt.Errorf("error committing a census step: %w", err))
	}
	c.Steps++
	c.counted = true
	return c, nil
}

// Step widths: a run doubles its steps' width (in buckets) while a step
// takes less than stepFast, and halves it (down to one range of
// taskspec.CensusSteps) past stepSlow, so a small fleet takes a few steps
// and a large one steps of about fleet/256 accounts.
const (
	stepFast = 100 * time.Millisecond
	stepSlow = 400 * time.Millisecond
)

// baseWidth is the buckets of one step of taskspec.CensusSteps.
func baseWidth(spec *taskspec.Spec) int {
	return max(cmp.Or(spec.Plan.Buckets, slotplan.Buckets)/taskspec.CensusSteps, 1)
}

// Run takes steps of the census of spec's (task, plan) for cycleStart until
// it is finished or until is reached (none when zero; one step at least),
// each statement under the statement_timeout left before deadline (none
// when zero); a step counts Buckets/CensusSteps buckets, more while steps
// are fast (see stepFast). It returns the census as the last step left it,
// finished or not, and how many steps it took; a step cut short by
// deadline is not an error.
func Run(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart, until, deadline time.Time) (Census, int, error) {
	return run(ctx, db, spec, cycleStart, until, deadline, taskspec.PinCandidatesMax, true)
}

// run is Run keeping the k heaviest accounts, its steps widening when grow.
func run(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart, until, deadline time.Time, k int, grow bool) (Census, int, error) {
	var (
		c     Census
		steps int
	)
	base := baseWidth(spec)
	width := base
	for first := true; ; first = false {
		if !first && !until.IsZero() && !time.Now().Before(until) {
			return c, steps, nil
		}
		begun := time.Now()
		next, counted, err := step(ctx, db, spec, cycleStart, deadline, k, width)
		if errors.Is(err, ErrTimeout) {
			return c, steps, nil
		}
		if err != nil {
			return c, steps, err
		}
		if counted {
			steps++
		}
		if c = next; c.Finished {
			return c, steps, nil
		}
		if took := time.Since(begun); grow && took < stepFast {
			width = min(width*2, cmp.Or(spec.Plan.Buckets, slotplan.Buckets))
		} else if took > stepSlow {
			width = max(width/2, base)
		}
	}
}

// latestCensus returns the latest finished census of spec's (task, plan)
// started at or after since, read in tx; nil when there is none.
func latestCensus(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, since time.Time) (*Census, error) {
	var c Census
	err := scanCensus(tx.QueryRow(ctx, spec.Pins.CensusLatest, spec.Name, spec.PlanID, since), &c, true, &c.CycleStart)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("error reading the latest weight census (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCensusTable, err)
	}
	if len(c.Totals) != spec.Plan.Slots {
		return nil, fmt.Errorf("the weight census of task %q for cycle %s has %d slot totals, the plan %d", spec.Name, c.CycleStart.Format(time.RFC3339), len(c.Totals), spec.Plan.Slots)
	}
	return &c, nil
}

// homeSlot is the slot serving bucket's accounts when they are not pinned.
func homeSlot(spec *taskspec.Spec, bucket int) int {
	return spec.Plan.Shift(spec.Plan.SlotOfBucket(bucket), spec.Shift)
}
