package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

func TestSimulateJSON(t *testing.T) {
	// Not parallel: the simulations are CPU-bound and would starve the
	// demo tests' real cycles; sequential tests run before the parallel ones.

	code, stdout, stderr := runCmd(t, "simulate", "--accounts", "5000", "--cycle", "120s", "--cycles", "2", "--strategy", "naive,lrs,riverslot", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Results, 3)
	for i, name := range []string{"naive", "lrs", "riverslot"} {
		r := out.Results[i]
		require.Equal(t, name, r["strategy"])
		for _, key := range []string{"accounts", "cycle_seconds", "slots", "simulated_seconds", "wall_seconds", "jobs_completed",
			"peak_queue_depth", "mean_queue_depth", "lateness_p50_seconds", "lateness_p99_seconds", "max_starts_per_second", "worker_utilization"} {
			require.Contains(t, r, key, "%s result", name)
		}
		require.EqualValues(t, 5000, r["accounts"])
		require.EqualValues(t, 120, r["cycle_seconds"])
		require.EqualValues(t, 8, r["slots"])
		require.EqualValues(t, 240, r["simulated_seconds"])
	}
	// Two cycles of riverslot: every account twice.
	require.EqualValues(t, 10000, out.Results[2]["jobs_completed"])
}

// Same flags, same output: JSON (but wall_seconds) and every file in --out.
func TestSimulateDeterministicOutputs(t *testing.T) {
	// Not parallel: the simulations are CPU-bound and would starve the
	// demo tests' real cycles; sequential tests run before the parallel ones.

	var outs []string
	var dirs []string
	for range 2 {
		dir := filepath.Join(t.TempDir(), "out")
		code, stdout, stderr := runCmd(t, "simulate", "--accounts", "3000", "--cycle", "64s", "--duration", "300s", "--strategy", "naive,lrs,riverslot",
			"--sync-duration", "lognormal:20ms,300ms", "--fail-rate", "0.05", "--churn", "0.01", "--outage", "100s+30s", "--seed", "9", "--out", dir, "--json")
		require.Equal(t, 0, code, stderr)
		var v struct{ Results []map[string]any }
		require.NoError(t, json.Unmarshal([]byte(stdout), &v))
		for _, r := range v.Results {
			delete(r, "wall_seconds")
		}
		b, _ := json.Marshal(v)
		outs = append(outs, string(b))
		dirs = append(dirs, dir)
	}
	require.Equal(t, outs[0], outs[1])
	for _, f := range []string{"metrics.csv", "lateness.csv", "simulate.sqlite", "queue_depth.svg", "queue_depth.png", "starts.svg", "starts.png", "lateness.svg", "lateness.png"} {
		a, err := os.ReadFile(filepath.Join(dirs[0], f))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[1], f))
		require.NoError(t, err)
		require.True(t, bytes.Equal(a, b), "%s differs between two identical runs", f)
	}
}

// --out writes CSV whose rows the SQLite file holds too, and charts that
// parse as SVG and PNG.
func TestSimulateOut(t *testing.T) {
	// Not parallel: the simulations are CPU-bound and would starve the
	// demo tests' real cycles; sequential tests run before the parallel ones.

	dir := t.TempDir()
	code, _, stderr := runCmd(t, "simulate", "--accounts", "4000", "--cycle", "120s", "--strategy", "riverslot,naive", "--out", dir)
	require.Equal(t, 0, code, stderr)

	f, err := os.Open(filepath.Join(dir, "metrics.csv"))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Equal(t, "strategy", rows[0][0])
	require.Contains(t, rows[0], "pending")
	require.Greater(t, len(rows), 2*120) // 1 s rows over at least the cycle, per strategy

	db, err := sql.Open("sqlite", filepath.Join(dir, "simulate.sqlite"))
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), "SELECT count(*) FROM metrics").Scan(&n))
	require.Equal(t, len(rows)-1, n)
	var peak, synced int64
	require.NoError(t, db.QueryRowContext(context.Background(),
		"SELECT peak_queue_depth, jobs_completed FROM results WHERE strategy = 'naive'").Scan(&peak, &synced))
	require.Equal(t, int64(4000), peak) // naive inserts every account at once
	require.Equal(t, int64(4000), synced)
	var maxPending int64
	require.NoError(t, db.QueryRowContext(context.Background(),
		"SELECT max(pending) FROM metrics WHERE strategy = 'riverslot'").Scan(&maxPending))
	require.Positive(t, maxPending)
	require.Less(t, maxPending, int64(4000/2)) // a slot and a half at most, not everyone

	for _, chart := range []string{"queue_depth", "starts", "lateness"} {
		svg, err := os.ReadFile(filepath.Join(dir, chart+".svg"))
		require.NoError(t, err)
		d := xml.NewDecoder(bytes.NewReader(svg))
		for {
			_, err := d.Token()
			if err != nil {
				require.Equal(t, "EOF", err.Error(), "%s.svg is not well-formed XML", chart)
				break
			}
		}
		require.Contains(t, string(svg), "riverslot", "%s.svg has a legend entry per strategy", chart)
		require.Contains(t, string(svg), "naive")
		p, err := os.Open(filepath.Join(dir, chart+".png"))
		require.NoError(t, err)
		_, err = png.Decode(p)
		p.Close()
		require.NoError(t, err, "%s.png", chart)
	}
}

