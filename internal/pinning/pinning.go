// Package pinning computes and stores the pins of a weighted task's cycle:
// which jumbo accounts are served by another slot than their hash slot
// (slotplan.PlacePins), in the pins tables taskspec.PinsDDL creates. The
// bootstrap tier calls Place in its transaction; the benchmarks call it too.
package pinning

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// pinsKept is how many cycles of pins are kept at least, this one
// included, and pinsKeptMin the least time they are kept (for status and
// plan --account); older ones are pruned once no per-slot job can still
// read them (see Prune).
const (
	pinsKept    = 3
	pinsKeptMin = time.Hour
)

// Fallbacks a cycle records when its pins took longer than the task's
// PinsTimeout.
const (
	// FallbackPrevious: the cycle follows the latest pins computed before
	// it (Outcome.Follows).
	FallbackPrevious = "previous"
	// FallbackHash: no pins were computed before it; every account is in
	// its hash slot.
	FallbackHash = "hash"
)

// ErrTimeout is returned (wrapped) by a pin computation that did not finish
// within its budget.
var ErrTimeout = errors.New("the pin computation did not finish within PinsTimeout")

// Outcome is what Place did, or found decided.
type Outcome struct {
	// Reused is true when the cycle's pins were already decided (by
	// another node, or an earlier attempt that committed).
	Reused bool
	// Pinned is how many accounts were pinned, Threshold the weight above
	// which an account is a jumbo (+Inf: none).
	Pinned    int
	Threshold float64
	// Fallback is "" when the cycle has its own pins, else FallbackPrevious
	// (it follows the pins of cycle starting at Follows) or
	// FallbackHash.
	Fallback string
	Follows  time.Time
	// Census is the weight census the pins were computed from, or the
	// census left unfinished when the cycle fell back for want of one (nil
	// when Reused, or when the computation after a finished census ran out
	// of time).
	Census *Census
	// InlineSteps is how many census steps this bootstrap took itself
	// because it found no finished census.
	InlineSteps int
	// Direct is true when the fleet was at most spec.DirectMax accounts and
	// the pins were computed by scanning it in the bootstrap's transaction,
	// without a census.
	Direct bool
}

// CensusPending reports whether the cycle fell back because its weight
// census was not finished within PinsTimeout: the census job of the cycle
// carries it on, so that a later cycle gets pins.
func (o Outcome) CensusPending() bool {
	return o.Fallback != "" && o.Census != nil && !o.Census.Finished
}

// Ref returns the pins a cycle with this outcome follows: ref itself, ref
// naming the cycle it fell back to, or nil for hash placement.
func (o Outcome) Ref(ref *taskspec.PinsRef) *taskspec.PinsRef {
	switch o.Fallback {
	case FallbackHash:
		return nil
	case FallbackPrevious:
		r := *ref
		r.CycleStart = o.Follows.UTC()
		return &r
	}
	return ref
}

// Place decides the pins of a weighted task's cycle in tx, at most once
// per (task, plan, cycle): the riverslot_pin_cycles row it inserts first is
// the guard. A second bootstrap of the cycle (another node, a retry after a
// crash, the bootstrap of a task OppositeOf this one) waits on that row's
// insert and, once the first commits, finds it and reuses its decision; if
// the first rolls back, nothing of it remains and the second decides.
//
// A fleet of at most spec.DirectMax accounts without a recent finished
// census (chooseDirect: counted up to DirectMax + 1 rows within a quarter
// of PinsTimeout) has its pins computed directly, from two scans of the
// accounts table in tx: at 200,000 accounts that is a fraction of a
// second, and it needs no census job. A larger fleet's pins are computed from a weight census
// (see Census) instead of scanning the whole table in tx: the latest finished census of
// the task and plan started within the last two cycles (normally the one
// the census job took during the previous cycle, so at large fleets a
// cycle's pins come from weights read up to a cycle earlier). Without one,
// Place takes the cycle's own census steps itself, each in a transaction
// of its own on db (the accounts' database, tx's), until PinsTimeout.
//
// The computation runs in a savepoint, each of its statements under the
// statement_timeout left of spec.PinsTimeout (no limit when zero). If the
// census is not finished in time, or the computation does not finish, it
// is rolled back and the cycle falls back: to the latest cycle whose pins
// were computed before it, else to hash placement; the decision is
// recorded on the guard row, so every reader of the cycle follows the same
// pins. An unfinished census keeps its progress for the census job to carry
// on (Outcome.CensusPending).
//
// Hash placement is kept for every account at most the threshold (see
// slotplan.PlacePins); the heaviest PinCandidatesMax accounts and the
// previous cycle's pins are the candidates, and previous pins are kept
// where the load allows (hysteresis).
func Place(ctx context.Context, tx pgx.Tx, db Beginner, spec *taskspec.Spec, cycleStart time.Time) (Outcome, error) {
	return place(ctx, tx, db, spec, cycleStart, false)
}

