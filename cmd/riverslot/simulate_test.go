package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
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

// TestSimulateShards: --shards 4 simulates each of four shards on its own,
// an even share of the slots each: the shards' accounts add up to
// --accounts, each syncs its own once in the cycle, and the fleet's figures
// are the shards' merged.
func TestSimulateShards(t *testing.T) {
	// Not parallel: CPU-bound (see TestSimulateJSON).
	code, stdout, stderr := runCmd(t, "simulate", "--accounts", "20000", "--cycle", "120s", "--shards", "4", "--json")
	require.Equal(t, 0, code, stderr)
	var out simulateShardsJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Shards, 4)
	require.Len(t, out.Fleet, 1)
	var accounts, peakSum, peakMax int64
	for i, sh := range out.Shards {
		require.Equal(t, fmt.Sprintf("s%d", i+1), sh.Shard)
		require.Equal(t, 2, sh.Slots, "8 slots over 4 shards")
		require.Equal(t, 16384, sh.Buckets)
		require.Equal(t, fmt.Sprintf("%d-%d", i*16384, (i+1)*16384-1), sh.Ranges)
		require.Len(t, sh.Results, 1)
		r := sh.Results[0]
		require.Equal(t, sh.Accounts, r.Accounts)
		require.EqualValues(t, sh.Accounts, r.JobsCompleted, "%s: each of its accounts once", sh.Shard)
		require.InEpsilon(t, 5000, sh.Accounts, 0.1)
		accounts += int64(sh.Accounts)
		peakSum += r.MaxStartsPerSecond
		peakMax = max(peakMax, r.MaxStartsPerSecond)
	}
	f := out.Fleet[0]
	require.EqualValues(t, 20000, accounts)
	require.EqualValues(t, 20000, f.Accounts)
	require.EqualValues(t, 20000, f.JobsCompleted)
	require.Equal(t, 4, f.Shards)
	require.True(t, f.MaxStartsPerSecondExact)
	require.LessOrEqual(t, f.MaxStartsPerSecond, peakSum)
	require.GreaterOrEqual(t, f.MaxStartsPerSecond, peakMax)

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "0"}, "--shards must be between 1 and 1024"},
		{[]string{"--shards", "2", "--reciprocal"}, "--shards models the plain task"},
		{[]string{"--accounts", "300000000", "--shards", "2"}, "--accounts 300000000 gives shard s1 about 150000000 accounts"},
		{[]string{"--accounts", "300000000"}, "--accounts must be between 1 and 100,000,000, got 300000000 (--shards N simulates a larger fleet"},
		{[]string{"--shards", "9"}, "--shards 9: a 2m0s cycle has 8 slots"},
		{[]string{"--shard-workers", "s1=2"}, "--shard-weights, --shard-workers, --shard-slowdown and --shard-down describe the shards of --shards N"},
		{[]string{"--shards", "3", "--shard-weights", "2,1"}, "--shard-weights: 2 values for 3 shards (s1, s2, s3)"},
		{[]string{"--shards", "3", "--shard-weights", "s2=-1"}, `--shard-weights: shard s2: weight "-1" must be a number above 0`},
		{[]string{"--shards", "8", "--shard-weights", "s1=100"}, "gets none of the 8 slots of a 2m0s cycle: raise its weight"},
		{[]string{"--shards", "3", "--shard-workers", "s4=2"}, `--shard-workers: no shard "s4": the shards are s1, s2, s3`},
		{[]string{"--shards", "3", "--shard-workers", "s2"}, `--shard-workers: "s2" must be NAME=VALUE`},
		{[]string{"--shards", "3", "--shard-workers", "s2=0"}, `--shard-workers: shard s2: workers "0" must be between 1 and 10000`},
		{[]string{"--shards", "3", "--shard-workers", "s2=4,s2=5"}, "--shard-workers: shard s2 is given twice"},
		{[]string{"--shards", "3", "--shard-slowdown", "s1=0"}, `--shard-slowdown: shard s1: slowdown "0" must be a factor above 0`},
		{[]string{"--shards", "3", "--shard-down", "s3:90s-30s"}, `--shard-down must be NAME:FROM-TO, FROM and TO durations after the first cycle start with 0 <= FROM < TO, e.g. s3:30s-90s, got "s3:90s-30s"`},
		{[]string{"--shards", "3", "--shard-down", "s3:3m-4m"}, "--shard-down s3:3m-4m: it starts at or after the end of the 2m0s simulated"},
		{[]string{"--shards", "3", "--shard-down", "s3:30s-40s", "--outage", "1m+1m"}, "--outage takes every shard down and --shard-down one: give one or the other"},
		{[]string{"--shard-map", "a:0-100/b:101-65535"}, `--shard-map: invalid shard map: range 0-100 of shard "a" does not fall on the slots of a 2m0s cycle (each spans 8192 buckets): move its bound 101 to 0 or 8192`},
		{[]string{"--shard-map", "a:0-8191"}, "--shard-map: invalid shard map: buckets 8192-65535 belong to no shard"},
		{[]string{"--shard-map", "a:0-8191/b:8192-65535", "--shards", "3"}, "--shards 3 and --shard-map's 2 shards (a, b) disagree"},
		{[]string{"--shard-map", "a:0-8191/b:8192-65535", "--shard-weights", "1,2"}, "--shard-map gives the map and --shard-weights makes one: give one or the other"},
	} {
		code, stdout, stderr := runCmd(t, append([]string{"simulate"}, tt.args...)...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, tt.args)
		require.Contains(t, stderr, "riverslot simulate: --", tt.args)
		require.Empty(t, stdout)
	}
}

