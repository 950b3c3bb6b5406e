package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

// TestPlanMonthly: plan --cycle monthly prints the month's days as its
// slots (a 23-hour day where London springs forward) and the account's
// next calls, one in each month, each on the day and in the bucket range
// the table gives, at the same fraction of every month; bad flags exit 2
// naming the flag.
func TestPlanMonthly(t *testing.T) {
	t.Parallel()
	const account = "0b6e4f2a-8c1d-4f5e-9a7b-3c2d1e0f9a8b"
	code, out, stderr := runCmd(t, "plan", "--cycle", "monthly", "--location", "Europe/London", "--now", "2027-03-10T12:00:00Z", "--account", account, "--months", "4")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "month          2027-03: 31 days, 743h0m0s")
	rows := regexp.MustCompile(`(?m)^(\d+)\s+\w{3} \d\d\s+(\S+)\s+(\S+)\s+(\d+)-(\d+)$`).FindAllStringSubmatch(out, -1)
	require.Len(t, rows, 31)
	require.Equal(t, "23h0m0s", rows[27][3], "Sunday 28 March 2027 is 23 hours long in London")
	require.Equal(t, "0", rows[0][4])
	require.Equal(t, "65535", rows[30][5])

	id := uuid.MustParse(account)
	bucket := slotplan.BucketOf(id, slotplan.BucketsTwoByte)
	calls := regexp.MustCompile(`(?m)^  (\d{4}-\d\d)\s+(\S+)\s+slot (\d+) \(day \d+ of (\d+)\)`).FindAllStringSubmatch(out, -1)
	require.Len(t, calls, 4)
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	var fraction float64
	for i, c := range calls {
		due, err := time.Parse(time.RFC3339, c[2])
		require.NoError(t, err)
		monthStart := time.Date(2027, time.March+time.Month(i), 1, 0, 0, 0, 0, london)
		next := time.Date(2027, time.April+time.Month(i), 1, 0, 0, 0, 0, london)
		require.Equal(t, monthStart.Format("2006-01"), c[1])
		require.True(t, !due.Before(monthStart) && due.Before(next), "%s is in %s", due, c[1])
		f := float64(due.Sub(monthStart)) / float64(next.Sub(monthStart))
		if i == 0 {
			fraction = f
			// This month's slot row holds the call and the account's bucket.
			row := rows[mustAtoi(t, c[3])]
			start, err := time.Parse(time.RFC3339, row[2])
			require.NoError(t, err)
			require.False(t, due.Before(start))
			require.True(t, bucket >= mustAtoi(t, row[4]) && bucket <= mustAtoi(t, row[5]), "bucket %d in the day's range %s-%s", bucket, row[4], row[5])
		}
		require.InDelta(t, fraction, f, 1e-6, "the same place in every month")
		require.Equal(t, time.Date(2027, time.April+time.Month(i), 0, 12, 0, 0, 0, time.UTC).Day(), mustAtoi(t, c[4]))
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--location", "Mars/Base"}, "--location must be an IANA time zone"},
		{[]string{"--account", "nope"}, "--account must be a UUID"},
		{[]string{"--months", "0"}, "--months must be between 1 and 120"},
		{[]string{"--now", "yesterday"}, "--now must be RFC 3339"},
	} {
		code, _, stderr := runCmd(t, append([]string{"plan", "--cycle=monthly"}, tt.args...)...)
		require.Equal(t, 2, code, strings.Join(tt.args, " "))
		require.Contains(t, stderr, tt.want)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
