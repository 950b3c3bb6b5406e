package bench

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestScaleBench runs `riverslot bench --only scale` end to end at a small
// size (20,000 accounts; a compressed run of 2,000 accounts over one 16 s
// cycle) and checks its table: every step present once, with the row
// counts each must have and a measured time and peak RSS.
func TestScaleBench(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, k = 20_000, 2_000
	var out, log bytes.Buffer
	r := New(Config{
		Pool: riverslottest.Pool(t), Out: &out, Log: &log, BatchSize: 500, Only: map[string]bool{"scale": true},
		ScaleAccounts: n, ScaleRunAccounts: k, ScaleRunCycle: 16 * time.Second, ScaleRunRetention: time.Minute,
	})
	require.NoError(t, r.Run(ctx), "log:\n%s", log.String())
	t.Logf("table:\n%s", out.String())

	rows := r.ScaleRows()
	want := []string{"seed accounts", "CreateIndexes", "bootstrap, plain", "weight census, weighted (", "bootstrap, weighted", "bootstrap, Buckets 65536",
		"one slot's fan-out at 1,024 slots", "StatusAt", "StatusAt", "compressed run"}
	require.Len(t, rows, len(want))
	for i, s := range rows {
		require.Contains(t, s.Step, want[i], "row %d", i)
		require.Positive(t, s.Time, "row %d (%s): time", i, s.Step)
		require.Positive(t, s.PeakRSS, "row %d (%s): peak RSS", i, s.Step)
		// A sanity bound, not a measurement: the test binary runs under the
		// race detector (its shadow memory took one make test run to 1.7 GiB).
		require.Less(t, s.PeakRSS, int64(4<<30), "row %d (%s): peak RSS", i, s.Step)
		require.Contains(t, out.String(), "| "+s.Step+" |")
	}
	require.EqualValues(t, n, rows[0].Rows)
	require.EqualValues(t, 128, rows[2].Rows)
	require.EqualValues(t, n, rows[3].Rows, "the census counts every account once")
	require.EqualValues(t, 128, rows[4].Rows)
	require.Regexp(t, `; [1-9][0-9]* accounts pinned`, rows[4].Notes) // Pareto(1.5) over 20k: some accounts outweigh a slot's share
	require.EqualValues(t, 1024, rows[5].Rows)
	// About n/1024 accounts in one slot: a binomial count, far from 0 and
	// from n.
	require.Positive(t, rows[6].Rows)
	require.Less(t, rows[6].Rows, int64(60))
	require.Contains(t, rows[7].Notes, "1024 slots, 1 done")
	require.Contains(t, rows[7].Notes, "20000 expected")
	run := rows[9]
	require.Equal(t, k, run.Accounts)
	require.Greater(t, run.Rows, int64(0))
	require.LessOrEqual(t, run.Rows, int64(k+16+2), "river_job can hold at most the cycle's sync, per-slot and bootstrap jobs")
	// The step measures river_job's rows, not lateness: with 1 s slots a
	// busy machine starts many syncs more than half the 16 s cycle late,
	// and they complete as stale (a make test run with three test packages
	// at once: 461 of 2,000 synced). The run itself fails on a duplicate
	// or on an account neither synced nor skipped; here some syncs ran.
	if !strings.Contains(run.Notes, "every account synced once") {
		m := regexp.MustCompile(`(\d+) accounts synced once, (\d+) not synced`).FindStringSubmatch(run.Notes)
		require.NotNil(t, m, run.Notes)
		synced, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Positive(t, synced, run.Notes)
	}
	require.Equal(t, 1, strings.Count(out.String(), "| step | accounts |"))
}