func TestSimulateBadFlags(t *testing.T) {
	// Not parallel: the simulations are CPU-bound and would starve the
	// demo tests' real cycles; sequential tests run before the parallel ones.

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--accounts", "0"}, "--accounts must be between 1 and 100,000,000, got 0"},
		{[]string{"--cycle", "17s"}, "--cycle: invalid cycle"},
		{[]string{"--cycle", "8s"}, "--cycle must be at least 16s, got 8s"},
		{[]string{"--workers", "0"}, "--workers must be between 1 and 10000"},
		{[]string{"--strategy", "fifo"}, `--strategy: unknown strategy "fifo": use naive, lrs and/or riverslot`},
		{[]string{"--sync-duration", "fast"}, `--sync-duration: "fast" is not a duration`},
		{[]string{"--sync-duration", "lognormal:2s,1s"}, "--sync-duration: \"lognormal:2s,1s\": want lognormal:A,B with 0 <= first <= second"},
		{[]string{"--fail-rate", "1"}, "--fail-rate must be in [0, 1), e.g. 0.05, got 1"},
		{[]string{"--churn", "-0.1"}, "--churn must be in [0, 1)"},
		{[]string{"--outage", "1h"}, `--outage: "1h" is not START+LENGTH`},
		{[]string{"--duration", "-1h"}, "--duration must be positive"},
		{[]string{"--cycle", "16s", "--duration", "48h"}, "--duration 48h0m0s is more than 10,000 cycles of 16s"},
		{[]string{"--interval", "100ms"}, "--interval must be at least 1s"},
		{[]string{"--task", "a b"}, "--task must be 1-64 letters"},
		{[]string{"--insert-rate", "0"}, "--insert-rate must be at least 1"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, stdout, stderr := runCmd(t, append([]string{"simulate"}, tt.args...)...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, "riverslot simulate")
		require.Contains(t, stderr, tt.want, "%v", tt.args)
		require.Empty(t, stdout)
	}
	// An --out that cannot be created: refused before the run.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	code, _, stderr := runCmd(t, "simulate", "--accounts", "100", "--out", filepath.Join(file, "sub"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "riverslot simulate: --out: cannot create the output directory")
}

// The table has no wall time: the same flags print the same bytes.
func TestSimulateTableDeterministic(t *testing.T) {
	// Not parallel: the simulations are CPU-bound and would starve the
	// demo tests' real cycles; sequential tests run before the parallel ones.

	args := []string{"simulate", "--accounts", "3000", "--cycle", "64s", "--cycles", "2", "--strategy", "lrs,riverslot", "--fail-rate", "0.1"}
	code, first, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, first, "riverslot")
	require.Contains(t, first, "failed attempts")
	code, second, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, second)
}

// simulate --buckets 65536 runs the task with two-byte buckets: a 64 s
// cycle has 512 slots (gcd(64000, 65536)) where 256 buckets give 64, every
// account is synced once, and fewer jobs wait at once.
func TestSimulateBuckets(t *testing.T) {
	// Not parallel: CPU-bound, see TestSimulateJSON.

	peaks := map[string]float64{}
	for _, tt := range []struct {
		buckets string
		slots   int
	}{{"256", 64}, {"65536", 512}} {
		code, stdout, stderr := runCmd(t, "simulate", "--accounts", "20000", "--cycle", "64s", "--buckets", tt.buckets, "--json")
		require.Equal(t, 0, code, stderr)
		var out struct {
			Results []map[string]any `json:"results"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		require.Len(t, out.Results, 1)
		require.EqualValues(t, tt.slots, out.Results[0]["slots"], "--buckets %s", tt.buckets)
		require.EqualValues(t, 20000, out.Results[0]["jobs_completed"])
		peaks[tt.buckets] = out.Results[0]["peak_queue_depth"].(float64)
	}
	require.Less(t, peaks["65536"], peaks["256"], "finer slots hold fewer pending jobs")

	code, stdout, stderr := runCmd(t, "simulate", "--buckets", "1024")
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "riverslot simulate: --buckets must be 256 or 65536 (Task.Buckets), got 1024")
}

// TestSimulateShards: --shards 4 simulates one shard, a quarter of the
// accounts with its own River, and reports the fleet as four alike: four
// times its syncs and mean starts, its own queue per database; a shard
// over the simulator's bound, and options it does not model, are refused.
func TestSimulateShards(t *testing.T) {
	// Not parallel: CPU-bound (see TestSimulateJSON).
	code, stdout, stderr := runCmd(t, "simulate", "--accounts", "20000", "--cycle", "120s", "--shards", "4", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		Results []map[string]any `json:"results"`
		Fleet   []map[string]any `json:"fleet"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Results, 1)
	require.Len(t, out.Fleet, 1)
	r, f := out.Results[0], out.Fleet[0]
	require.EqualValues(t, 5000, r["accounts"], "one shard's accounts")
	require.EqualValues(t, 5000, r["jobs_completed"], "one cycle: each of the shard's accounts once")
	require.EqualValues(t, 20000, f["accounts"])
	require.EqualValues(t, 20000, f["jobs_completed"])
	require.EqualValues(t, 4, f["shards"])
	require.Equal(t, r["peak_queue_depth"], f["peak_queue_depth_per_database"])
	require.InDelta(t, 4*r["mean_starts_per_second"].(float64), f["mean_starts_per_second"].(float64), 1e-9)

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "0"}, "--shards must be between 1 and 1024"},
		{[]string{"--shards", "2", "--reciprocal"}, "--shards models the plain task"},
		{[]string{"--accounts", "300000000", "--shards", "2"}, "is 150000000 a shard"},
		{[]string{"--accounts", "300000000"}, "--shards N simulates a larger fleet"},
	} {
		code, _, stderr := runCmd(t, append([]string{"simulate"}, tt.args...)...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, tt.args)
	}
}
