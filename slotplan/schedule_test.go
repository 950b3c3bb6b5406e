package slotplan

import (
	"archive/zip"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSchedule(t *testing.T) {
	t.Parallel()

	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)

	t.Run("AbsoluteGrid", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(120*time.Second, 0, nil)
		require.NoError(t, err)

		at := time.Date(2026, 11, 22, 10, 3, 59, 0, time.UTC)
		require.Equal(t, time.Date(2026, 11, 22, 10, 2, 0, 0, time.UTC), s.Start(at))
		require.Equal(t, time.Date(2026, 11, 22, 10, 4, 0, 0, time.UTC), s.Next(at))

		// A start is its own cycle's start; Next is strictly after.
		start := time.Date(2026, 11, 22, 10, 4, 0, 0, time.UTC)
		require.Equal(t, start, s.Start(start))
		require.Equal(t, start.Add(120*time.Second), s.Next(start))

		// Before the epoch the grid still floors.
		pre := time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
		require.Equal(t, time.Date(1969, 12, 31, 23, 58, 0, 0, time.UTC), s.Start(pre))
	})

	t.Run("AbsoluteGridWithOffset", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(8*time.Hour, 30*time.Minute, nil)
		require.NoError(t, err)
		at := time.Date(2026, 11, 22, 8, 29, 0, 0, time.UTC)
		require.Equal(t, time.Date(2026, 11, 22, 0, 30, 0, 0, time.UTC), s.Start(at))
		require.Equal(t, time.Date(2026, 11, 22, 8, 30, 0, 0, time.UTC), s.Next(at))
	})

	t.Run("LondonWallClockAcrossDST", func(t *testing.T) {
		t.Parallel()

		s, err := NewSchedule(24*time.Hour, 30*time.Minute, london)
		require.NoError(t, err)

		// Winter: 00:30 GMT is 00:30 UTC.
		require.Equal(t, time.Date(2026, 1, 15, 0, 30, 0, 0, time.UTC), s.Start(time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)).UTC())
		// Summer: 00:30 BST is 23:30 UTC the day before.
		require.Equal(t, time.Date(2026, 6, 30, 23, 30, 0, 0, time.UTC), s.Start(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)).UTC())

		// Spring forward on 2026-03-29 (01:00 UTC): the cycle from the 29th
		// to the 30th is 23h long in absolute time.
		spring := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
		require.Equal(t, time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), spring.UTC())
		require.Equal(t, 23*time.Hour, s.Next(spring).Sub(spring))

		// Fall back on 2026-10-25: that cycle is 25h long.
		autumn := s.Next(time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC))
		require.Equal(t, time.Date(2026, 10, 24, 23, 30, 0, 0, time.UTC), autumn.UTC())
		require.Equal(t, 25*time.Hour, s.Next(autumn).Sub(autumn))
	})

	t.Run("Invariants", func(t *testing.T) {
		t.Parallel()

		rng := rand.New(rand.NewPCG(3, 4))
		for _, s := range []Schedule{
			{Cycle: 120 * time.Second},
			{Cycle: 24 * time.Hour, Offset: 30 * time.Minute, Location: london},
			{Cycle: 8 * time.Hour, Offset: time.Hour, Location: london},
		} {
			for range 2000 {
				at := time.Unix(1_700_000_000+rng.Int64N(200_000_000), rng.Int64N(1e9))
				start, next := s.Start(at), s.Next(at)
				require.False(t, start.After(at), "start %s after %s", start, at)
				require.True(t, next.After(at), "next %s not after %s", next, at)
				require.Equal(t, start, s.Start(start))
				require.Equal(t, next, s.Start(next))
				require.Equal(t, next, s.Next(start), "no start between %s and %s", start, next)
			}
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()

		_, err := NewSchedule(120*time.Second, 120*time.Second, nil)
		require.EqualError(t, err, "TriggerOffset must be in [0, Cycle) = [0, 2m0s), got 2m0s; it shifts the first cycle start after midnight (or after the Unix epoch without a location)")
		_, err = NewSchedule(120*time.Second, -time.Second, nil)
		require.ErrorContains(t, err, "TriggerOffset must be in [0, Cycle)")
		_, err = NewSchedule(256*time.Second, 0, london)
		require.ErrorContains(t, err, "Cycle must divide 24h when Location is set")
		_, err = NewSchedule(3*time.Second, 0, nil)
		require.ErrorIs(t, err, ErrInvalidCycle)
	})
}

