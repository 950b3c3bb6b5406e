package plancmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/slotplan"
)

// ErrInterrupted is returned when ctx is done while plan computes the next
// syncs.
var ErrInterrupted = errors.New("interrupted")

// syncsShown is how many next syncs plan prints.
const syncsShown = 3

// Task is one task plan prints an account's times for.
type Task struct {
	// Name is the task's name, printed.
	Name string
	// Seed is the seed of the accounts' offsets in their slots.
	Seed uint64
	// Shift is how many slots the task's slots are shifted by (Phase x
	// slots; half the slots more for a task OppositeOf another).
	Shift int

	syncs []planSync // the account's next syncs
}

// planSync is one of an account's next syncs: its due time, in the cycle
// starting at cycleStart.
type planSync struct {
	due, cycleStart time.Time
}

// cycleSchedule is what plan needs of a slotplan.Schedule.
type cycleSchedule interface {
	Start(t time.Time) time.Time
	Next(t time.Time) time.Time
}

// errScheduleStuck reports a schedule that returned no usable cycle start.
// It is a bug in slotplan, not bad input: exit 1.
func errScheduleStuck(what string, t, got time.Time) error {
	return fmt.Errorf("the cycle schedule returned %s as the %s %s; this is a bug in riverslot's slotplan, please report it with this command line",
		got.UTC().Format(time.RFC3339), what, t.UTC().Format(time.RFC3339))
}

// cycleAround returns the start of the cycle holding at and the next start,
// checking that the schedule answered: start <= at < next.
func cycleAround(schedule cycleSchedule, at time.Time) (time.Time, time.Time, error) {
	start := schedule.Start(at)
	if start.IsZero() || start.After(at) {
		return time.Time{}, time.Time{}, errScheduleStuck("start of the cycle holding", at, start)
	}
	next := schedule.Next(at)
	if !next.After(at) {
		return time.Time{}, time.Time{}, errScheduleStuck("first cycle start after", at, next)
	}
	return start, next, nil
}

// nextSyncs returns the account's first n due times after at, one per cycle,
// in its hash slot shifted by shift. It always finishes (see nextSyncsIn).
func nextSyncs(ctx context.Context, schedule cycleSchedule, plan slotplan.Plan, seed uint64, shift int, id uuid.UUID, at time.Time, n int) ([]time.Time, error) {
	hash := plan.Shift(plan.SlotOf(id), shift)
	syncs, err := nextSyncsIn(ctx, schedule, plan, seed, id, at, n, func(time.Time) int { return hash })
	if err != nil {
		return nil, err
	}
	due := make([]time.Time, len(syncs))
	for i, s := range syncs {
		due[i] = s.due
	}
	return due, nil
}

// nextSyncsIn returns the account's first n syncs after at, one per cycle,
// in the slot slotIn gives for each cycle start: the slot's start plus the
// account's offset, as the per-slot job schedules it. It always finishes:
// it stops on ctx, fails if the schedule does not advance, and looks at no
// more than n+1 cycles (only the current cycle's due time can be at or
// before at).
func nextSyncsIn(ctx context.Context, schedule cycleSchedule, plan slotplan.Plan, seed uint64, id uuid.UUID, at time.Time, n int, slotIn func(cycleStart time.Time) int) ([]planSync, error) {
	start, _, err := cycleAround(schedule, at)
	if err != nil {
		return nil, err
	}
	off := plan.Offset(seed, id)
	syncs := make([]planSync, 0, n)
	for cycles := 0; len(syncs) < n; cycles++ {
		if ctx.Err() != nil {
			return nil, ErrInterrupted
		}
		if cycles > n {
			return nil, fmt.Errorf("found %d of %d sync times in %d cycles after %s; this is a bug in riverslot's slotplan, please report it with this command line",
				len(syncs), n, cycles, at.UTC().Format(time.RFC3339))
		}
		if due := plan.SlotStart(start, slotIn(start)).Add(off); due.After(at) {
			syncs = append(syncs, planSync{due: due, cycleStart: start})
		}
		next := schedule.Next(start)
		if !next.After(start) {
			return nil, errScheduleStuck("first cycle start after", start, next)
		}
		start = next
	}
	return syncs, nil
}

// cycleStarts returns the starts of the n cycles from the one holding at:
// those nextSyncsIn looks at, at most.
func cycleStarts(ctx context.Context, schedule cycleSchedule, at time.Time, n int) ([]time.Time, error) {
	start, _, err := cycleAround(schedule, at)
	if err != nil {
		return nil, err
	}
	starts := make([]time.Time, 0, n)
	for range n {
		if ctx.Err() != nil {
			return nil, ErrInterrupted
		}
		starts = append(starts, start)
		next := schedule.Next(start)
		if !next.After(start) {
			return nil, errScheduleStuck("first cycle start after", start, next)
		}
		start = next
	}
	return starts, nil
}

// clock formats a duration as H:MM:SS(.ffffff).
func Clock(d time.Duration) string {
	h := d / time.Hour
	m := (d % time.Hour) / time.Minute
	s := (d % time.Minute) / time.Second
	out := fmt.Sprintf("%d:%02d:%02d", h, m, s)
	if us := (d % time.Second) / time.Microsecond; us != 0 {
		out += fmt.Sprintf(".%06d", us)
	}
	return out
}
