package integration

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestShardsThreeDatabases spreads one task over three PostgreSQL servers
// (three clusters of their own, on their own ports), each with its own
// River, ledger and accounts, on four real cycles of 24 s (8 slots of 3 s,
// each spanning 8,192 of the 65,536 buckets): shard s1 owns 3 slots'
// buckets, s2 2 (served by two River clients, as two nodes), s3 3. While
// the nodes run, the third slot's buckets move from s1 to s2 from the
// second cycle on (s2 holds a copy of those accounts, as an app copies
// them ahead of a move); in the third cycle s3's server is killed
// (immediate shutdown) for 8 s. Checked, from each shard's own record of its Sync calls:
//
//   - each account is synced by the shard the map in force gives it, never
//     by another: the moved accounts by s1 in the first cycle and by s2
//     from the second;
//   - every account once in every cycle over all shards, but s3's in the
//     cycle of its outage, where each is synced at least once or skipped
//     by the late policy (and again in the next cycle);
//   - s1's and s2's accounts are synced in s3's outage cycle as in any
//     other: one shard's database stops only its own accounts;
//   - no account is synced twice less than half a cycle apart, across
//     shards (the move included);
//   - each shard's ledger records the map version each cycle followed.
func TestShardsThreeDatabases(t *testing.T) {
	parallel(t)
	const (
		cycle   = 24 * time.Second
		width   = 8192 // buckets of a slot
		perSlot = 40   // accounts in each slot's buckets
		task    = "transactions"
	)
	ctx := t.Context()
	initial := riverslot.ShardMap{Ranges: []riverslot.ShardRange{
		{Shard: "s1", Lo: 0, Hi: 3*width - 1}, {Shard: "s2", Lo: 3 * width, Hi: 5*width - 1}, {Shard: "s3", Lo: 5 * width, Hi: 65535},
	}}
	moveLo, moveHi := 2*width, 3*width-1
	bucketOf := twoByteBucket
	moving := func(id uuid.UUID) bool { b := bucketOf(id); return b >= moveLo && b <= moveHi }
	all := idsInSlots(7, 8, 8, perSlot, width)

	type shard struct {
		name    string
		c       *cluster
		b       *testBundle
		s       *riverslot.Scheduler
		clients int
	}
	var (
		shards []*shard
		refs   []riverslot.Shard
	)
	for i, name := range []string{"s1", "s2", "s3"} {
		c := startCluster(t)
		pool := c.pool(ctx, t)
		t.Cleanup(pool.Close)
		schema := riverslottest.Schema(ctx, t, pool)
		var mine []uuid.UUID
		for _, id := range all {
			if initial.OwnerOf(id) == name || name == "s2" && moving(id) {
				mine = append(mine, id)
			}
		}
		accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
		_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "INSERT INTO "+accounts+" (id) SELECT unnest($1::uuid[])", mine)
		require.NoError(t, err)
		require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
		riverslottest.CreateSyncedTable(ctx, t, pool, schema)
		b := &testBundle{ids: mine, pool: pool, schema: schema}
		shards = append(shards, &shard{name: name, c: c, b: b, clients: 1 + i%2})
		refs = append(refs, riverslot.Shard{Name: name, Pool: pool, Schema: schema})
	}
	// The first cycle 20 s after the servers are up.
	offset, first := offsetForStartIn(cycle, 20*time.Second)
	for _, sh := range shards {
		s, err := riverslot.New(sh.b.pool, &riverslot.Config{Shard: sh.name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
			Name: task, Cycle: cycle, TriggerOffset: offset, Schema: sh.b.schema, Table: "accounts", Filter: "active",
			FirstCycle: riverslot.FirstCycleNext, PerSlotTimeout: 4 * time.Second, SyncTimeout: 2 * time.Second, Sync: sh.b.recordSync(),
		}}})
		require.NoError(t, err)
		sh.s = s
	}
	// The fleet's first map, before any node runs: every cycle follows it.
	require.NoError(t, riverslot.SetShardMap(ctx, refs, task, initial, time.Time{}))
	for _, sh := range shards {
		for range sh.clients {
			config := &river.Config{
				Schema:               sh.b.schema,
				Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
				Logger:               riverslottest.Logger(t),
				FetchPollInterval:    200 * time.Millisecond,
				JobTimeout:           3 * time.Second,
				RescueStuckJobsAfter: 6 * time.Second, // jobs whose completion the outage lost
			}
			require.NoError(t, sh.s.Configure(config))
			client, err := river.NewClient(riverpgxv5.New(sh.b.pool), config)
			require.NoError(t, err)
			require.NoError(t, client.Start(ctx))
			t.Cleanup(func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = client.Stop(stopCtx)
			})
		}
	}

	// The move, while the nodes run, from the second cycle.
	moveAt := first.Add(cycle)
	next, err := riverslot.MoveBuckets(ctx, refs, task, moveLo, moveHi, "s2", moveAt)
	require.NoError(t, err)
	require.EqualValues(t, 2, next.Version)
	require.Equal(t, "s2", next.Owner(moveLo))
	for _, ref := range refs {
		m, ok, err := riverslot.ShardMapOf(ctx, ref, task)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, next.Ranges, m.Ranges, "shard %s holds the new map", ref.Name)
		require.True(t, m.EffectiveFrom.Equal(moveAt))
	}
	// A second change for a cycle a shard has made already is refused, on
	// every shard (none is left with it).
	_, err = riverslot.MoveBuckets(ctx, refs, task, moveLo, moveHi, "s3", first.Add(time.Second))
	require.ErrorContains(t, err, "at least")

	// The third cycle: s3's server is killed a third of the way in, and
	// back 8 s later.
	outage := first.Add(2 * cycle)
	s3 := shards[2]
	time.Sleep(time.Until(outage.Add(cycle / 3)))
	require.NoError(t, s3.c.exec("pg_ctl", "-D", filepath.Join(s3.c.data, "db"), "-m", "immediate", "stop"))
	killed := time.Now()
	// While it is down, the page over all shards answers for s1 and s2
	// and says s3 did not.
	var scheds []*riverslot.Scheduler
	for _, sh := range shards {
		scheds = append(scheds, sh.s)
	}
	fleet, err := riverslotweb.NewShards(&riverslotweb.Config{Timeout: 5 * time.Second, Logger: riverslottest.Logger(t)}, scheds...)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	fleet.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/status?task="+task, nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var during struct {
		Unreachable int `json:"unreachable"`
		Shards      []struct {
			Shard  string           `json:"shard"`
			Error  string           `json:"error"`
			Status *json.RawMessage `json:"status"`
		} `json:"shards"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &during), rec.Body.String())
	require.Equal(t, 1, during.Unreachable, rec.Body.String())
	for i, sc := range during.Shards {
		if i == 2 {
			require.Nil(t, sc.Status, "s3 is down")
			require.Contains(t, sc.Error, "did not answer")
		} else {
			require.NotNil(t, sc.Status, "%s answers while s3 is down: %s", sc.Shard, sc.Error)
		}
	}
	require.Less(t, time.Since(killed), 8*time.Second, "the page answered within the outage")
	time.Sleep(time.Until(killed.Add(8 * time.Second)))
	s3.c.pgctl(t, "start")
	t.Logf("s3's server down from %s to %s into its cycle", killed.Sub(outage).Round(time.Millisecond), time.Since(outage).Round(time.Millisecond))

	// Four cycles, and the syncs of the last.
	end := first.Add(4 * cycle)
	riverslottest.WaitFor(t, time.Until(end)+40*time.Second, "the fourth cycle's syncs on every shard", func() bool {
		if time.Now().Before(end.Add(5 * time.Second)) {
			return false
		}
		for _, sh := range shards {
			var open int64
			if err := sh.b.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{sh.b.schema, "river_job"}.Sanitize()+
				" WHERE state NOT IN ('completed', 'cancelled', 'discarded') AND scheduled_at < $1", end).Scan(&open); err != nil || open > 0 {
				return false
			}
		}
		return true
	})

	// Every Sync call, by shard.
	type call struct {
		shard string
		cycle time.Time
		at    time.Time
	}
	calls := map[uuid.UUID][]call{}
	for _, sh := range shards {
		rows, err := sh.b.pool.Query(ctx, "SELECT account_id, cycle_start, synced_at FROM "+pgx.Identifier{sh.b.schema, "synced"}.Sanitize())
		require.NoError(t, err)
		var (
			id     uuid.UUID
			cs, at time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &cs, &at}, func() error {
			calls[id] = append(calls[id], call{sh.name, cs.UTC(), at})
			return nil
		})
		require.NoError(t, err)
	}
	var s3Skipped, s3Twice int
	for _, id := range all {
		byCycle := map[time.Time][]call{}
		for _, c := range calls[id] {
			byCycle[c.cycle] = append(byCycle[c.cycle], c)
		}
		for k := range 4 {
			cs := first.Add(time.Duration(k) * cycle)
			want := initial.OwnerOf(id)
			if moving(id) && !cs.Before(moveAt) {
				want = "s2"
			}
			got := byCycle[cs]
			for _, c := range got {
				require.Equal(t, want, c.shard, "account %s (bucket %d) in cycle %d synced by %s, its shard then is %s", id, bucketOf(id), k, c.shard, want)
			}
			if want == "s3" && cs.Equal(outage) {
				// The shard down mid-cycle: its late slots follow the late
				// policy, and a sync whose completion the crash lost runs
				// again (at least once).
				switch {
				case len(got) == 0:
					s3Skipped++
				case len(got) > 1:
					s3Twice++
				}
				continue
			}
			require.Len(t, got, 1, "account %s (bucket %d, shard %s) once in cycle %d", id, bucketOf(id), want, k)
		}
		// Never twice less than half a cycle apart, across shards.
		times := make([]time.Time, 0, len(calls[id]))
		for _, c := range calls[id] {
			times = append(times, c.at)
		}
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap < cycle/2 {
				// The only exception: a sync re-run after s3's crash lost
				// its completion, in the outage cycle.
				require.Equal(t, "s3", initial.OwnerOf(id), "account %s synced %s apart", id, gap)
			}
		}
	}
	t.Logf("%d accounts over 3 shards, 4 cycles; in s3's outage cycle %d of its accounts were skipped as late and %d synced twice (re-run after the crash)", len(all), s3Skipped, s3Twice)

	// Each shard's ledger: the map version each cycle followed.
	for _, sh := range shards {
		rows, err := sh.b.pool.Query(ctx, "SELECT cycle_start, shard, shard_version FROM "+pgx.Identifier{sh.b.schema, "riverslot_ledger"}.Sanitize()+
			" WHERE slot = -1 AND task = $1 ORDER BY 1", task)
		require.NoError(t, err)
		var (
			cs      time.Time
			name    string
			version int64
			n       int
		)
		_, err = pgx.ForEachRow(rows, []any{&cs, &name, &version}, func() error {
			want := int64(1)
			if !cs.Before(moveAt) {
				want = 2
			}
			require.Equal(t, sh.name, name)
			require.Equal(t, want, version, "shard %s cycle %s", sh.name, cs.UTC())
			n++
			return nil
		})
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 4, "shard %s made every cycle", sh.name)
		st, err := sh.s.StatusAt(context.Background(), task, first.Add(3*cycle))
		require.NoError(t, err)
		require.Equal(t, sh.name, st.Current.Shard)
		require.EqualValues(t, 2, st.Current.ShardVersion)
		own := map[string]int{"s1": 2, "s2": 3, "s3": 3}[sh.name]
		require.Equal(t, 8-own, st.Current.SlotsElsewhere, "shard %s serves %d of the 8 slots", sh.name, own)
		require.Equal(t, own, st.Current.SlotsDone)
	}
	// Over all shards: the latest cycle any has made, each of its 8 slots
	// served by one shard.
	all3, err := riverslot.StatusShards(context.Background(), task, scheds...)
	require.NoError(t, err)
	require.Len(t, all3.Shards, 3)
	require.Zero(t, all3.Unreachable)
	require.False(t, all3.CycleStart.Before(end), "the latest cycle: %s", all3.CycleStart)
	require.Equal(t, 8, all3.Slots, "each slot of the cycle served by one shard")
	for i, sc := range all3.Shards {
		require.Equal(t, shards[i].name, sc.Shard)
		require.Equal(t, shards[i].name, sc.Status.Shard)
	}
	t.Logf("over all shards, cycle %s: %d of %d slots done, %d enqueued, %d synced; %s", all3.CycleStart.Format(time.TimeOnly), all3.SlotsDone, all3.Slots, all3.Enqueued, all3.Synced, all3.Verdict)
}

// twoByteBucket is id's bucket of 65,536: its last two bytes.
func twoByteBucket(id uuid.UUID) int { return int(id[15])<<8 | int(id[14]) }

// idsInSlots returns perSlot ids in each of slots slots of width two-byte
// buckets, their buckets drawn from the seeds (the same every run).
func idsInSlots(seed1, seed2 uint64, slots, perSlot, width int) []uuid.UUID {
	rng := rand.New(rand.NewPCG(seed1, seed2))
	var all []uuid.UUID
	for slot := range slots {
		for range perSlot {
			id := uuid.New()
			b := slot*width + rng.IntN(width)
			id[15], id[14] = byte(b>>8), byte(b)
			all = append(all, id)
		}
	}
	return all
}
