package slotplan

import (
	"fmt"
	"sort"
	"time"
)

const day = 24 * time.Hour

// Schedule says where cycles start. Cycle starts form a grid:
//
//   - With a nil Location, the grid is anchored at the Unix epoch (UTC):
//     starts are epoch + Offset + k*Cycle. Any valid cycle works.
//   - With a Location, starts are the wall-clock times local midnight +
//     Offset + k*Cycle on every local day, so a 24h cycle with Offset 30m in
//     Europe/London starts at 00:30 London time every day, in winter and in
//     summer. Cycle must divide 24h.
//
// On a DST change day the absolute time between two local-day starts is 23h
// or 25h. Each cycle's slots are still laid out in absolute time from its
// own start (start + slot*SlotDuration), so on the short day the next cycle
// starts an hour before the previous cycle's last slots have run (those
// accounts are synced 23h apart), and on the long day there is an hour with
// no slots (those accounts are synced 25h apart). No account is skipped or
// synced twice within a cycle.
//
// One rule covers wall-clock starts that a DST change skips or repeats, in
// every zone (including those that change at midnight, such as
// America/Havana, America/Santiago and Atlantic/Azores): a start that does
// not exist that day (inside the gap) is moved to the first instant after
// the gap, the moment the clocks change; a start that happens twice (inside
// the overlap) is its first occurrence. Starts moved onto the same instant
// count once. So Start(t) <= t < Next(t) always, and starts strictly
// increase.
//
// A monthly schedule (NewMonthlySchedule; Monthly set, Cycle and Offset
// zero) starts a cycle at the start of every calendar month in Location
// (Monthly.MonthStart).
type Schedule struct {
	Cycle    time.Duration
	Offset   time.Duration
	Location *time.Location

	// Monthly makes cycles calendar months in Location.
	Monthly bool
}

// NewMonthlySchedule returns the schedule of calendar months in loc:
// a cycle starts at midnight of every month's first day there.
func NewMonthlySchedule(loc *time.Location) (Schedule, error) {
	if _, err := NewMonthly(loc); err != nil {
		return Schedule{}, err
	}
	return Schedule{Location: loc, Monthly: true}, nil
}

// NewSchedule validates and returns a Schedule.
func NewSchedule(cycle, offset time.Duration, loc *time.Location) (Schedule, error) {
	if _, err := New(cycle); err != nil {
		return Schedule{}, err
	}
	if offset < 0 || offset >= cycle {
		return Schedule{}, fmt.Errorf("TriggerOffset must be in [0, Cycle) = [0, %s), got %s; it shifts the first cycle start after midnight (or after the Unix epoch without a location)", cycle, offset)
	}
	if loc != nil && day%cycle != 0 {
		return Schedule{}, fmt.Errorf("Cycle must divide 24h when Location is set (wall-clock daily starts), got %s; use e.g. 24h, 12h, 8h or 1h, or leave Location nil for an absolute grid", cycle)
	}
	return Schedule{Cycle: cycle, Offset: offset, Location: loc}, nil
}

// GridOffset returns the Offset (in [0, cycle)) of the absolute grid of
// cycle (nil Location) that has a cycle start at t: the TriggerOffset that
// makes a task's cycles start at t, t+cycle, ... It returns 0 for a cycle
// that is not positive.
//
//	offset := slotplan.GridOffset(start, cycle)
//	s, _ := slotplan.NewSchedule(cycle, offset, nil) // s.Start(start) == start
func GridOffset(t time.Time, cycle time.Duration) time.Duration {
	if cycle <= 0 {
		return 0
	}
	return time.Duration(((t.UnixNano() % int64(cycle)) + int64(cycle)) % int64(cycle))
}

// Start returns the start of the cycle that contains t: the latest cycle
// start at or before t.
func (s Schedule) Start(t time.Time) time.Time {
	if s.Monthly {
		return Monthly{loc: s.Location}.MonthStart(t)
	}
	if s.Location == nil {
		origin := time.Unix(0, 0).UTC().Add(s.Offset)
		n := t.Sub(origin) / s.Cycle
		start := origin.Add(n * s.Cycle)
		if start.After(t) { // t before origin: division truncated toward zero
			start = start.Add(-s.Cycle)
		}
		return start
	}

	for from := -1; ; from-- { // look back further only after a day without a start
		g := s.grid(t, from, 1)
		if j := g.firstAfter(t) - 1; j >= 0 {
			return g.at(j)
		}
	}
}

// Next returns the first cycle start strictly after t. It satisfies River's
// PeriodicSchedule interface.
func (s Schedule) Next(t time.Time) time.Time {
	if s.Monthly {
		m := Monthly{loc: s.Location}
		return m.NextMonth(m.MonthStart(t))
	}
	if s.Location == nil {
		return s.Start(t).Add(s.Cycle)
	}

	for to := 2; ; to++ { // look ahead further only after a day without a start
		g := s.grid(t, -1, to)
		if j := g.firstAfter(t); j < g.n {
			return g.at(j)
		}
	}
}

// localGrid is the wall-clock starts of the local days from t's day + from
// to t's day + to, in order: start j is day from + j/perDay, start j%perDay
// of that day. Their instants never decrease with j (a start moved out of a
// DST gap may coincide with the next one), so they can be searched.
type localGrid struct {
	s          Schedule
	y          int
	m          time.Month
	d, from, n int
	perDay     int
}

func (s Schedule) grid(t time.Time, from, to int) localGrid {
	y, m, d := t.In(s.Location).Date()
	perDay := int(day / s.Cycle)
	return localGrid{s: s, y: y, m: m, d: d, from: from, perDay: perDay, n: (to - from + 1) * perDay}
}

// at returns the instant of start j.
func (g localGrid) at(j int) time.Time {
	// Civil dates are stepped in UTC, where every day has 24 hours; the
	// local clock is only used to place the start.
	cy, cm, cd := time.Date(g.y, g.m, g.d+g.from+j/g.perDay, 12, 0, 0, 0, time.UTC).Date()
	return wallClock(cy, cm, cd, g.s.Offset+time.Duration(j%g.perDay)*g.s.Cycle, g.s.Location)
}

// firstAfter returns the first j whose start is after t, or n.
func (g localGrid) firstAfter(t time.Time) int {
	return sort.Search(g.n, func(j int) bool { return g.at(j).After(t) })
}

// wallClock returns the instant the clocks in loc show the civil date y-m-d
// plus since midnight, by Schedule's rule: inside a DST gap, the first
// instant after it; inside an overlap, the first occurrence.
func wallClock(y int, m time.Month, d int, since time.Duration, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(since) // the wall clock, as if it were UTC
	t := time.Date(y, m, d, 0, 0, int(since/time.Second), int(since%time.Second), loc)
	if !wallOf(t, loc).Equal(want) {
		// In a gap: the transition, the first instant whose clock reads
		// past want.
		if wallOf(t, loc).Before(want) {
			_, end := t.ZoneBounds()
			return end.In(loc)
		}
		start, _ := t.ZoneBounds()
		return start.In(loc)
	}
	// In an overlap, time.Date may pick the second occurrence; clock
	// changes move by at most a few hours.
	_, offset := t.Zone()
	if _, before := t.Add(-3 * time.Hour).Zone(); before != offset {
		if u := want.Add(-time.Duration(before) * time.Second); u.Before(t) && wallOf(u, loc).Equal(want) {
			return u.In(loc)
		}
	}
	return t
}

// wallOf is t's wall clock in loc, as a UTC time for comparisons.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}