// place is Place; direct computes the pins from two scans of the whole
// accounts table in tx instead of a census (as before censuses), for the
// tests that compare the two.
func place(ctx context.Context, tx pgx.Tx, db Beginner, spec *taskspec.Spec, cycleStart time.Time, direct bool) (Outcome, error) {
	q := spec.Pins
	var claimed bool
	err := tx.QueryRow(ctx, q.Claim, spec.Name, spec.PlanID, cycleStart).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		o := Outcome{Reused: true}
		var (
			pinned  *int
			follows *time.Time
		)
		if err := tx.QueryRow(ctx, q.Decision, spec.Name, spec.PlanID, cycleStart).Scan(&pinned, &o.Fallback, &follows); err != nil {
			return Outcome{}, fmt.Errorf("error reading the pins decided for the cycle: %w", err)
		}
		if pinned != nil {
			o.Pinned = *pinned
		}
		if follows != nil {
			o.Follows = *follows
		}
		// Whether the fleet needs a census job.
		if o.Direct, err = chooseDirect(ctx, tx, spec, cycleStart); err != nil {
			return Outcome{}, err
		}
		return o, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("error claiming the pins of the cycle (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCyclesTable, err)
	}

	var deadline time.Time
	if spec.PinsTimeout > 0 {
		deadline = time.Now().Add(spec.PinsTimeout)
	}
	if !direct {
		if direct, err = chooseDirect(ctx, tx, spec, cycleStart); err != nil {
			return Outcome{}, err
		}
	}
	var saved string
	if err := tx.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&saved); err != nil {
		return Outcome{}, fmt.Errorf("error reading statement_timeout: %w", err)
	}
	b := budget{deadline}
	// The census is read, and the pins computed, in a savepoint: rolling it
	// back undoes the statement_timeout its statements set.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("error starting the pins savepoint: %w", err)
	}
	var census *Census
	inline := 0
	if !direct {
		if census, inline, err = findCensus(ctx, sp, db, spec, cycleStart, b); err != nil {
			return Outcome{}, err
		}
		if !census.Finished {
			if err := sp.Rollback(ctx); err != nil {
				return Outcome{}, fmt.Errorf("error rolling back the pins savepoint: %w", err)
			}
			o, err := fallBack(ctx, tx, spec, cycleStart)
			o.Census, o.InlineSteps = census, inline
			return o, err
		}
	}
	o, err := compute(ctx, sp, spec, cycleStart, b, census)
	if err = b.check(err); errors.Is(err, ErrTimeout) {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return Outcome{}, fmt.Errorf("error rolling back the pin computation: %w", rerr)
		}
		if o, err = fallBack(ctx, tx, spec, cycleStart); err != nil {
			return Outcome{}, err
		}
		// A direct computation that ran out of time is not Direct: the
		// bootstrap enqueues the next cycle's census job, and the next
		// cycle, finding that census finished, computes from it.
		o.InlineSteps = inline
		return o, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	if err := sp.Commit(ctx); err != nil {
		return Outcome{}, fmt.Errorf("error releasing the pins savepoint: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", saved); err != nil {
		return Outcome{}, fmt.Errorf("error restoring statement_timeout: %w", err)
	}
	o.Census, o.InlineSteps, o.Direct = census, inline, direct
	return o, nil
}