// simulateShardsJSON is simulate --shards --json's output.
type simulateShardsJSON struct {
	Map struct {
		Ranges []struct {
			Shard  string
			Lo, Hi int
		}
	}
	Shards []struct {
		Shard, Ranges, Down      string
		Buckets, Slots, Accounts int
		Workers                  int
		Slowdown                 float64
		Results                  []struct {
			Accounts           int
			JobsCompleted      int64   `json:"jobs_completed"`
			AccountsSkipped    int64   `json:"accounts_skipped"`
			MaxStartsPerSecond int64   `json:"max_starts_per_second"`
			P50                float64 `json:"lateness_p50_seconds"`
			P99                float64 `json:"lateness_p99_seconds"`
			Max                float64 `json:"lateness_max_seconds"`
		}
	}
	Fleet []struct {
		Shards                  int
		Accounts                int64
		JobsCompleted           int64 `json:"jobs_completed"`
		AccountsSkipped         int64 `json:"accounts_skipped"`
		MaxStartsPerSecond      int64 `json:"max_starts_per_second"`
		MaxStartsPerSecondExact bool  `json:"max_starts_per_second_exact"`
	}
}

// An uneven, slow and failing fleet: --shard-weights 2,1,1 gives s1 half
// the buckets (the map's own ranges say so) and about twice the accounts
// of each other shard; the shard with 2 workers starts its syncs later
// than the others; the shard down 80-100 s starts some late; the table is
// the same for the same flags, and --out writes each shard's files.
func TestSimulateShardFlags(t *testing.T) {
	// Not parallel: CPU-bound (see TestSimulateJSON).
	args := []string{"simulate", "--accounts", "12000", "--cycle", "120s", "--shards", "3", "--shard-weights", "2,1,1",
		"--shard-workers", "s2=2", "--shard-slowdown", "s2=2", "--sync-duration", "100ms", "--shard-down", "s3:95s-115s"}
	code, stdout, stderr := runCmd(t, append(args, "--json")...)
	require.Equal(t, 0, code, stderr)
	var out simulateShardsJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Shards, 3)
	buckets := map[string]int{}
	for _, r := range out.Map.Ranges {
		buckets[r.Shard] += r.Hi - r.Lo + 1
	}
	require.Equal(t, map[string]int{"s1": 32768, "s2": 16384, "s3": 16384}, buckets)
	s1, s2, s3 := out.Shards[0], out.Shards[1], out.Shards[2]
	require.Equal(t, 32768, s1.Buckets)
	require.Equal(t, 4, s1.Slots)
	require.InEpsilon(t, 2.0, float64(s1.Accounts)/float64(s2.Accounts), 0.1)
	require.InEpsilon(t, 2.0, float64(s1.Accounts)/float64(s3.Accounts), 0.1)
	require.Equal(t, 12000, s1.Accounts+s2.Accounts+s3.Accounts)
	require.Equal(t, 2, s2.Workers)
	require.Equal(t, 2.0, s2.Slowdown)
	require.Equal(t, 50, s1.Workers)
	require.Equal(t, "1m35s-1m55s", s3.Down)
	require.Empty(t, s1.Down)
	r1, r2, r3 := s1.Results[0], s2.Results[0], s3.Results[0]
	require.Greater(t, r2.P50, 10*r1.P99, "the slow shard's syncs start later")
	require.Less(t, r1.Max, 0.3)
	require.Greater(t, r3.Max, 15.0, "s3 serves 90-120 s: a sync due at 95 s waits for 115 s")
	require.EqualValues(t, 12000, out.Fleet[0].JobsCompleted+out.Fleet[0].AccountsSkipped)

	code, first, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, first, "12000 accounts over 3 shards")
	require.Contains(t, first, "shard map: v1 s1:0-24575,40960-49151 s2:24576-40959 s3:49152-65535")
	require.Contains(t, first, "all 3 shards")
	require.Contains(t, first, "note: shard s2: 2 workers")
	code, second, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, first, second)

	// --shard-map gives the map itself; --out a directory per shard.
	dir := t.TempDir()
	code, stdout, stderr = runCmd(t, "simulate", "--accounts", "3000", "--cycle", "120s", "--shard-map", "eu:0-8191/us:8192-65535", "--json", "--out", dir)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	require.Len(t, out.Shards, 2)
	require.Equal(t, "eu", out.Shards[0].Shard)
	require.Equal(t, 1, out.Shards[0].Slots)
	require.Equal(t, 7, out.Shards[1].Slots)
	for _, shard := range []string{"eu", "us"} {
		rows, err := os.ReadFile(filepath.Join(dir, shard, "metrics.csv"))
		require.NoError(t, err)
		require.Contains(t, string(rows), "riverslot", shard)
	}
}
