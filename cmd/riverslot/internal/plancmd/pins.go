package plancmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// pinLookup is what the pins tables say about one account. A nil
// *pinLookup (pins not read) places the account by hash.
type pinLookup struct {
	cycleStart *time.Time // the latest pinned cycle; nil: none
	slot       *int32     // nil: not pinned in that cycle
	weight     *float64
	schema     string
	err        string // the pins tables do not exist
	// cycles holds, for each cycle plan looks at that has pins (by its
	// start's Unix nanoseconds), the account's pinned slot there, or -1
	// when it keeps its hash slot.
	cycles map[int64]int
}

// cyclePinsSQL returns the account's pin ($3) in each cycle of task $1 and
// plan $2 among $4 that has pins, in the pins tables of schema: (cycle
// start, slot), slot -1 when it is not pinned in that cycle. A cycle that
// fell back follows the pins it fell back to (none: hash placement).
func cyclePinsSQL(schema string) string {
	return "SELECT c.cycle_start, coalesce(p.slot, -1) FROM " + sqlbucket.QualifiedTable(schema, taskspec.PinCyclesTable) + " c LEFT JOIN " +
		sqlbucket.QualifiedTable(schema, taskspec.PinsTable) +
		" p ON p.task = c.task AND p.plan = c.plan AND p.cycle_start = coalesce(c.follows, c.cycle_start) AND p.account_id = $3" +
		" WHERE c.task = $1 AND c.plan = $2 AND c.cycle_start = ANY($4)"
}

// lookupPin reads from pool the account's pin in the latest pinned cycle of task under
// planID, and in each cycle of starts that has pins.
func lookupPin(ctx context.Context, pool *pgxpool.Pool, schema, task, planID string, id uuid.UUID, starts []time.Time) (*pinLookup, error) {
	l := &pinLookup{schema: cmp.Or(schema, "search_path"), cycles: map[int64]int{}}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", sqlbucket.QualifiedTable(schema, taskspec.PinCyclesTable)).Scan(&exists); err != nil {
		return nil, fmt.Errorf("error looking up the pins tables: %w", err)
	}
	if !exists {
		l.err = "no pins tables in schema " + l.schema + " (the task is not weighted, or --pins-schema is not its Schema)"
		return l, nil
	}
	var start time.Time
	err := pool.QueryRow(ctx, taskspec.PinOfSQL(schema), task, planID, id).Scan(&start, &l.slot, &l.weight)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("error reading the account's pin: %w", err)
	}
	l.cycleStart = &start
	rows, err := pool.Query(ctx, cyclePinsSQL(schema), task, planID, id, starts)
	if err != nil {
		return nil, fmt.Errorf("error reading the account's pins: %w", err)
	}
	var slot int
	if _, err := pgx.ForEachRow(rows, []any{&start, &slot}, func() error {
		l.cycles[start.UnixNano()] = slot
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the account's pins: %w", err)
	}
	return l, nil
}

// check refuses a pin outside the plan's slots: the cycle's per-slot jobs
// would never select the account, and plan would print times that no job
// keeps.
func (l *pinLookup) check(plan slotplan.Plan, id uuid.UUID) error {
	if l == nil {
		return nil
	}
	bad := func(slot int, start time.Time) error {
		return fmt.Errorf("the pins table pins account %s to slot %d in the cycle of %s, outside the plan's %d slots: no per-slot job selects it there; this is a bug in riverslot, please report it",
			id, slot, start.UTC().Format(time.RFC3339), plan.Slots)
	}
	if l.pinned() && (*l.slot < 0 || int(*l.slot) >= plan.Slots) {
		return bad(int(*l.slot), *l.cycleStart)
	}
	for at, slot := range l.cycles {
		if slot < -1 || slot >= plan.Slots {
			return bad(slot, time.Unix(0, at))
		}
	}
	return nil
}

// pinned reports whether the account is pinned in the latest pinned cycle.
func (l *pinLookup) pinned() bool {
	return l != nil && l.err == "" && l.cycleStart != nil && l.slot != nil
}

// served is the slot a task serves the account in during one cycle, and
// why.
type served struct {
	slot int
	why  string
}

// servedSlot returns where task pt serves the account in the cycle starting
// at start, the pins being those of task base (pt itself, or the task pt is
// OppositeOf, whose pins pt follows shifted by the difference of their
// shifts): the cycle's own pin when its pins exist, else the pin of the
// latest pinned cycle (pins are sticky), else the hash slot.
func (l *pinLookup) servedSlot(plan slotplan.Plan, base, pt Task, id uuid.UUID, start time.Time) served {
	hash := plan.Shift(plan.SlotOf(id), pt.Shift)
	follow := func(pinned int) int { return plan.Shift(pinned, pt.Shift-base.Shift) }
	if l == nil || l.err != "" || l.cycleStart == nil {
		return served{hash, "hash slot"}
	}
	latest := l.cycleStart.UTC().Format(time.RFC3339)
	if slot, ok := l.cycles[start.UnixNano()]; ok {
		if slot < 0 {
			return served{hash, "hash slot: not pinned in that cycle"}
		}
		return served{follow(slot), "pinned in that cycle"}
	}
	if l.slot != nil {
		return served{follow(int(*l.slot)), "that cycle has no pins yet: the pin of " + latest + ", if it holds"}
	}
	return served{hash, "hash slot: that cycle has no pins yet, and it was not pinned in " + latest}
}

// describe is plan's "pinned" line.
func (l *pinLookup) describe(asked bool, plan slotplan.Plan, off time.Duration) string {
	switch {
	case !asked:
		return "unknown: a weighted task may pin it elsewhere; pass --database-url (and --pins-schema) to read the pins table"
	case l.err != "":
		return "no: " + l.err
	case l.cycleStart == nil:
		return "no: no cycle of this task and plan was pinned in schema " + l.schema + " (not weighted, or not bootstrapped yet)"
	case l.slot == nil:
		return "no: it keeps its hash slot in the latest pinned cycle, " + l.cycleStart.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("yes: to slot %d in the cycle of %s (weight %g), due +%s after that cycle's start: synced there, not in its hash slot",
		*l.slot, l.cycleStart.UTC().Format(time.RFC3339), *l.weight, Clock(time.Duration(*l.slot)*plan.SlotDuration+off))
}

// describeOpposite is the "pinned" line of the --opposite task when the
// account is pinned for the first task: the opposite task follows that pin
// shifted by the difference of their shifts.
func (l *pinLookup) describeOpposite(plan slotplan.Plan, base, pt Task, off time.Duration) string {
	slot := plan.Shift(int(*l.slot), pt.Shift-base.Shift)
	return fmt.Sprintf("yes: follows the pin of task %s to slot %d in the cycle of %s, shifted by %d: slot %d, due +%s after that cycle's start",
		base.Name, *l.slot, l.cycleStart.UTC().Format(time.RFC3339), plan.Shift(pt.Shift-base.Shift, 0), slot,
		Clock(time.Duration(slot)*plan.SlotDuration+off))
}