// chooseDirect reports whether the cycle's pins are computed directly:
// the fleet has at most spec.DirectMax accounts (counted up to
// DirectMax + 1 rows) and no weight census of the task and plan finished
// within the two cycles before (one is taken for a small fleet only after
// its direct computation ran out of time, or while it was larger: then the
// census path goes on). Both queries run in a savepoint of tx within a
// quarter of PinsTimeout: a count that does not finish in time (a
// selective Filter over a large table) means a large fleet, and tx stays
// usable either way.
func chooseDirect(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time) (bool, error) {
	if spec.DirectMax <= 0 {
		return false, nil
	}
	var deadline time.Time
	if spec.PinsTimeout > 0 {
		deadline = time.Now().Add(spec.PinsTimeout / 4)
	}
	b := budget{deadline}
	var saved string
	if err := tx.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&saved); err != nil {
		return false, fmt.Errorf("error reading statement_timeout: %w", err)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("error starting the fleet count savepoint: %w", err)
	}
	small, err := smallWithoutCensus(ctx, sp, spec, cycleStart, b)
	if err = b.check(err); errors.Is(err, ErrTimeout) {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return false, fmt.Errorf("error rolling back the fleet count savepoint: %w", rerr)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("error releasing the fleet count savepoint: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", saved); err != nil {
		return false, fmt.Errorf("error restoring statement_timeout: %w", err)
	}
	return small, nil
}

