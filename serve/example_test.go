package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// Example mounts the service's API under /scheduler/ in the app's own
// mux, behind the app's own authentication: the app's middleware decides
// who a request speaks for (here a made-up X-Team header: "ops" is the
// admin, every other team the tenant registered under its name), and the
// service applies its scopes and tenants to that. River's client makes
// the calls and Server.Run does the rest (missed calls, pruning) until
// the app stops.
func Example() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer func() {
		_, _ = dbPool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()

	if err := serve.Migrate(ctx, dbPool, schema); err != nil {
		panic(err)
	}
	// The app's own idea of who is calling.
	var (
		mu    sync.Mutex
		teams = map[string]serve.Principal{"ops": {Scope: serve.ScopeAdmin}}
	)
	srv, err := serve.New(serve.Config{
		Pool:    dbPool,
		Schema:  schema,
		Periods: []time.Duration{time.Hour},
		Logger:  slog.New(slog.DiscardHandler),
		Authenticate: func(r *http.Request) (serve.Principal, error) {
			mu.Lock()
			defer mu.Unlock()
			p, ok := teams[r.Header.Get("X-Team")]
			if !ok {
				return serve.Principal{}, errors.New("unknown team")
			}
			return p, nil
		},
	})
	if err != nil {
		panic(err)
	}
	if err := srv.CreateIndexes(ctx); err != nil {
		panic(err)
	}

	// River's client makes the calls; Run records what they missed.
	config := &river.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)}
	if err := srv.Configure(config, 10); err != nil {
		panic(err)
	}
	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- srv.Run(runCtx) }()

	mux := http.NewServeMux()
	mux.Handle("/scheduler/", http.StripPrefix("/scheduler", srv.Handler()))

	send := func(team, method, path, body string, out any) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if team != "" {
			req.Header.Set("X-Team", team)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if out != nil {
			if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
				panic(err)
			}
		}
		return rec.Code
	}

	// The admin makes the tenants; the app maps its teams onto them.
	for _, name := range []string{"acme", "globex"} {
		var tenant serve.Tenant
		fmt.Println("ops creates tenant", name+":", send("ops", "POST", "/scheduler/v1/tenants", `{"name": "`+name+`"}`, &tenant))
		mu.Lock()
		teams[name] = serve.Principal{Scope: serve.ScopeTenant, Tenant: tenant.ID}
		mu.Unlock()
	}
	fmt.Println("acme creates a schedule:", send("acme", "POST", "/scheduler/v1/schedules", `{"url": "https://203.0.113.10/hook", "period": "1h"}`, nil))
	for _, team := range []string{"acme", "globex"} {
		var page struct {
			Schedules []serve.Schedule `json:"schedules"`
		}
		send(team, "GET", "/scheduler/v1/schedules", "", &page)
		fmt.Println(team, "sees", len(page.Schedules), "schedule(s)")
	}
	fmt.Println("globex lists the tenants:", send("globex", "GET", "/scheduler/v1/tenants", "", nil))
	fmt.Println("no team:", send("", "GET", "/scheduler/v1/schedules", "", nil))

	stop()
	if err := <-ran; err != nil {
		panic(err)
	}
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}
	if err := srv.FlushOutcomes(ctx); err != nil {
		panic(err)
	}

	// Output:
	// ops creates tenant acme: 201
	// ops creates tenant globex: 201
	// acme creates a schedule: 201
	// acme sees 1 schedule(s)
	// globex sees 0 schedule(s)
	// globex lists the tenants: 403
	// no team: 401
}
