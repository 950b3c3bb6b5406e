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
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// Outcome is what placePins did.
type Outcome struct {
	// Reused is true when the cycle's pins were already computed (by
	// another node, or an earlier attempt that committed).
	Reused bool
	// Pinned is how many accounts were pinned, Threshold the weight above
	// which an account is a jumbo (+Inf: none).
	Pinned    int
	Threshold float64
}

// Place computes the pins of a weighted task's cycle in tx, the
// bootstrap's transaction, at most once per (task, plan, cycle): the
// riverslot_pin_cycles row it inserts first is the guard. A second
// bootstrap of the cycle (another node, a retry after a crash) waits on that
// row's insert and, once the first commits, finds it and reuses the pins; if
// the first rolls back, nothing of it remains and the second computes them.
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
		return Outcome{Reused: true}, nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("error claiming the pins of the cycle (run Scheduler.CreateIndexes to create %s): %w", taskspec.PinCyclesTable, err)
	}

	// Per-slot totals, by the slot that serves each bucket.
	slotTotals := make([]float64, spec.Plan.Slots)
	sumSq := 0.0
	rows, err := tx.Query(ctx, q.SlotWeights)
	if err != nil {
		return Outcome{}, fmt.Errorf("error summing weights per slot: %w", err)
	}
	var (
		bucket   int
		sum, sq  float64
		homeSlot = func(bucket int) int { return spec.Plan.Shift(spec.Plan.SlotOfBucket(byte(bucket)), spec.Shift) }
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
	if _, err := tx.Exec(ctx, q.Record, spec.Name, spec.PlanID, cycleStart, stored, len(pins)); err != nil {
		return Outcome{}, fmt.Errorf("error recording the pinned cycle: %w", err)
	}
	return Outcome{Pinned: len(pins), Threshold: threshold}, nil
}

// Prune deletes, in tx, the pin cycles of spec's task that started more
// than max(two cycles, an hour) before both cycleStart and now and that no
// per-slot job in riverSchema's river_job can still read
// (taskspec.PruneSQL): a change of Cycle, or EnqueueCycle far ahead, never
// removes the pins of a cycle that is still running.
func Prune(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec, riverSchema string, cycleStart time.Time) (int64, error) {
	from := cycleStart
	if now := time.Now(); now.Before(from) {
		from = now
	}
	before := from.Add(-max(time.Duration(pinsKept-1)*spec.Plan.Cycle, pinsKeptMin))
	tag, err := tx.Exec(ctx, taskspec.PruneSQL(spec.Schema, riverSchema), spec.Name, before)
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
	if o.Reused {
		logger.InfoContext(ctx, "riverslot: pins of the cycle already computed; reusing them",
			slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart))
		return
	}
	logger.InfoContext(ctx, "riverslot: jumbo accounts pinned",
		slog.String("task", spec.Name), slog.Time("cycle_start", cycleStart),
		slog.Int("pinned", o.Pinned), slog.Float64("threshold", o.Threshold))
}
