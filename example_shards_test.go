package riverslot_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example_shards spreads a task over two shards, eu and us (two schemas
// of one database here; two databases in production), and moves buckets
// from us to eu. A 24 h cycle has gcd(86,400, 256) = 128 slots; each
// spans 2 of the 256 one-byte buckets, 512 of the 65,536 two-byte buckets
// a shard map divides. With us owning buckets 32768-65535, us serves
// slots 64-127; from the cycle MoveBuckets names, after giving buckets
// 32768-49151 to eu, slots 96-127. The node here is one of us's
// (Config.Shard "us"): its bootstraps read us's copy of the map, each
// cycle the version in force at its start, and make per-slot jobs for
// us's slots only.
func Example_shards() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: throwaway schemas, accounts
	dbPool := riverslottest.Pool(tb)
	var shards []riverslot.Shard
	for _, name := range []string{"eu", "us"} {
		schema := riverslottest.EmptySchema(ctx, tb, dbPool)
		defer dropSchema(dbPool, schema)
		if err := riverslot.Migrate(ctx, dbPool, schema); err != nil { // River's tables, the ledger, the shard maps
			panic(err)
		}
		shards = append(shards, riverslot.Shard{Name: name, Pool: dbPool, Schema: schema})
	}
	us := shards[1]
	riverslottest.CreateAccounts(ctx, tb, dbPool, us.Schema, "accounts", 100)

	// The fleet's first map, for every cycle, before any node starts.
	first := riverslot.ShardMap{Ranges: []riverslot.ShardRange{
		{Shard: "eu", Lo: 0, Hi: 32767},
		{Shard: "us", Lo: 32768, Hi: 65535},
	}}
	if err := riverslot.SetShardMap(ctx, shards, "transactions", first, time.Time{}); err != nil {
		panic(err)
	}

	scheduler, err := riverslot.New(us.Pool, &riverslot.Config{
		Shard:  "us", // this database's shard: every node of it says so
		Logger: slog.New(slog.DiscardHandler),
		Tasks: []riverslot.Task{{
			Name:   "transactions",
			Cycle:  24 * time.Hour,
			Schema: us.Schema,
			Table:  "accounts",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.CreateIndexes(ctx); err != nil {
		panic(err)
	}
	task, err := scheduler.Task("transactions")
	if err != nil {
		panic(err)
	}
	next := task.Schedule.Next(time.Now())
	after := task.Schedule.Next(next)

	// Buckets 32768-49151 go to eu from the cycle after next: the map's
	// next version, written to both shards.
	moved, err := riverslot.MoveBuckets(ctx, shards, "transactions", 32768, 49151, "eu", after)
	if err != nil {
		panic(err)
	}
	fmt.Println("moved:", moved)
	for _, shard := range shards {
		latest, _, err := riverslot.ShardMapOf(ctx, shard, "transactions")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s's copy: v%d, in force %s after the next cycle starts\n", shard.Name, latest.Version, latest.EffectiveFrom.Sub(next))
	}

	prepareCycles(ctx, dbPool, scheduler, us.Schema, "transactions", next, after)
	for i, start := range []time.Time{next, after} {
		status, err := scheduler.StatusAt(ctx, "transactions", start)
		if err != nil {
			panic(err)
		}
		var served []int
		for _, s := range status.Current.PerSlot {
			if s.State == riverslot.SlotScheduled { // its per-slot job waits in River
				served = append(served, s.Slot)
			}
		}
		fmt.Printf("cycle %d, map v%d: %s serves %d slots, %d-%d; %d elsewhere\n", i+1, status.Current.ShardVersion,
			status.Current.Shard, len(served), served[0], served[len(served)-1], status.Current.SlotsElsewhere)
	}

	// Output:
	// moved: v2 eu:0-49151 us:49152-65535
	// eu's copy: v2, in force 24h0m0s after the next cycle starts
	// us's copy: v2, in force 24h0m0s after the next cycle starts
	// cycle 1, map v1: us serves 64 slots, 64-127; 64 elsewhere
	// cycle 2, map v2: us serves 32 slots, 96-127; 96 elsewhere
}
