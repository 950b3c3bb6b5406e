package riverslotweb_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// Example mounts the operator's page under /riverslot/ in the app's mux,
// after the scheduler's Configure. In an app, wrap it in the app's own
// authentication: the page serves none.
func Example() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema with 3 accounts
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 3)

	if err := riverslot.Migrate(ctx, dbPool, schema); err != nil {
		panic(err)
	}
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: slog.New(slog.DiscardHandler),
		Tasks: []riverslot.Task{{
			Name:   "transactions",
			Cycle:  24 * time.Hour,
			Schema: schema,
			Table:  "accounts",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.Configure(&river.Config{Schema: schema}); err != nil {
		panic(err)
	}

	page, err := riverslotweb.New(scheduler, &riverslotweb.Config{Refresh: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/riverslot/", http.StripPrefix("/riverslot", page))

	for _, path := range []string{"/riverslot/?task=transactions", "/riverslot/api/cycles?task=transactions"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code, rec.Header().Get("Content-Type"))
	}

	// Output:
	// /riverslot/?task=transactions 200 text/html; charset=utf-8
	// /riverslot/api/cycles?task=transactions 200 application/json
}
