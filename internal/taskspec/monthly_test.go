package taskspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

func monthlyConfig(loc *time.Location) taskspec.Config {
	return taskspec.Config{Name: "bills", Monthly: true, Location: loc, Table: "accounts", HasSync: true}
}

// TestMonthlyBuild: a monthly task gets 65,536 buckets, UTC when no
// Location is set, a plan id naming its zone, and each month's own
// layout; fields it does not support are refused, each by name.
func TestMonthlyBuild(t *testing.T) {
	t.Parallel()
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)

	specs, err := taskspec.Build([]taskspec.Config{monthlyConfig(london)})
	require.NoError(t, err)
	s := specs[0]
	require.True(t, s.Monthly())
	require.Equal(t, slotplan.BucketsTwoByte, s.Plan.Buckets)
	require.Regexp(t, `\Amonthly/[0-9a-f]{16}/Europe/London\z`, s.PlanID)
	require.Equal(t, 24*time.Hour, s.LateGrace, "a day's grace by default")
	require.Contains(t, s.CycleName(), "Europe/London")

	utc := monthlyConfig(nil)
	utc.Name = "utc"
	specs, err = taskspec.Build([]taskspec.Config{utc})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(specs[0].PlanID, "/UTC"), specs[0].PlanID)

	// March 2027 in London: 31 days, the 28th 23 hours long.
	march := time.Date(2027, 3, 1, 0, 0, 0, 0, london)
	require.True(t, s.Schedule.Start(march.Add(40*time.Hour)).Equal(march))
	require.True(t, s.CycleEnd(march).Equal(time.Date(2027, 4, 1, 0, 0, 0, 0, london)))
	require.Equal(t, 31, s.Slots(march))
	require.Equal(t, 28, s.Slots(time.Date(2027, 2, 1, 0, 0, 0, 0, london)))
	require.Equal(t, 23*time.Hour, s.SlotLen(march, 27))
	require.Equal(t, 743*time.Hour, s.CycleLen(march))
	require.True(t, s.SlotStart(march, 27).Equal(time.Date(2027, 3, 28, 0, 0, 0, 0, london)))
	require.True(t, s.PerSlotStart(march, 1).Equal(time.Date(2027, 3, 2, 0, 0, 0, 0, london).Add(-s.Lead)))

	// Every account is in exactly one day, inside that day's bucket range,
	// due on that day (its local date), and its NotAfter is half of April
	// (the shorter month: 720 h) before its place in April, a fraction of
	// April's 720 h, not of March's 743 h.
	end := s.CycleEnd(march)
	for range 3000 {
		id := uuid.New()
		day := s.SlotOf(march, id)
		lo, hi := s.SlotBuckets(march, day)
		b := int(id[15])*256 + int(id[14])
		require.True(t, b >= lo && b <= hi)
		in := 0
		for d := range s.Slots(march) {
			if l, h := s.SlotBuckets(march, d); b >= l && b <= h && s.InSlot(march, d, id) {
				in++
			}
		}
		require.Equal(t, 1, in, "account %s is in one day's fan-out", id)
		due := s.Regular(march, day, id)
		require.Equal(t, day+1, due.In(london).Day(), "due on its day")
		notAfter := s.RegularNotAfter(march, end, day, id)
		april := s.Month.Target(end, s.Seed, id)
		require.True(t, april.Add(-720*time.Hour/2).Equal(notAfter), "account %s: NotAfter %s, April's place %s", id, notAfter, april)
	}
}

func TestMonthlyRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		field string
		edit  func(*taskspec.Config)
	}{
		{"Cycle must be 0 when Monthly", func(c *taskspec.Config) { c.Cycle = 24 * time.Hour }},
		{"Buckets must be 65536 when Monthly", func(c *taskspec.Config) { c.Buckets = 256 }},
		{"TriggerOffset must be 0 when Monthly", func(c *taskspec.Config) { c.TriggerOffset = time.Hour }},
		{"Weight cannot be set when Monthly", func(c *taskspec.Config) { c.Weight = "weight" }},
		{"Phase and OppositeOf cannot be set when Monthly", func(c *taskspec.Config) { c.Phase = 0.5 }},
		{"Location must be a named zone when Monthly", func(c *taskspec.Config) { c.Location = time.Local }},
		{"LateGrace must be at most Cycle (672h0m0s)", func(c *taskspec.Config) { c.LateGrace = 29 * 24 * time.Hour }},
	} {
		c := monthlyConfig(nil)
		tt.edit(&c)
		_, err := taskspec.Build([]taskspec.Config{c})
		require.ErrorContains(t, err, tt.field)
		require.ErrorContains(t, err, `Tasks[0] "bills"`)
	}
}

// TestMonthlyPlanKey: a monthly plan id reads back into the same key,
// and its River tag (a zone's name may hold '_', '+' and '/') too; a
// zone this node cannot load is an unreadable plan.
func TestMonthlyPlanKey(t *testing.T) {
	t.Parallel()
	for _, zone := range []string{"UTC", "Europe/London", "America/New_York", "Etc/GMT+5", "America/Argentina/Buenos_Aires"} {
		k := taskspec.MonthKey(zone, 0xabcdef)
		id := k.String()
		require.Equal(t, "monthly/0000000000abcdef/"+zone, id)
		got, err := taskspec.ParsePlanKey(id)
		require.NoError(t, err)
		require.Equal(t, k, got)
		tag := taskspec.PlanTag(id)
		require.Regexp(t, `\A[\w][\w\-]+[\w]\z`, tag, "River's tag rule")
		require.LessOrEqual(t, len(tag), 255)
		back, ok, err := taskspec.PlanFromTags([]string{"other", tag})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, k, back)
	}
	for _, bad := range []string{"monthly/abc/UTC", "monthly/0000000000abcdef/", "monthly/0000000000abcdef/Mars/Olympus"} {
		_, err := taskspec.ParsePlanKey(bad)
		require.ErrorIs(t, err, taskspec.ErrPlanID, bad)
	}
}

// TestForPlanMonthly: a job of a monthly plan runs under that plan on a
// node whose task has a fixed cycle (a rolling deploy), and a fixed plan's
// job under its own on a monthly node.
func TestForPlanMonthly(t *testing.T) {
	t.Parallel()
	fixed := spec160(t, taskspec.LatePolicySpread)
	key := taskspec.MonthKey("Europe/London", 7)
	m, err := fixed.ForPlan(key, time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.True(t, m.Monthly())
	require.Equal(t, key.String(), m.PlanID)
	require.Equal(t, slotplan.BucketsTwoByte, m.Plan.Buckets)
	require.Contains(t, m.SQL.FirstPage, "get_byte(uuid_send(\"id\"), 14)", "the two-byte bucket expression")
	require.False(t, fixed.Monthly(), "the node's spec is left as it was")

	back, err := m.ForPlan(fixed.Key, t0)
	require.NoError(t, err)
	require.False(t, back.Monthly())
	require.Equal(t, fixed.Plan, back.Plan)
}
