package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

func runShards(t *testing.T, cfg Config, fleet Fleet) *FleetRun {
	t.Helper()
	out, err := RunShards(context.Background(), cfg, fleet)
	require.NoError(t, err)
	for _, sh := range out.Shards {
		for _, r := range sh.Results {
			r.WallSeconds = 0
		}
	}
	return out
}

// shardMap is the map of the ranges given.
func shardMap(ranges ...slotplan.ShardRange) slotplan.ShardMap {
	return slotplan.ShardMap{Ranges: ranges}
}

// evenThree is the map riverslot demo --shards gives 3 shards on a 120 s
// cycle (8 slots of 8,192 two-byte buckets): s1 slots 0-1, s2 2-4, s3 5-7.
var evenThree = shardMap(
	slotplan.ShardRange{Shard: "s1", Lo: 0, Hi: 16383},
	slotplan.ShardRange{Shard: "s2", Lo: 16384, Hi: 40959},
	slotplan.ShardRange{Shard: "s3", Lo: 40960, Hi: 65535},
)

func threeShards(shards ...Shard) []Shard {
	out := []Shard{{Name: "s1"}, {Name: "s2"}, {Name: "s3"}}
	for _, sh := range shards {
		for i := range out {
			if out[i].Name == sh.Name {
				out[i] = sh
			}
		}
	}
	return out
}

// Each shard simulates the accounts of the fleet whose two-byte bucket its
// ranges hold (counted here from the fleet and the ranges, not through
// the map's methods), syncs each once in a cycle, and only in its own
// slots; an uneven map gives proportionally more accounts; the fleet's
// syncs are the sum.
func TestShardsAccountsFollowTheMap(t *testing.T) {
	t.Parallel()
	const accounts, seed = 12000, 5
	cycle := 120 * time.Second // 8 slots of 15 s
	m := shardMap(
		slotplan.ShardRange{Shard: "s1", Lo: 0, Hi: 32767}, // half the buckets, slots 0-3
		slotplan.ShardRange{Shard: "s2", Lo: 32768, Hi: 49151},
		slotplan.ShardRange{Shard: "s3", Lo: 49152, Hi: 65535},
	)
	out := runShards(t, Config{Accounts: accounts, Cycle: cycle, Seed: seed, Interval: 15 * time.Second}, Fleet{Map: m, Shards: threeShards()})

	plan, err := slotplan.New(cycle)
	require.NoError(t, err)
	want := map[string]int{}
	for _, a := range newFleet(accounts, seed, plan) {
		b := int(a.id[15])*256 + int(a.id[14])
		for _, r := range m.Ranges {
			if b >= r.Lo && b <= r.Hi {
				want[r.Shard]++
			}
		}
	}
	require.Len(t, out.Shards, 3)
	wantSlots := map[string]int{"s1": 4, "s2": 2, "s3": 2}
	for _, sh := range out.Shards {
		require.Equal(t, want[sh.Shard], sh.Accounts, sh.Shard)
		require.Equal(t, wantSlots[sh.Shard], sh.Slots, sh.Shard)
		r := sh.Results[0]
		require.Equal(t, want[sh.Shard], r.Accounts, sh.Shard)
		require.EqualValues(t, want[sh.Shard], r.JobsCompleted, "%s: each of its accounts once", sh.Shard)
		require.Zero(t, r.AccountsSkipped)
	}
	s1, s2, s3 := out.Shards[0], out.Shards[1], out.Shards[2]
	require.Equal(t, "0-32767", s1.Ranges)
	require.Equal(t, 32768, s1.Buckets)
	require.InEpsilon(t, 2.0, float64(s1.Accounts)/float64(s2.Accounts), 0.1, "twice the buckets, twice the accounts")
	require.InEpsilon(t, 2.0, float64(s1.Accounts)/float64(s3.Accounts), 0.1)

	// s2 serves slots 4-5 (60-90 s): rows are 15 s wide, row i covering
	// (15(i-1), 15i]; a start a few hundred ms late may fall into 90-105 s.
	var inSlots int64
	for _, row := range s2.Results[0].Rows {
		switch {
		case row.T <= 60 || row.T >= 120:
			require.Zero(t, row.Starts, "s2 started syncs in the row ending at %gs, not its slots", row.T)
		default:
			inSlots += row.Starts
		}
	}
	require.EqualValues(t, s2.Accounts, inSlots)

	f := out.Fleet[0]
	require.EqualValues(t, accounts, f.Accounts)
	require.EqualValues(t, accounts, f.JobsCompleted)
	require.Equal(t, 3, f.Shards)
	require.Equal(t, "s1", f.PeakQueueShard, "the shard of the most accounts")
	require.Equal(t, s1.Results[0].PeakQueueDepth, f.PeakQueuePerDatabase)
	require.True(t, f.MaxStartsPerSecondExact)
}

