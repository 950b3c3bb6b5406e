package taskspec_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

func TestPlanIDBuckets(t *testing.T) {
	t.Parallel()

	for _, cycle := range []time.Duration{16 * time.Second, 64 * time.Second, 24 * time.Hour} {
		coarse, err := slotplan.NewBuckets(cycle, slotplan.Buckets)
		require.NoError(t, err)
		fine, err := slotplan.NewBuckets(cycle, slotplan.BucketsTwoByte)
		require.NoError(t, err)
		for _, shift := range []int{0, coarse.Slots / 2} {
			a, b := taskspec.PlanID(coarse, 42, shift), taskspec.PlanID(fine, 42, shift)
			require.NotEqual(t, a, b, "cycle %s shift %d", cycle, shift)
			require.NotContains(t, a, "/b", "256-bucket plan ids are as before")

			got, err := taskspec.ParsePlanKey(b)
			require.NoError(t, err)
			require.Equal(t, taskspec.PlanKey{Cycle: cycle, Slots: fine.Slots, Buckets: slotplan.BucketsTwoByte, Seed: 42, Shift: shift}, got)
			require.Equal(t, b, got.String(), "written and read back")
			got, err = taskspec.ParsePlanKey(a)
			require.NoError(t, err)
			require.Equal(t, slotplan.Buckets, got.Buckets)
			require.Equal(t, a, got.String(), "written and read back")
		}
	}
	require.Equal(t, "86400s/1024/000000000000002a/b65536/+512", taskspec.PlanID(mustPlan(t, 24*time.Hour, slotplan.BucketsTwoByte), 42, 512))
	require.Equal(t, "86400s/128/000000000000002a/+64", taskspec.PlanID(mustPlan(t, 24*time.Hour, slotplan.Buckets), 42, 64))

	for _, bad := range []string{"86400s/1024/2a/bx", "86400s/1024/2a/b65536/4", "86400s/1024/2a/b65536/+1/+2",
		"86400s/100/2a", "86400s/1024/2a/b65536/+1024", "17s/1/2a"} {
		_, err := taskspec.ParsePlanKey(bad)
		require.ErrorIs(t, err, taskspec.ErrPlanID, bad)
	}
	// Job args and ledger rows hold the plan id as text.
	var k taskspec.PlanKey
	require.NoError(t, k.UnmarshalText([]byte("86400s/128/000000000000002a/+64")))
	require.Equal(t, 64, k.Shift)
	require.NoError(t, k.Scan("86400s/1024/000000000000002a/b65536"))
	require.Equal(t, slotplan.BucketsTwoByte, k.Buckets)
	require.NoError(t, k.UnmarshalText(nil))
	require.True(t, k.IsZero(), "jobs made before plans were recorded")
}

func mustPlan(t *testing.T, cycle time.Duration, buckets int) slotplan.Plan {
	t.Helper()
	p, err := slotplan.NewBuckets(cycle, buckets)
	require.NoError(t, err)
	return p
}

// TestForPlanBuckets: a job made under a plan of the other bucket count runs
// with that plan's slots and that plan's bucket expression, both ways.
func TestForPlanBuckets(t *testing.T) {
	t.Parallel()

	coarse := riverslottest.Spec(t, "t", "s", "accounts", "", 64*time.Second, 100)
	fine := riverslottest.SpecBuckets(t, "t", "s", "accounts", "", 64*time.Second, 100, slotplan.BucketsTwoByte)
	require.NotEqual(t, coarse.PlanID, fine.PlanID)
	require.Contains(t, fine.SQL.FirstPage, sqlbucket.SlotPredicateFor("id", slotplan.BucketsTwoByte, 1, 2))
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

	got, err := coarse.ForPlan(fine.Key, start)
	require.NoError(t, err)
	require.Equal(t, fine.Plan, got.Plan)
	require.Equal(t, fine.SQL, got.SQL)
	require.Equal(t, 512, got.Plan.Slots)

	got, err = fine.ForPlan(coarse.Key, start)
	require.NoError(t, err)
	require.Equal(t, coarse.Plan, got.Plan)
	require.Equal(t, coarse.SQL, got.SQL)
	require.False(t, strings.Contains(got.SQL.FirstPage, ", 14)"), got.SQL.FirstPage)

	_, err = taskspec.ParsePlanKey("64s/64/000000000000002a/b65536")
	require.ErrorContains(t, err, "a 1m4s cycle of 65536 buckets has 512 slots, not 64")
	_, err = fine.ForPlan(taskspec.PlanKey{Cycle: 64 * time.Second, Slots: 64, Buckets: 65536, Seed: 42}, start)
	require.ErrorContains(t, err, "a 1m4s cycle of 65536 buckets has 512 slots, not 64")
}

// TestPlanTag checks that every form of plan id survives the round trip
// through a River tag, and that the tag is one River accepts (word
// characters and '-', at most 255 characters).
func TestPlanTag(t *testing.T) {
	t.Parallel()

	riverTag := regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)
	day, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	fine, err := slotplan.NewBuckets(16*time.Second, 65536)
	require.NoError(t, err)
	for _, id := range []string{
		taskspec.PlanID(day, 0x0123456789abcdef, 0),
		taskspec.PlanID(day, ^uint64(0), 127),
		taskspec.PlanID(fine, 1, 15),
		taskspec.PlanID(fine, 0xa0, 0),
	} {
		tag := taskspec.PlanTag(id)
		require.Regexp(t, riverTag, tag)
		require.LessOrEqual(t, len(tag), 255)
		got, ok, err := taskspec.PlanFromTags([]string{"app", tag, "other"})
		require.NoError(t, err)
		require.True(t, ok, id)
		require.Equal(t, id, got.String())
	}
	_, ok, err := taskspec.PlanFromTags([]string{"app"})
	require.NoError(t, err)
	require.False(t, ok)
	_, ok, err = taskspec.PlanFromTags([]string{taskspec.PlanTag("120s_9_00")})
	require.True(t, ok)
	require.Error(t, err, "a tag that names no plan")
}
