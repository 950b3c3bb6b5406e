package pinning

import (
	"bytes"
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
	// taskspec.PinCandidatesMax), heaviest first, ties by id.
	Candidates []Candidate

	counted bool // the step that returned it counted a range
}

// Candidate is one of a census's heaviest accounts.
type Candidate struct {
	ID     uuid.UUID
	Bucket int
	Weight float64
}

// heavierFirst orders candidates as the heaviest-accounts query does:
// weight descending, then id ascending (PostgreSQL's uuid order is byte
// order).
func heavierFirst(a, b Candidate) int {
	switch {
	case a.Weight > b.Weight:
		return -1
	case a.Weight < b.Weight:
		return 1
	}
	return bytes.Compare(a.ID[:], b.ID[:])
}

// merge returns the k first of two lists sorted by heavierFirst, merged.
func merge(a, b []Candidate, k int) []Candidate {
	out := make([]Candidate, 0, min(k, len(a)+len(b)))
	for len(out) < k && (len(a) > 0 || len(b) > 0) {
		if len(b) == 0 || (len(a) > 0 && heavierFirst(a[0], b[0]) <= 0) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// censusRow scans a census row (taskspec.PinsSQL.CensusLock's columns).
func scanCensus(row pgx.Row, c *Census, extra ...any) error {
	var (
		ids     []uuid.UUID
		buckets []int32
		weights []float64
	)
	dest := append([]any{&c.NextBucket, &c.Finished, &c.StartedAt, &c.Steps, &c.Accounts, &c.Totals, &c.SumSq, &ids, &buckets, &weights}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
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

// Step takes one step of the census of spec's (task, plan) for the cycle
// starting at cycleStart, in a transaction of its own on db (the database
// of the accounts and pins tables): it locks the census row (creating it
// at the first step), counts the next bucket range (taskspec.CensusSteps
// of the task's buckets: one of 256, 256 of 65,536), merges it and
// commits. Each statement runs under the statement_timeout left before
// deadline (none when zero): a step past it returns an error wrapping
// ErrTimeout, and leaves the census as it was. It returns the census as
// the step left it; a finished census is returned unchanged.
func Step(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time) (Census, error) {
	c, _, err := step(ctx, db, spec, cycleStart, deadline, taskspec.PinCandidatesMax)
	return c, err
}

// step is Step keeping the k heaviest accounts; counted is false when the
// census was finished already.
func step(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time, k int) (c Census, counted bool, err error) {
	c, err = stepTx(ctx, db, spec, cycleStart, deadline, k)
	return c, err == nil && c.counted, err
}

func stepTx(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart time.Time, deadline time.Time, k int) (Census, error) {
	if !spec.Weighted() {
		return Census{}, fmt.Errorf("task %q has no Weight: it takes no weight census", spec.Name)
	}
	q := spec.Pins
	b := budget{deadline}
	cycleStart = cycleStart.UTC()
	tx, err := db.Begin(ctx)
	if err != nil {
		return Census{}, b.check(fmt.Errorf("error starting a census step: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	if _, err := tx.Exec(ctx, q.CensusStart, spec.Name, spec.PlanID, cycleStart, spec.Plan.Slots); err != nil {
		return Census{}, b.check(fmt.Errorf("error starting the weight census (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCensusTable, err))
	}
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	c := Census{CycleStart: cycleStart}
	if err := scanCensus(tx.QueryRow(ctx, q.CensusLock, spec.Name, spec.PlanID, cycleStart), &c); err != nil {
		return Census{}, b.check(fmt.Errorf("error reading the weight census: %w", err))
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
	hi := min(lo+max(buckets/taskspec.CensusSteps, 1), buckets) - 1

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

	// The range's heaviest accounts: only those that can still make the
	// k heaviest (at least the lightest kept once k are).
	floor := 0.0
	if len(c.Candidates) >= k && k > 0 {
		floor = c.Candidates[k-1].Weight
	}
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	rows, err = tx.Query(ctx, q.CensusTop, lo, hi, k, floor)
	if err != nil {
		return Census{}, b.check(fmt.Errorf("error selecting the heaviest accounts of buckets %d-%d: %w", lo, hi, err))
	}
	var (
		top []Candidate
		id  uuid.UUID
		w   float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &bucket, &w}, func() error {
		top = append(top, Candidate{ID: id, Bucket: bucket, Weight: w})
		return nil
	}); err != nil {
		return Census{}, b.check(fmt.Errorf("error selecting the heaviest accounts of buckets %d-%d: %w", lo, hi, err))
	}
	c.Candidates = merge(c.Candidates, top, k)

	ids := make([]uuid.UUID, len(c.Candidates))
	bs := make([]int32, len(c.Candidates))
	ws := make([]float64, len(c.Candidates))
	for i, cand := range c.Candidates {
		ids[i], bs[i], ws[i] = cand.ID, int32(cand.Bucket), cand.Weight //nolint:gosec // a bucket is below 65,536
	}
	c.NextBucket, c.Finished = hi+1, hi+1 >= buckets
	if err := b.arm(ctx, tx); err != nil {
		return Census{}, err
	}
	if _, err := tx.Exec(ctx, q.CensusSave, spec.Name, spec.PlanID, cycleStart, c.NextBucket, c.Accounts, c.Totals, c.SumSq, ids, bs, ws, c.Finished); err != nil {
		return Census{}, b.check(fmt.Errorf("error saving the weight census: %w", err))
	}
	if err := tx.Commit(ctx); err != nil {
		return Census{}, b.check(fmt.Errorf("error committing a census step: %w", err))
	}
	c.Steps++
	c.counted = true
	return c, nil
}

// Run takes steps of the census of spec's (task, plan) for cycleStart until
// it is finished or until is reached (none when zero; one step at least), each statement
// under the statement_timeout left before deadline (none when zero). It
// returns the census as the last step left it, finished or not, and how
// many steps it took; a step cut short by deadline is not an error.
func Run(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart, until, deadline time.Time) (Census, int, error) {
	return run(ctx, db, spec, cycleStart, until, deadline, taskspec.PinCandidatesMax)
}

func run(ctx context.Context, db Beginner, spec *taskspec.Spec, cycleStart, until, deadline time.Time, k int) (Census, int, error) {
	var (
		c     Census
		steps int
	)
	for first := true; ; first = false {
		if !first && !until.IsZero() && !time.Now().Before(until) {
			return c, steps, nil
		}
		next, counted, err := step(ctx, db, spec, cycleStart, deadline, k)
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
	}
}

// latestCensus returns the latest finished census of spec's (task, plan)
// started at or after since, read in tx; nil when there is none.
func latestCensus(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, since time.Time) (*Census, error) {
	var c Census
	err := scanCensus(tx.QueryRow(ctx, spec.Pins.CensusLatest, spec.Name, spec.PlanID, since), &c, &c.CycleStart)
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
