package slotplan

import (
	"fmt"
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
// synced twice within a cycle. A wall-clock start that does not exist on
// that day (inside the spring-forward gap) is normalized by time.Date.
type Schedule struct {
	Cycle    time.Duration
	Offset   time.Duration
	Location *time.Location
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

// Start returns the start of the cycle that contains t: the latest cycle
// start at or before t.
func (s Schedule) Start(t time.Time) time.Time {
	if s.Location == nil {
		origin := time.Unix(0, 0).UTC().Add(s.Offset)
		n := t.Sub(origin) / s.Cycle
		start := origin.Add(n * s.Cycle)
		if start.After(t) { // t before origin: division truncated toward zero
			start = start.Add(-s.Cycle)
		}
		return start
	}

	var best time.Time
	local := t.In(s.Location)
	for d := -1; d <= 0; d++ {
		for _, c := range s.dayStarts(local.AddDate(0, 0, d)) {
			if !c.After(t) && c.After(best) {
				best = c
			}
		}
	}
	return best
}

// Next returns the first cycle start strictly after t. It satisfies River's
// PeriodicSchedule interface.
func (s Schedule) Next(t time.Time) time.Time {
	if s.Location == nil {
		return s.Start(t).Add(s.Cycle)
	}

	var best time.Time
	local := t.In(s.Location)
	for d := 0; d <= 1; d++ {
		for _, c := range s.dayStarts(local.AddDate(0, 0, d)) {
			if c.After(t) && (best.IsZero() || c.Before(best)) {
				best = c
			}
		}
	}
	return best
}

// dayStarts returns the cycle starts of the local day containing t.
func (s Schedule) dayStarts(t time.Time) []time.Time {
	y, m, d := t.Date()
	n := int(day / s.Cycle)
	starts := make([]time.Time, 0, n)
	for k := range n {
		sec := int((s.Offset + time.Duration(k)*s.Cycle) / time.Second)
		nsec := int((s.Offset + time.Duration(k)*s.Cycle) % time.Second)
		starts = append(starts, time.Date(y, m, d, 0, 0, sec, nsec, s.Location))
	}
	return starts
}
