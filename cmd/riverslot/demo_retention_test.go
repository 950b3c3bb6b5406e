package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoShortRetention runs the demo for two 48 s cycles (16 slots of
// 3 s) with River keeping completed jobs for one second: River's cleaner
// (every 30 s from the client's start, 11 s before the first cycle) deletes
// the first cycle's jobs during the second, yet every cycle reports each
// account synced once, none missed or duplicated (from the demo's record of
// its syncs), the run finishes (the last cycle's fan-outs are read from the
// ledger), and max_river_job_rows stays below the two cycles' syncs. (A
// sync skipped as stale whose job River deleted would count as missed: 48 s
// cycles leave a busy machine 24 s of lateness before that; with 32 s
// cycles a make test run with three packages at once lost 7 of 600 so.)
// It is also the test of --cycles: consecutive cycle starts one cycle
// apart, each cycle reported on its own.
func TestDemoShortRetention(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := newDemoSchemaName(t, pool)
	const (
		accounts = 300
		cycle    = 48 * time.Second
	)
	code, stdout, stderr := runCmd(t, "demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--accounts", fmt.Sprint(accounts), "--cycle", cycle.String(), "--cycles", "2", "--workers", "10", "--completed-retention", "1s", "--json")
	require.Equal(t, 0, code, "stderr:\n%s", stderr)

	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), stdout)
	require.Contains(t, raw, "max_river_job_rows")
	var s demo.Summary
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.InDelta(t, 1.0, s.CompletedRetentionSeconds, 1e-9)
	require.Len(t, s.PerCycle, 2)
	require.Len(t, s.CycleStarts, 2)
	first, err := time.Parse(time.RFC3339, s.CycleStarts[0])
	require.NoError(t, err)
	second, err := time.Parse(time.RFC3339, s.CycleStarts[1])
	require.NoError(t, err)
	require.Equal(t, cycle, second.Sub(first), "consecutive cycles")
	require.EqualValues(t, 2*accounts, s.Synced, "synced counts account-cycles")
	for i, c := range s.PerCycle {
		require.EqualValues(t, accounts, c.Accounts, "cycle %d", i+1)
		require.EqualValues(t, accounts, c.Synced, "cycle %d: every account synced once", i+1)
		require.Zero(t, c.Missed, "cycle %d", i+1)
		require.Zero(t, c.Duplicates, "cycle %d", i+1)
	}
	require.EqualValues(t, 16, s.Slots)

	// River really deleted jobs during the run: the first cycle's sync
	// jobs are (at least partly) gone, and river_job never held both
	// cycles' syncs at once.
	var kept int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", syncjob.Kind, s.CycleStarts[0]).Scan(&kept))
	require.Less(t, kept, int64(accounts), "River's cleaner deleted cycle 1's completed sync jobs")
	require.GreaterOrEqual(t, s.MaxRiverJobRows, int64(accounts)/2)
	require.Less(t, s.MaxRiverJobRows, int64(2*accounts), "river_job never held the whole run")
	t.Logf("max_river_job_rows %d; cycle 1 sync jobs left %d of %d", s.MaxRiverJobRows, kept, accounts)
}

// TestDemoDefaultsWithinRowBudget: `make demo` (the demo's defaults) keeps
// River's job table under the row budget Check warns above, so a new
// user's first run prints no RowBudget warning (with River's 24 h
// retention it would keep about 7.2 million rows).
func TestDemoDefaultsWithinRowBudget(t *testing.T) {
	t.Parallel()
	o, err := parseDemoFlags(nil, io.Discard)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects: New needs no database
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{Name: "demo", Cycle: o.Cycle, Table: "accounts",
		Sync: func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }}}})
	require.NoError(t, err)
	info, err := s.Task("demo")
	require.NoError(t, err)
	rows := riverslot.RowBudget(int64(o.Accounts), info, o.CompletedRetention)
	require.LessOrEqual(t, rows, int64(riverslot.RowBudgetWarn), "the demo's defaults keep %d rows", rows)
	require.Greater(t, riverslot.RowBudget(int64(o.Accounts), info, 24*time.Hour), int64(riverslot.RowBudgetWarn), "River's default retention would warn")
}

// TestDemoWorkersSizedForTheFleet: without --workers the demo's queue gets
// enough workers to start a cycle's syncs (accounts / cycle a second, both
// tasks' with --reciprocal) at no more than 70% of the 10 starts a second
// per worker River's fetch cooldown allows, and never fewer than 50; an
// explicit --workers is kept.
func TestDemoWorkersSizedForTheFleet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		tasks int
	}{
		{nil, 1},
		{[]string{"--accounts", "250000", "--cycle", "240s"}, 1},
		{[]string{"--accounts", "250000", "--cycle", "240s", "--reciprocal"}, 2},
		{[]string{"--accounts", "1000000", "--cycle", "64s"}, 1},
	} {
		o, err := parseDemoFlags(tc.args, io.Discard)
		require.NoError(t, err)
		need := float64(tc.tasks*o.Accounts) / o.Cycle.Seconds()
		require.GreaterOrEqual(t, o.Workers, 50, "%v", tc.args)
		require.GreaterOrEqual(t, 0.7*float64(o.Workers*riverslot.FetchRatePerWorker), need, "%v: %d workers for %.0f starts a second", tc.args, o.Workers, need)
		if o.Workers > 50 {
			require.Less(t, 0.7*float64((o.Workers-1)*riverslot.FetchRatePerWorker), need, "%v: %d workers, one fewer would do", tc.args, o.Workers)
		}
	}
	o, err := parseDemoFlags([]string{"--accounts", "250000", "--cycle", "240s", "--workers", "10"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 10, o.Workers)

	// A fleet no single queue can start in time: capped, and said.
	var stderr strings.Builder
	o, err = parseDemoFlags([]string{"--accounts", "10000000", "--cycle", "16s"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, river.QueueNumWorkersMax, o.Workers)
	require.Contains(t, stderr.String(), "more than River's 10000 per queue")
}