// zoneNames lists every zone of Go's tz database (GOROOT/lib/time/zoneinfo.zip).
func zoneNames(t testing.TB) []string {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	require.NoError(t, err, "the zone sweep asks the go command where Go's tz database is")
	path := filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip")
	r, err := zip.OpenReader(path)
	require.NoError(t, err, "the zone sweep needs Go's tz database at %s (part of every Go installation)", path)
	defer r.Close()
	// Links (US/Eastern and America/New_York, ...) carry the same bytes and
	// so behave the same: one name per distinct zone keeps the sweep's
	// coverage at three quarters of its time.
	type content struct {
		crc  uint32
		size uint64
	}
	seen := map[content]bool{}
	var names []string
	for _, f := range r.File {
		c := content{f.CRC32, f.UncompressedSize64}
		if !f.FileInfo().IsDir() && !seen[c] {
			seen[c] = true
			names = append(names, f.Name)
		}
	}
	require.Greater(t, len(names), 300)
	return names
}

// checkScheduleAt asserts Schedule's invariants at t.
func checkScheduleAt(t *testing.T, s Schedule, at time.Time) {
	start, next := s.Start(at), s.Next(at)
	if start.IsZero() || next.IsZero() || start.After(at) || !next.After(at) ||
		!s.Start(next).Equal(next) || !s.Start(start).Equal(start) || !s.Next(start).After(at) || !s.Next(start).Equal(next) ||
		next.Sub(start) > 2*day {
		t.Fatalf("%s cycle %s offset %s at %s: start %s, next %s, Start(next) %s, Next(start) %s",
			s.Location, s.Cycle, s.Offset, at.UTC().Format(time.RFC3339), start.UTC().Format(time.RFC3339),
			next.UTC().Format(time.RFC3339), s.Start(next).UTC().Format(time.RFC3339), s.Next(start).UTC().Format(time.RFC3339))
	}
}

func TestGridOffset(t *testing.T) {
	t.Parallel()

	t.Run("StartsACycleAtT", func(t *testing.T) {
		t.Parallel()

		for _, cycle := range []time.Duration{2 * time.Second, 90 * time.Second, 8 * time.Hour, 24 * time.Hour} {
			for _, at := range []time.Time{
				time.Date(2026, 11, 22, 10, 3, 59, 123456789, time.UTC),
				time.Unix(0, 0),
				time.Date(1969, 7, 20, 20, 17, 40, 5, time.UTC), // before the epoch: UnixNano is negative
			} {
				offset := GridOffset(at, cycle)
				require.GreaterOrEqual(t, offset, time.Duration(0), "cycle %s, t %s", cycle, at)
				require.Less(t, offset, cycle, "cycle %s, t %s", cycle, at)

				s, err := NewSchedule(cycle, offset, nil)
				require.NoError(t, err)
				require.True(t, s.Start(at).Equal(at), "cycle %s: Start(%s) = %s", cycle, at, s.Start(at))
				require.True(t, s.Next(at).Equal(at.Add(cycle)), "cycle %s: Next(%s) = %s", cycle, at, s.Next(at))
			}
		}
	})

	t.Run("KnownValues", func(t *testing.T) {
		t.Parallel()

		require.Equal(t, 3*time.Second+500*time.Millisecond, GridOffset(time.Unix(63, 5e8), 60*time.Second))
		require.Equal(t, 59*time.Second, GridOffset(time.Unix(-1, 0), 60*time.Second))
		require.Zero(t, GridOffset(time.Unix(63, 0), 0))
	})
}