// A fleet of one shard owning every bucket is the run without shards:
// the same accounts, draws and figures, merged or not.
func TestShardsOneShardIsTheRun(t *testing.T) {
	t.Parallel()
	cfg := Config{Accounts: 6000, Cycle: 64 * time.Second, Duration: 150 * time.Second, Seed: 3, Churn: 0.05, FailRate: 0.05,
		Strategies: []Strategy{StrategyNaive, StrategyRiverslot}}
	want := run(t, cfg)
	out := runShards(t, cfg, Fleet{Map: shardMap(slotplan.ShardRange{Shard: "only", Lo: 0, Hi: 65535}), Shards: []Shard{{Name: "only"}}})
	for k, w := range want {
		got := out.Shards[0].Results[k]
		w.WallSeconds = 0
		got.merge = nil
		require.Equal(t, w, got, w.Strategy)
		f := out.Fleet[k]
		require.Equal(t, w.JobsCompleted, f.JobsCompleted)
		require.Equal(t, w.PeakQueueDepth, f.PeakQueuePerDatabase)
		require.Equal(t, w.MaxStartsPerSecond, f.MaxStartsPerSecond, "%s: the series' busiest second is the run's", w.Strategy)
		require.Equal(t, w.LatenessP99Seconds, f.LatenessP99Seconds)
		require.Equal(t, w.GapP50Seconds, f.GapP50Seconds)
		require.InDelta(t, w.MeanStartsPerSecond, f.MeanStartsPerSecond, 1e-9)
		require.InDelta(t, w.WorkerUtilization, f.WorkerUtilization, 1e-12)
	}
}

