package riverslot_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example_weights balances a task by Weight. A 1 h cycle has
// gcd(3,600, 256) = 16 slots; an account's slot is the last byte of its
// UUID over 16. Each slot has ten accounts of weight 1 (slot 9: six), and
// slot 3 also has a giant of weight 40. The mean slot weighs 196 / 16 =
// 12.25, and the giant more than half of that, so no slot could take it on
// top of its own accounts within the bound (1.10 × the mean). The cycle's
// bootstrap gives it the lightest slot, 9, to itself, and pins slot 9's
// six accounts elsewhere: each to the first slot walking up from 9 that
// stays within 1.05 × the mean (12.86), two to each of slots 10, 11 and
// 12. Every other account keeps its hash slot.
func Example_weights() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := dbPool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, weight float8 NOT NULL)"); err != nil {
		panic(err)
	}
	account := func(slot int, weight float64) uuid.UUID {
		id := uuid.New()
		id[15] = byte(slot * 16) // the last byte: bucket, so slot
		if _, err := dbPool.Exec(ctx, "INSERT INTO "+accounts+" (id, weight) VALUES ($1, $2)", id, weight); err != nil {
			panic(err)
		}
		return id
	}
	var neighbours []uuid.UUID // slot 9's accounts
	for slot := range 16 {
		n := 10
		if slot == 9 {
			n = 6
		}
		for range n {
			id := account(slot, 1)
			if slot == 9 {
				neighbours = append(neighbours, id)
			}
		}
	}
	giant := account(3, 40)

	if err := riverslot.Migrate(ctx, dbPool, schema); err != nil {
		panic(err)
	}
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: slog.New(slog.DiscardHandler),
		Tasks: []riverslot.Task{{
			Name:   "transactions",
			Cycle:  time.Hour,
			Schema: schema,
			Table:  "accounts",
			Weight: "weight", // each account's cost: a column or an expression
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.CreateIndexes(ctx); err != nil { // the bucket index and the pins tables
		panic(err)
	}
	task, err := scheduler.Task("transactions")
	if err != nil {
		panic(err)
	}
	prepareCycles(ctx, dbPool, scheduler, schema, "transactions", task.Schedule.Next(time.Now()))

	g, err := scheduler.Account(ctx, "transactions", giant)
	if err != nil {
		panic(err)
	}
	fmt.Printf("giant: hash slot %d, pinned to slot %d (weight %g)\n", g.Slot, g.PinnedSlot, g.PinWeight)
	var moved []int
	for _, id := range neighbours {
		n, err := scheduler.Account(ctx, "transactions", id)
		if err != nil {
			panic(err)
		}
		moved = append(moved, n.PinnedSlot)
	}
	slices.Sort(moved)
	fmt.Println("slot 9's accounts pinned to slots", moved)
	status, err := scheduler.Status(ctx, "transactions")
	if err != nil {
		panic(err)
	}
	fmt.Println("placement:", status.Current.Placement)
	for _, s := range status.Current.PerSlot {
		if s.PinnedIn > 0 || s.PinnedOut > 0 {
			fmt.Printf("slot %d: expects %d, %d pinned in, %d pinned out\n", s.Slot, s.Expected, s.PinnedIn, s.PinnedOut)
		}
	}

	// Output:
	// giant: hash slot 3, pinned to slot 9 (weight 40)
	// slot 9's accounts pinned to slots [10 10 11 11 12 12]
	// placement: pinned
	// slot 3: expects 10, 0 pinned in, 1 pinned out
	// slot 9: expects 1, 1 pinned in, 6 pinned out
	// slot 10: expects 12, 2 pinned in, 0 pinned out
	// slot 11: expects 12, 2 pinned in, 0 pinned out
	// slot 12: expects 12, 2 pinned in, 0 pinned out
}