// smallWithoutCensus is chooseDirect's two queries, each armed with b.
func smallWithoutCensus(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time, b budget) (bool, error) {
	if err := b.arm(ctx, tx); err != nil {
		return false, err
	}
	var n int64
	if err := tx.QueryRow(ctx, spec.Pins.CountUpTo, spec.DirectMax+1).Scan(&n); err != nil {
		return false, fmt.Errorf("error counting the accounts (up to %d): %w", spec.DirectMax+1, err)
	}
	if n > spec.DirectMax {
		return false, nil
	}
	if err := b.arm(ctx, tx); err != nil {
		return false, err
	}
	var finished bool
	if err := tx.QueryRow(ctx, spec.Pins.CensusFinished, spec.Name, spec.PlanID, censusSince(spec, cycleStart)).Scan(&finished); err != nil {
		return false, fmt.Errorf("error looking for a finished weight census (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCensusTable, err)
	}
	return !finished, nil
}

// findCensus returns the census the pins of the cycle are computed from:
// the latest finished census of spec's (task, plan) started within the two
// cycles before the cycle (or before now, whichever is earlier), else the
// cycle's own census, stepped on db within b; that one may be unfinished.
// It returns how many steps it took.
func findCensus(ctx context.Context, tx pgx.Tx, db Beginner, spec *taskspec.Spec, cycleStart time.Time, b budget) (*Census, int, error) {
	if err := b.arm(ctx, tx); err != nil {
		return &Census{CycleStart: cycleStart.UTC()}, 0, nil
	}
	latest, err := latestCensus(ctx, tx, spec, censusSince(spec, cycleStart))
	if err = b.check(err); errors.Is(err, ErrTimeout) {
		return &Census{CycleStart: cycleStart.UTC()}, 0, nil
	}
	if err != nil || latest != nil {
		return latest, 0, err
	}
	if db == nil {
		return nil, 0, errors.New("no weight census is finished and no pool to take one was given")
	}
	c, steps, err := Run(ctx, db, spec, cycleStart, b.deadline, b.deadline)
	if err != nil {
		return nil, 0, fmt.Errorf("error taking the weight census: %w", err)
	}
	c.CycleStart = cycleStart.UTC()
	if !c.Finished {
		return &c, steps, nil
	}
	// Its candidates, kept in the row.
	if err := b.arm(ctx, tx); err != nil {
		return &Census{CycleStart: c.CycleStart}, steps, nil
	}
	full, err := readCensus(ctx, tx, spec, cycleStart)
	if err = b.check(err); errors.Is(err, ErrTimeout) {
		return &Census{CycleStart: c.CycleStart}, steps, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("error reading the weight census: %w", err)
	}
	return &full, steps, nil
}

// censusSince is the earliest start of a census the cycle's pins may come
// from: two cycles before the cycle, or before now for a cycle enqueued
// ahead.
func censusSince(spec *taskspec.Spec, cycleStart time.Time) time.Time {
	from := cycleStart
	if now := time.Now(); now.Before(from) {
		from = now
	}
	return from.Add(-2 * spec.Plan.Cycle)
}

// fallBack records, on the cycle's claimed row, that it follows the latest
// computed pins before it, or hash placement when there are none.
func fallBack(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time) (Outcome, error) {
	q := spec.Pins
	var latest *time.Time
	if err := tx.QueryRow(ctx, q.Latest, spec.Name, spec.PlanID, cycleStart).Scan(&latest); err != nil {
		return Outcome{}, fmt.Errorf("error finding the latest pins to fall back to: %w", err)
	}
	o := Outcome{Fallback: FallbackHash}
	if latest != nil {
		o.Fallback, o.Follows = FallbackPrevious, *latest
	}
	if _, err := tx.Exec(ctx, q.Fallback, spec.Name, spec.PlanID, cycleStart, o.Fallback, latest); err != nil {
		return Outcome{}, fmt.Errorf("error recording the cycle's fallback (run Scheduler.CreateIndexes to add its columns to %s): %w", taskspec.PinCyclesTable, err)
	}
	return o, nil
}

// budget sets each statement's statement_timeout to what is left before
// its deadline (none when zero).
type budget struct{ deadline time.Time }

// arm sets statement_timeout for the next statement of tx, or returns
// ErrTimeout when the budget is spent.
func (b budget) arm(ctx context.Context, tx pgx.Tx) error {
	if b.deadline.IsZero() {
		return nil
	}
	left := time.Until(b.deadline).Milliseconds()
	if left < 1 {
		return ErrTimeout
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(left, 10)); err != nil {
		return b.check(fmt.Errorf("error setting statement_timeout: %w", err))
	}
	return nil
}

// check wraps a statement timeout (SQLSTATE 57014) of err in ErrTimeout.
func (b budget) check(err error) error {
	var pgErr *pgconn.PgError
	if !b.deadline.IsZero() && errors.As(err, &pgErr) && pgErr.Code == "57014" {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// compute computes and stores the pins of the claimed cycle in tx, each
// statement armed with b, from census (nil: two scans of the whole
// accounts table in tx).
func compute(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time, b budget, census *Census) (Outcome, error) {
	q := spec.Pins
	var (
		slotTotals []float64
		sumSq      float64
		heaviest   []Candidate
		bucket     int
	)
	if census != nil {
		slotTotals, sumSq = slices.Clone(census.Totals), census.SumSq
		var err error
		if heaviest, err = currentCandidates(ctx, tx, spec, census.Candidates, b); err != nil {
			return Outcome{}, err
		}
	} else {
		var err error
		if slotTotals, sumSq, heaviest, err = scanWeights(ctx, tx, spec, b); err != nil {
			return Outcome{}, err
		}
	}

	byID := map[uuid.UUID]int{}
	buckets := map[[16]byte]int{}
	var candidates []slotplan.Jumbo
	var (
		id     uuid.UUID
		weight float64
		slot   int
	)
	if err := b.arm(ctx, tx); err != nil {
		return Outcome{}, err
	}
	rows, err := tx.Query(ctx, q.Previous, spec.Name, spec.PlanID, cycleStart)
	if err != nil {
		return Outcome{}, fmt.Errorf("error reading the previous pins: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &bucket, &weight, &slot}, func() error {
		byID[id] = len(candidates)
		buckets[id] = bucket
		prev := slot
		if prev < 0 || prev >= spec.Plan.Slots {
			prev = -1
		}
		candidates = append(candidates, slotplan.Jumbo{ID: id, Weight: weight, Home: homeSlot(spec, bucket), Prev: prev})
		return nil
	}); err != nil {
		return Outcome{}, fmt.Errorf("error reading the previous pins: %w", err)
	}
	for _, c := range heaviest {
		if _, dup := byID[c.ID]; !dup {
			buckets[c.ID] = c.Bucket
			candidates = append(candidates, slotplan.Jumbo{ID: c.ID, Weight: c.Weight, Home: homeSlot(spec, c.Bucket), Prev: -1})
		}
	}

	// Giants get a slot of their own; every other account hashed to it is
	// an evacuee, placed elsewhere with the jumbos.
	reserved := slotplan.Giants(slotTotals, candidates, spec.WeightEpsilon)
	var evacuees []slotplan.Jumbo
	for _, r := range reserved {
		lo, hi := spec.Plan.BucketRange(spec.Plan.Shift(r.Slot, -spec.Shift))
		if err := b.arm(ctx, tx); err != nil {
			return Outcome{}, err
		}
		rows, err := tx.Query(ctx, q.RangeAccounts, lo, hi)
		if err != nil {
			return Outcome{}, fmt.Errorf("error listing the accounts of slot %d, kept for a giant account: %w", r.Slot, err)
		}
		if _, err := pgx.ForEachRow(rows, []any{&id, &bucket, &weight}, func() error {
			prev := -1
			if i, ok := byID[id]; ok {
				prev = candidates[i].Prev
			}
			buckets[id] = bucket
			evacuees = append(evacuees, slotplan.Jumbo{ID: id, Weight: weight, Home: homeSlot(spec, bucket), Prev: prev})
			return nil
		}); err != nil {
			return Outcome{}, fmt.Errorf("error listing the accounts of slot %d, kept for a giant account: %w", r.Slot, err)
		}
	}
	threshold, pins := slotplan.PlacePinsReserved(slotTotals, sumSq, candidates, evacuees, reserved, spec.WeightEpsilon)
	if err := b.arm(ctx, tx); err != nil {
		return Outcome{}, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{spec.Schema, taskspec.PinsTable}[skipEmpty(spec.Schema):],
		[]string{"task", "plan", "cycle_start", "account_id", "bucket", "slot", "weight"},
		pgx.CopyFromSlice(len(pins), func(i int) ([]any, error) {
			p := pins[i]
			return []any{spec.Name, spec.PlanID, cycleStart, uuid.UUID(p.ID), buckets[p.ID], p.Slot, p.Weight}, nil
		})); err != nil {
		return Outcome{}, fmt.Errorf("error writing %d pins: %w", len(pins), err)
	}
	// +Inf (nothing to pin) is stored as NULL.
	var stored *float64
	if threshold <= 1e300 {
		stored = &threshold
	}
	if err := b.arm(ctx, tx); err != nil {
		return Outcome{}, err
	}
	if _, err := tx.Exec(ctx, q.Record, spec.Name, spec.PlanID, cycleStart, stored, len(pins)); err != nil {
		return Outcome{}, fmt.Errorf("error recording the pinned cycle: %w", err)
	}
	return Outcome{Pinned: len(pins), Threshold: threshold}, nil
}

// currentCandidates returns the census's candidates that still exist and
// match the filter, with their current weights (as the previous pins are
// read): an account deleted since the census is not pinned, and a
// candidate's weight is today's. The per-slot totals stay the census's.
func currentCandidates(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, candidates []Candidate, b budget) ([]Candidate, error) {
	ids := make([]uuid.UUID, len(candidates))
	buckets := make([]int32, len(candidates))
	for i, c := range candidates {
		ids[i], buckets[i] = c.ID, int32(c.Bucket) //nolint:gosec // a bucket is below 65,536
	}
	if err := b.arm(ctx, tx); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, spec.Pins.CensusCurrent, ids, buckets)
	if err != nil {
		return nil, fmt.Errorf("error reading the current weights of the census's heaviest accounts: %w", err)
	}
	current := make([]Candidate, 0, len(candidates))
	var c Candidate
	if _, err := pgx.ForEachRow(rows, []any{&c.ID, &c.Bucket, &c.Weight}, func() error {
		current = append(current, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the current weights of the census's heaviest accounts: %w", err)
	}
	return current, nil
}

// scanWeights reads, in tx, the per-slot weight totals (by home slot), the
// sum of squared weights and the PinCandidatesMax heaviest accounts with
// two scans of the whole accounts table: what a census gathers in steps.
func scanWeights(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, b budget) ([]float64, float64, []Candidate, error) {
	q := spec.Pins
	slotTotals := make([]float64, spec.Plan.Slots)
	sumSq := 0.0
	if err := b.arm(ctx, tx); err != nil {
		return nil, 0, nil, err
	}
	rows, err := tx.Query(ctx, q.SlotWeights)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("error summing weights per slot: %w", err)
	}
	var (
		bucket  int
		sum, sq float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&bucket, &sum, &sq}, func() error {
		slotTotals[homeSlot(spec, bucket)] += sum
		sumSq += sq
		return nil
	}); err != nil {
		return nil, 0, nil, fmt.Errorf("error summing weights per slot: %w", err)
	}
	if err := b.arm(ctx, tx); err != nil {
		return nil, 0, nil, err
	}
	rows, err = tx.Query(ctx, q.Candidates, taskspec.PinCandidatesMax)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("error selecting the heaviest accounts: %w", err)
	}
	var (
		heaviest []Candidate
		c        Candidate
	)
	if _, err := pgx.ForEachRow(rows, []any{&c.ID, &c.Bucket, &c.Weight}, func() error {
		heaviest = append(heaviest, c)
		return nil
	}); err != nil {
		return nil, 0, nil, fmt.Errorf("error selecting the heaviest accounts: %w", err)
	}
	return slotTotals, sumSq, heaviest, nil
}

// Querier runs a query: River's pool or a transaction on it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Prune deletes, in tx (on the pins' database), the pin cycles of spec's
// task that started more than max(two cycles, an hour) before both
// cycleStart and now and that no cycle the ledger in riverSchema records,
// read through river, can still read (ledger.PinsInUse): a change of
// Cycle, or EnqueueCycle far ahead, never removes the pins of a cycle that
// is still running.
func Prune(ctx context.Context, tx pgx.Tx, river Querier, spec *taskspec.Spec, riverSchema string, cycleStart time.Time) (int64, error) {
	from := cycleStart
	if now := time.Now(); now.Before(from) {
		from = now
	}
	before := from.Add(-max(time.Duration(pinsKept-1)*spec.Plan.Cycle, pinsKeptMin))
	plans, starts, err := ledger.New(riverSchema).PinsInUse(ctx, river, spec.Name)
	if err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, taskspec.PruneSQL(spec.Schema), spec.Name, before, plans, starts)
	if err != nil {
		return 0, fmt.Errorf("error pruning old pins: %w", err)
	}
	// Censuses started before then are older than any a bootstrap uses
	// (two cycles).
	if spec.Weighted() {
		if _, err := tx.Exec(ctx, spec.Pins.CensusPrune, spec.Name, before); err != nil {
			return 0, fmt.Errorf("error pruning old weight censuses: %w", err)
		}
	}
	return tag.RowsAffected(), nil
}

