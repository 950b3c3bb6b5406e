package riverslot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example_upstreamBudget shows Check refusing a plan whose upstream cannot
// be synced in a cycle at its rate limit: 400 accounts at one bank need
// 3.33 syncs a second over a 120 s cycle, and Limits.Rate allows 2.5. The
// app decides what to do with it (here: print it; an app that would rather
// start anyway logs it and goes on, and the excess is skipped as
// upstream_throttled every cycle).
func Example_upstreamBudget() {
	ctx := context.Background()
	tb := riverslottest.PanicTB()
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 600)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := dbPool.Exec(ctx, "ALTER TABLE "+accounts+" ADD COLUMN bank text"); err != nil {
		panic(err)
	}
	// Two of every three accounts at bank-a, the rest at bank-b.
	if _, err := dbPool.Exec(ctx, "UPDATE "+accounts+" a SET bank = CASE WHEN n.i % 3 = 2 THEN 'bank-b' ELSE 'bank-a' END"+
		" FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM "+accounts+") n WHERE n.id = a.id"); err != nil {
		panic(err)
	}
	// Check counts the upstreams of an analyzed table (its size decides
	// whether it counts them all or a sample).
	if _, err := dbPool.Exec(ctx, "ANALYZE "+accounts); err != nil {
		panic(err)
	}
	if err := riverslot.Migrate(ctx, dbPool, schema); err != nil {
		panic(err)
	}

	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Tasks: []riverslot.Task{{
			Name:     "transactions",
			Cycle:    120 * time.Second,
			Schema:   schema,
			Table:    "accounts",
			Upstream: "bank",
			Limits:   riverslot.UpstreamLimits{Rate: 2.5},
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
		Logger: slog.New(slog.DiscardHandler), // Check's warnings: not this example's
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.Configure(&river.Config{Schema: schema}); err != nil {
		panic(err)
	}
	var budget *riverslot.UpstreamBudgetError
	if err := scheduler.Check(ctx); errors.As(err, &budget) {
		for _, u := range budget.Over {
			fmt.Printf("task %s, upstream %s: %d accounts need %.2f syncs/s, its limit is %.1f/s\n", budget.Task, u.Key, u.Accounts, u.AverageRate, u.Rate)
		}
	}

	// Output:
	// task transactions, upstream bank-a: 400 accounts need 3.33 syncs/s, its limit is 2.5/s
}