// A shard down for a while starts nothing while it is down; when it comes
// back its syncs run late, or are skipped when more than half a cycle
// late. The other shards run exactly as they do without the outage.
func TestShardsDown(t *testing.T) {
	t.Parallel()
	cfg := Config{Accounts: 9000, Cycle: 120 * time.Second, Interval: 5 * time.Second}
	base := runShards(t, cfg, Fleet{Map: evenThree, Shards: threeShards()})
	for _, sh := range base.Shards {
		require.Less(t, sh.Results[0].LatenessMaxSeconds, 0.3, sh.Shard)
	}

	// s3 serves 75-120 s: down 80-100 s, the syncs of slot 5 (75-90 s),
	// queued before, wait for 100 s; later slots fan out late, placed by
	// the task's late policy.
	out := runShards(t, cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s3", Down: &Outage{Start: 80 * time.Second, Length: 20 * time.Second}})})
	s3 := out.Shards[2]
	require.Equal(t, "1m20s-1m40s", s3.Down)
	r := s3.Results[0]
	for _, row := range r.Rows {
		if row.T > 81 && row.T <= 100 {
			require.Zero(t, row.Starts, "s3 started syncs in the row ending at %gs, while down", row.T)
		}
	}
	require.Greater(t, r.LatenessMaxSeconds, 19.0, "a sync due at 80 s waits for 100 s")
	require.EqualValues(t, s3.Accounts, r.JobsCompleted+r.AccountsSkipped)
	for i := range 2 {
		require.Equal(t, base.Shards[i], out.Shards[i], "%s is not affected by s3's outage", out.Shards[i].Shard)
	}
	require.Greater(t, out.Fleet[0].LatenessMaxSeconds, 20.0)

	// s1 serves 0-30 s: down 5-100 s, its slot 1 fans out at 100 s, 70 s
	// late and more: stale, skipped.
	out = runShards(t, cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s1", Down: &Outage{Start: 5 * time.Second, Length: 95 * time.Second}})})
	s1 := out.Shards[0].Results[0]
	require.Positive(t, s1.AccountsSkipped)
	require.EqualValues(t, out.Shards[0].Accounts, s1.JobsCompleted+s1.AccountsSkipped)
	for i := 1; i < 3; i++ {
		require.Equal(t, base.Shards[i], out.Shards[i], "%s is not affected by s1's outage", out.Shards[i].Shard)
	}
	f := out.Fleet[0]
	require.Equal(t, s1.AccountsSkipped, f.AccountsSkipped)
	require.EqualValues(t, 9000, f.JobsCompleted+f.AccountsSkipped)
}

// A slower shard, with fewer workers or slower syncs and River, starts its
// syncs later than the others; the others are as fast as ever.
func TestShardsSlower(t *testing.T) {
	t.Parallel()
	// s2 serves 2,250 accounts over its 45 s of slots, 50 a second; 2
	// workers of 100 ms syncs start 20.
	cfg := Config{Accounts: 6000, Cycle: 120 * time.Second, SyncDuration: Dist{Kind: "fixed", A: 100 * time.Millisecond}}
	out := runShards(t, cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s2", Workers: 2})})
	s1, s2, s3 := out.Shards[0].Results[0], out.Shards[1].Results[0], out.Shards[2].Results[0]
	require.Equal(t, 2, s2.Workers)
	require.Equal(t, 50, s1.Workers)
	require.Greater(t, s2.LatenessP50Seconds, 10.0)
	require.Less(t, max(s1.LatenessP99Seconds, s3.LatenessP99Seconds), 0.3)
	require.EqualValues(t, out.Shards[1].Accounts, s2.JobsCompleted, "the backlog drains after the cycle")

	// s3, as many workers, ten times as slow: its 200 ms syncs take 2 s,
	// 50 workers start 25 a second of the 50 it needs.
	cfg.SyncDuration.A = 200 * time.Millisecond
	out = runShards(t, cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s3", Slowdown: 10})})
	s1, s2, s3 = out.Shards[0].Results[0], out.Shards[1].Results[0], out.Shards[2].Results[0]
	require.Equal(t, 10.0, out.Shards[2].Slowdown)
	require.Greater(t, s3.LatenessP50Seconds, 10.0)
	require.Greater(t, s3.WorkerUtilization, 2*s2.WorkerUtilization)
	require.Less(t, max(s1.LatenessP99Seconds, s2.LatenessP99Seconds), 0.3)
	require.Greater(t, out.Fleet[0].LatenessP99Seconds, 10.0)
}

// The fleet's busiest second adds the shards' starts second by second:
// two shards whose peaks do not coincide have a fleet peak below the sum
// of theirs. Lateness is over every shard's syncs.
func TestFleetMerge(t *testing.T) {
	t.Parallel()
	shard := func(name string, perSecond []uint32, peak int64, late time.Duration, all bool) ShardResult {
		var h hist
		for range 100 {
			h.add(int64(late))
		}
		var starts int64
		for _, c := range perSecond {
			starts += int64(c)
		}
		return ShardResult{Shard: name, Results: []*Result{{Accounts: 10, Workers: 5, MaxStartsPerSecond: peak, WorkerUtilization: 0.5,
			merge: &mergeable{late: &h, gaps: &hist{}, starts: starts, first: 0, last: int64(len(perSecond)) * int64(time.Second), perSecond: perSecond, perSecondAll: all}}}}
	}
	a := shard("a", []uint32{5, 1, 0, 2}, 5, time.Second, true)
	b := shard("b", []uint32{1, 5, 2}, 5, 3*time.Second, true)
	f := mergeFleet(StrategyRiverslot, 0, []ShardResult{a, b})
	require.True(t, f.MaxStartsPerSecondExact)
	require.EqualValues(t, 6, f.MaxStartsPerSecond)
	require.EqualValues(t, 20, f.Accounts)
	require.InDelta(t, 16.0/4, f.MeanStartsPerSecond, 1e-9)
	require.InDelta(t, 0.5, f.WorkerUtilization, 1e-12)
	require.InEpsilon(t, 1.0, f.LatenessP50Seconds, 0.01)
	require.InEpsilon(t, 3.0, f.LatenessP99Seconds, 0.01)

	// A series cut at its bound: the peaks added up, an upper bound.
	b = shard("b", []uint32{1, 5, 2}, 5, 3*time.Second, false)
	f = mergeFleet(StrategyRiverslot, 0, []ShardResult{a, b})
	require.False(t, f.MaxStartsPerSecondExact)
	require.EqualValues(t, 10, f.MaxStartsPerSecond)
}

// The same Config and Fleet give the same results; another seed other
// accounts.
func TestShardsDeterministic(t *testing.T) {
	t.Parallel()
	cfg := Config{Accounts: 5000, Cycle: 64 * time.Second, Duration: 150 * time.Second, Seed: 8, Churn: 0.02, FailRate: 0.05,
		SyncDuration: Dist{Kind: "lognormal", A: 20 * time.Millisecond, B: 200 * time.Millisecond}, Strategies: Strategies}
	m := shardMap(slotplan.ShardRange{Shard: "a", Lo: 0, Hi: 49151}, slotplan.ShardRange{Shard: "b", Lo: 49152, Hi: 65535})
	fleet := Fleet{Map: m, Shards: []Shard{{Name: "b", Workers: 7, Slowdown: 2}, {Name: "a", Down: &Outage{Start: 70 * time.Second, Length: 20 * time.Second}}}}
	first := runShards(t, cfg, fleet)
	require.Equal(t, first, runShards(t, cfg, fleet))
	require.Equal(t, "b", first.Shards[0].Shard, "in the order of Fleet.Shards")
	cfg.Seed = 9
	other := runShards(t, cfg, fleet)
	require.NotEqual(t, first.Shards[0].Accounts, other.Shards[0].Accounts)
}

func TestShardsConfigErrors(t *testing.T) {
	t.Parallel()
	cfg := Config{Accounts: 100, Cycle: 120 * time.Second}
	for _, tt := range []struct {
		cfg   Config
		fleet Fleet
		want  string
	}{
		{cfg, Fleet{Map: shardMap(slotplan.ShardRange{Shard: "a", Lo: 0, Hi: 1000}, slotplan.ShardRange{Shard: "b", Lo: 1001, Hi: 65535}), Shards: []Shard{{Name: "a"}, {Name: "b"}}},
			`Map: invalid shard map: range 0-1000 of shard "a" does not fall on the slots of a 2m0s cycle (each spans 8192 buckets): move its bound 1001 to 0 or 8192`},
		{cfg, Fleet{Map: shardMap(slotplan.ShardRange{Shard: "a", Lo: 0, Hi: 8191}), Shards: []Shard{{Name: "a"}}}, "Map: invalid shard map: buckets 8192-65535 belong to no shard"},
		{cfg, Fleet{Map: evenThree, Shards: threeShards()[:2]}, `the map's shard "s3" is not listed`},
		{cfg, Fleet{Map: evenThree, Shards: append(threeShards(), Shard{Name: "s4"})}, `"s4" is not a shard of the map (s1, s2, s3)`},
		{cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s2", Slowdown: -1})}, "s2's Slowdown must be above 0"},
		{cfg, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s2", Down: &Outage{Start: 5 * time.Minute, Length: time.Minute}})}, "s2's Down must start at or after 0 and before the end of the simulated 2m0s"},
		{Config{Accounts: 100, Cycle: 120 * time.Second, Outage: &Outage{Length: time.Second}}, Fleet{Map: evenThree, Shards: threeShards(Shard{Name: "s2", Down: &Outage{Length: time.Second}})}, "s2's Down and Outage (every shard down) together are not modelled"},
		{Config{Accounts: 100, Cycle: 120 * time.Second, Reciprocal: true}, Fleet{Map: evenThree, Shards: threeShards()}, "Reciprocal are not modelled over shards"},
		{Config{Accounts: 0, Cycle: 120 * time.Second}, Fleet{Map: evenThree, Shards: threeShards()}, "Accounts must be at least 1"},
	} {
		_, err := RunShards(context.Background(), tt.cfg, tt.fleet)
		require.ErrorContains(t, err, tt.want)
	}
}