// skipEmpty is 1 when schema is empty, so the identifier is unqualified.
func skipEmpty(schema string) int {
	if schema == "" {
		return 1
	}
	return 0
}

// Log logs o at info.
func Log(ctx context.Context, logger *slog.Logger, spec *taskspec.Spec, cycleStart time.Time, o Outcome) {
	census := func(attrs []any) []any {
		if c := o.Census; c != nil {
			attrs = append(attrs, slog.Time("census_cycle_start", c.CycleStart), slog.Int("census_next_bucket", c.NextBucket),
				slog.Int("census_steps", c.Steps), slog.Int("census_steps_inline", o.InlineSteps))
			if c.Finished {
				attrs = append(attrs, slog.Time("weights_read_from", c.StartedAt), slog.Int64("census_accounts", c.Accounts))
			}
		}
		return attrs
	}
	switch {
	case o.Fallback != "" && !o.Reused:
		msg := "riverslot: the cycle's pins were not computed within PinsTimeout; the cycle follows the latest pins computed before it"
		if o.Fallback == FallbackHash {
			msg = "riverslot: the cycle's pins were not computed within PinsTimeout and no earlier pins exist; the cycle places every account by hash"
		}
		if o.CensusPending() {
			msg += " (its weight census was not finished: the census job carries it on, so a later cycle gets pins)"
		}
		attrs := []any{slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Duration("pins_timeout", spec.PinsTimeout), slog.String("fallback", o.Fallback)}
		if o.Fallback == FallbackPrevious {
			attrs = append(attrs, slog.Time("follows", o.Follows))
		}
		logger.WarnContext(ctx, msg, census(attrs)...)
		return
	case o.Reused:
		logger.InfoContext(ctx, "riverslot: pins of the cycle already decided; reusing them",
			slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.String("fallback", o.Fallback))
		return
	}
	logger.InfoContext(ctx, "riverslot: jumbo accounts pinned, from the weight census (weights read since weights_read_from: up to a cycle before the cycle at large fleets)",
		census([]any{slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart),
			slog.Int("pinned", o.Pinned), slog.Float64("threshold", o.Threshold)})...)
}