// TestScheduleEveryZone sweeps every zone of Go's tz database over
// 2000-2040: around every zone transition, for 24h (two offsets) and 1h
// cycles, Start(t) <= t < Next(t), both are cycle starts, and neither is ever
// the zero time. Zones that change their clocks at midnight (Havana,
// Santiago, Azores, ...) returned the zero time before.
func TestScheduleEveryZone(t *testing.T) {
	t.Parallel()

	var transitions, zones int
	// Zones whose offsets agree from 2000 to 2041 (the sweep's range: most
	// differ only in older history) give every check the same local times:
	// one of each keeps the coverage at 214 of about 400 zones' time.
	seen := map[string]bool{}
	for _, name := range zoneNames(t) {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err)
		if fp := zoneFingerprint(loc); seen[fp] {
			continue
		} else {
			seen[fp] = true
		}
		zones++
		var schedules []Schedule
		for _, c := range []struct{ cycle, offset time.Duration }{{day, 0}, {day, 30 * time.Minute}, {time.Hour, 0}} {
			s, err := NewSchedule(c.cycle, c.offset, loc)
			require.NoError(t, err)
			schedules = append(schedules, s)
		}
		at := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		end := time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, s := range schedules {
			checkScheduleAt(t, s, at) // zones without transitions still get checked
		}
		for at.Before(end) {
			_, next := at.In(loc).ZoneBounds()
			if next.IsZero() || !next.After(at) {
				break
			}
			transitions++
			for _, d := range []time.Duration{-time.Hour, -time.Second, 0, time.Second, time.Hour, 25 * time.Hour} {
				for _, s := range schedules {
					checkScheduleAt(t, s, next.Add(d))
				}
			}
			at = next
		}
	}
	t.Logf("checked %d zone transitions in %d zones of distinct offsets", transitions, zones)
	require.Greater(t, transitions, 1000)
	require.Greater(t, zones, 150)
}

// zoneFingerprint returns loc's offset on 2000-01-01 and every transition
// (instant and new offset) until 2041.
func zoneFingerprint(loc *time.Location) string {
	at, end := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC)
	_, off := at.In(loc).Zone()
	b := []byte(strconv.Itoa(off))
	for at.Before(end) {
		_, next := at.In(loc).ZoneBounds()
		if next.IsZero() || !next.After(at) {
			break
		}
		_, off := next.In(loc).Zone()
		b = fmt.Appendf(b, ",%d:%d", next.Unix(), off)
		at = next
	}
	return string(b)
}

// TestScheduleMidnightDST pins the rule for starts in a gap on the zones of
// the bug report: a 24h cycle at 00:00 local whose midnight does not exist
// starts when the clocks jump, at 01:00 local.
func TestScheduleMidnightDST(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		zone string
		at   time.Time // a moment on the day before the gap
		// the skipped midnight, written as the instant the clocks jump
		// (standard-time midnight: UTC minus the standard offset)
		jump time.Time
	}{
		// Havana: CST (UTC-5) to CDT at 00:00 on 2025-03-09.
		{"America/Havana", time.Date(2025, 3, 8, 5, 0, 0, 0, time.UTC), time.Date(2025, 3, 9, 5, 0, 0, 0, time.UTC)},
		// Santiago: -04 to -03 at 00:00 on 2025-09-07.
		{"America/Santiago", time.Date(2025, 9, 6, 6, 0, 0, 0, time.UTC), time.Date(2025, 9, 7, 4, 0, 0, 0, time.UTC)},
		// Azores: -01 to +00 at 00:00 on 2025-03-30.
		{"Atlantic/Azores", time.Date(2025, 3, 29, 6, 0, 0, 0, time.UTC), time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)},
	} {
		t.Run(tt.zone, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(tt.zone)
			require.NoError(t, err)
			s, err := NewSchedule(day, 0, loc)
			require.NoError(t, err)

			next := s.Next(tt.at)
			require.True(t, next.Equal(tt.jump), "next start %s, want the jump %s", next.UTC(), tt.jump)
			require.Equal(t, 1, next.In(loc).Hour(), "the clocks read 01:00 right after the jump")
			require.True(t, s.Start(tt.jump.Add(time.Minute)).Equal(tt.jump))
			following := s.Next(next)
			require.Equal(t, 0, following.In(loc).Hour(), "the next day starts at midnight again")
			require.Equal(t, 23*time.Hour, following.Sub(next))

			short, err := NewSchedule(2*time.Minute, 0, loc)
			require.NoError(t, err)
			for at := tt.jump.Add(-10 * time.Minute); at.Before(tt.jump.Add(10 * time.Minute)); at = at.Add(17 * time.Second) {
				checkScheduleAt(t, short, at)
			}
		})
	}
}
