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
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// (it follows the pins of the cycle starting at Follows) or
	// FallbackHash.
	Fallback string
	Follows  time.Time
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
// The computation runs in a savepoint, each of its statements under the
// statement_timeout left of spec.PinsTimeout (no limit when zero). If it
// does not finish in time it is rolled back and the cycle falls back: to
// the latest cycle whose pins were computed before it, else to hash
// placement; the decision is recorded on the guard row, so every reader of
// the cycle follows the same pins.
//
// Hash placement is kept for every account at most the threshold (see
// slotplan.PlacePins); the heaviest PinCandidatesMax accounts and the
// previous cycle's pins are the candidates, and previous pins are kept
// where the load allows (hysteresis).
func Place(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time) (Outcome, error) {
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
		return o, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("error claiming the pins of the cycle (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCyclesTable, err)
	}

	var deadline time.Time
	if spec.PinsTimeout > 0 {
		deadline = time.Now().Add(spec.PinsTimeout)
	}
	var saved string
	if err := tx.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&saved); err != nil {
		return Outcome{}, fmt.Errorf("error reading statement_timeout: %w", err)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("error starting the pins savepoint: %w", err)
	}
	b := budget{deadline}
	o, err := compute(ctx, sp, spec, cycleStart, b)
	if err = b.check(err); errors.Is(err, ErrTimeout) {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return Outcome{}, fmt.Errorf("error rolling back the pin computation: %w", rerr)
		}
		return fallBack(ctx, tx, spec, cycleStart)
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
	return o, nil
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
// statement armed with b.
func compute(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, cycleStart time.Time, b budget) (Outcome, error) {
	q := spec.Pins
	// Per-slot totals, by the slot that serves each bucket.
	slotTotals := make([]float64, spec.Plan.Slots)
	sumSq := 0.0
	if err := b.arm(ctx, tx); err != nil {
		return Outcome{}, err
	}
	rows, err := tx.Query(ctx, q.SlotWeights)
	if err != nil {
		return Outcome{}, fmt.Errorf("error summing weights per slot: %w", err)
	}
	var (
		bucket   int
		sum, sq  float64
		homeSlot = func(bucket int) int { return spec.Plan.Shift(spec.Plan.SlotOfBucket(bucket), spec.Shift) }
	)
	if _, err := pgx.ForEachRow(rows, []any{&bucket, &sum, &sq}, func() error {
		slotTotals[homeSlot(bucket)] += sum
		sumSq += sq
		return nil
	}); err != nil {
		return Outcome{}, fmt.Errorf("error summing weights per slot: %w", err)
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
	rows, err = tx.Query(ctx, q.Previous, spec.Name, spec.PlanID, cycleStart)
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
		candidates = append(candidates, slotplan.Jumbo{ID: id, Weight: weight, Home: homeSlot(bucket), Prev: prev})
		return nil
	}); err != nil {
		return Outcome{}, fmt.Errorf("error reading the previous pins: %w", err)
	}
	if err := b.arm(ctx, tx); err != nil {
		return Outcome{}, err
	}
	rows, err = tx.Query(ctx, q.Candidates, taskspec.PinCandidatesMax)
	if err != nil {
		return Outcome{}, fmt.Errorf("error selecting the heaviest accounts: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &bucket, &weight}, func() error {
		if _, dup := byID[id]; !dup {
			buckets[id] = bucket
			candidates = append(candidates, slotplan.Jumbo{ID: id, Weight: weight, Home: homeSlot(bucket), Prev: -1})
		}
		return nil
	}); err != nil {
		return Outcome{}, fmt.Errorf("error selecting the heaviest accounts: %w", err)
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
			evacuees = append(evacuees, slotplan.Jumbo{ID: id, Weight: weight, Home: homeSlot(bucket), Prev: prev})
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

// Querier runs a query: River's pool or a transaction on it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Prune deletes, in tx (on the pins' database), the pin cycles of spec's
// task that started more than max(two cycles, an hour) before both
// cycleStart and now and that no per-slot job in riverSchema's river_job,
// read through river, can still read (taskspec.PruneKeptSQL): a change of
// Cycle, or EnqueueCycle far ahead, never removes the pins of a cycle that
// is still running.
func Prune(ctx context.Context, tx pgx.Tx, river Querier, spec *taskspec.Spec, riverSchema string, cycleStart time.Time) (int64, error) {
	from := cycleStart
	if now := time.Now(); now.Before(from) {
		from = now
	}
	before := from.Add(-max(time.Duration(pinsKept-1)*spec.Plan.Cycle, pinsKeptMin))
	rows, err := river.Query(ctx, taskspec.PruneKeptSQL(riverSchema), spec.Name)
	if err != nil {
		return 0, fmt.Errorf("error finding the pins per-slot jobs still read: %w", err)
	}
	var (
		plans  []string
		starts []time.Time
		plan   string
		start  time.Time
	)
	if _, err := pgx.ForEachRow(rows, []any{&plan, &start}, func() error {
		plans, starts = append(plans, plan), append(starts, start)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("error finding the pins per-slot jobs still read: %w", err)
	}
	tag, err := tx.Exec(ctx, taskspec.PruneSQL(spec.Schema), spec.Name, before, plans, starts)
	if err != nil {
		return 0, fmt.Errorf("error pruning old pins: %w", err)
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
	switch {
	case o.Fallback != "" && !o.Reused:
		msg := "riverslot: the cycle's pins were not computed within PinsTimeout; the cycle follows the latest pins computed before it"
		if o.Fallback == FallbackHash {
			msg = "riverslot: the cycle's pins were not computed within PinsTimeout and no earlier pins exist; the cycle places every account by hash"
		}
		attrs := []any{slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.Duration("pins_timeout", spec.PinsTimeout), slog.String("fallback", o.Fallback)}
		if o.Fallback == FallbackPrevious {
			attrs = append(attrs, slog.Time("follows", o.Follows))
		}
		logger.WarnContext(ctx, msg, attrs...)
		return
	case o.Reused:
		logger.InfoContext(ctx, "riverslot: pins of the cycle already decided; reusing them",
			slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart), slog.String("fallback", o.Fallback))
		return
	}
	logger.InfoContext(ctx, "riverslot: jumbo accounts pinned",
		slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart),
		slog.Int("pinned", o.Pinned), slog.Float64("threshold", o.Threshold))
}
