package serve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

type teamKey struct{}

// TestEmbedded: the package as a team mounts it, with no CLI: its
// handler under a prefix of the team's own mux, behind the team's own
// authentication (a middleware that puts the team's Principal in the
// request's context, and Config.Authenticate that returns it), River's
// client and Server.Run beside it. A request the team authenticates sees
// only its tenant's schedules (another tenant's answers 404, the tenants
// 403), and the service's own tokens are not consulted; Run, with no
// sweep called by hand, writes the history entry of a call a started
// period did not make (TestMissedInAStartedPeriod's situation: the call's
// job deleted once its fan-out queued it), "fan_out_late", once.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	require.NoError(t, serve.Migrate(ctx, pool, schema))
	srv, err := serve.New(serve.Config{
		Pool: pool, Schema: schema, Periods: []time.Duration{period}, Guard: &serve.Guard{AllowPrivate: true},
		Logger: riverslottest.Logger(t), MissedInterval: time.Second,
		Authenticate: func(r *http.Request) (serve.Principal, error) {
			p, ok := r.Context().Value(teamKey{}).(serve.Principal)
			if !ok {
				return serve.Principal{}, serve.ErrUnauthenticated
			}
			return p, nil
		},
	})
	require.NoError(t, err)
	require.NoError(t, srv.CreateIndexes(ctx))

	// The team's own authentication: X-Team names a team it knows.
	var (
		mu    sync.Mutex
		teams = map[string]serve.Principal{"ops": {Scope: serve.ScopeAdmin}}
	)
	own := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			p, ok := teams[r.Header.Get("X-Team")]
			mu.Unlock()
			if !ok {
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), teamKey{}, p)))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/scheduler/", own(http.StripPrefix("/scheduler", srv.Handler())))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	// Through the team's mux: X-Team, no token.
	through := &api{t: t, srv: srv, http: &httptest.Server{URL: ts.URL + "/scheduler"}}
	send := func(team, method, path string, body, out any) int {
		t.Helper()
		return through.doWith(method, path, body, out, map[string]string{"X-Team": team})
	}

	tenants := map[string]uuid.UUID{}
	for _, name := range []string{"acme", "globex"} {
		var tenant serve.Tenant
		require.Equal(t, http.StatusCreated, send("ops", "POST", "/v1/tenants", map[string]any{"name": name}, &tenant))
		tenants[name] = tenant.ID
		mu.Lock()
		teams[name] = serve.Principal{Scope: serve.ScopeTenant, Tenant: tenant.ID}
		mu.Unlock()
	}
	mu.Lock()
	teams["acme-reader"] = serve.Principal{Scope: serve.ScopeRead, Tenant: tenants["acme"]}
	mu.Unlock()

	// A receiver verifying with acme's secret.
	var secret struct {
		Secret string `json:"secret"`
	}
	require.Equal(t, http.StatusOK, send("acme", "GET", "/v1/signing-secret", nil, &secret))
	rc, _ := newReceiverOf(t, secret.Secret)
	schedule := func(team, path string) serve.Schedule {
		var sc serve.Schedule
		require.Equal(t, http.StatusCreated, send(team, "POST", "/v1/schedules", map[string]any{"url": rc.url + path, "period": "24s", "timeout": "2s"}, &sc))
		return sc
	}
	called, lost := schedule("acme", "/called"), schedule("acme", "/lost")
	theirs := schedule("globex", "/theirs")
	require.Equal(t, tenants["acme"], called.Tenant)
	require.Equal(t, tenants["globex"], theirs.Tenant)

	// Each tenant sees its own, and nothing of the other's.
	list := func(team string) []uuid.UUID {
		var page struct {
			Schedules []serve.Schedule `json:"schedules"`
		}
		require.Equal(t, http.StatusOK, send(team, "GET", "/v1/schedules", nil, &page))
		var ids []uuid.UUID
		for _, sc := range page.Schedules {
			ids = append(ids, sc.ID)
		}
		return ids
	}
	require.ElementsMatch(t, []uuid.UUID{called.ID, lost.ID}, list("acme"))
	require.ElementsMatch(t, []uuid.UUID{called.ID, lost.ID}, list("acme-reader"))
	require.Equal(t, []uuid.UUID{theirs.ID}, list("globex"))
	require.ElementsMatch(t, []uuid.UUID{called.ID, lost.ID, theirs.ID}, list("ops"))
	require.Equal(t, http.StatusNotFound, send("acme", "GET", "/v1/schedules/"+theirs.ID.String(), nil, nil))
	require.Equal(t, http.StatusNotFound, send("globex", "PATCH", "/v1/schedules/"+lost.ID.String(), map[string]any{"paused": true}, nil))
	require.Equal(t, http.StatusNotFound, send("globex", "DELETE", "/v1/schedules/"+lost.ID.String(), nil, nil))
	require.Equal(t, http.StatusForbidden, send("acme", "GET", "/v1/tenants", nil, nil))
	require.Equal(t, http.StatusForbidden, send("acme-reader", "POST", "/v1/schedules", map[string]any{"url": rc.url + "/x", "period": "24s"}, nil))
	require.Equal(t, http.StatusUnauthorized, send("nobody", "GET", "/v1/schedules", nil, nil), "the team's middleware")
	// The service's own tokens are not consulted: its handler, reached
	// without the team's middleware, refuses an admin token of its own.
	token, err := srv.AddToken(ctx, "not used")
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/v1/schedules", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusUnauthorized, rec.Code, "Config.Authenticate replaces the tokens")

	config := &river.Config{Schema: schema, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, srv.Configure(config, 10))
	riverslottest.StartClient(ctx, t, pool, config)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-ran)
	})

	// The lost schedule's call, deleted as soon as its fan-out queues it.
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	var c time.Time
	riverslottest.WaitFor(t, 3*period, "the lost schedule's call queued", func() bool {
		rows, err := pool.Query(ctx, `DELETE FROM `+jobs+` WHERE kind = 'riverslot_sync' AND args->>'account_id' = $1 RETURNING (args->>'cycle_start')::timestamptz`,
			lost.ID.String())
		require.NoError(t, err)
		starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		if len(starts) > 0 {
			c = starts[0].UTC()
		}
		return len(starts) > 0
	})
	riverslottest.WaitFor(t, 2*period, "the called schedule's call of the period", func() bool {
		for _, call := range rc.of("/called") {
			if call.id == "msg_"+called.ID.String()+"_"+strconv.FormatInt(c.Unix(), 10) {
				return true
			}
		}
		return false
	})
	// Run's sweep writes the miss once the period's late calls can no
	// longer come (half a period and at most another half past its end).
	missed := func(team string, sc serve.Schedule) []serve.Call {
		var got serve.Schedule
		require.Equal(t, http.StatusOK, send(team, "GET", "/v1/schedules/"+sc.ID.String(), nil, &got))
		var out []serve.Call
		for _, call := range got.LastCalls {
			if call.Missed != nil {
				out = append(out, call)
			}
		}
		return out
	}
	riverslottest.WaitFor(t, 3*period, "Run's entry of the lost call", func() bool { return len(missed("acme-reader", lost)) > 0 })
	entries := missed("acme", lost)
	require.Len(t, entries, 1)
	require.Equal(t, serve.MissedFanOutLate, *entries[0].Missed)
	require.Empty(t, missed("acme", called), "the called schedule missed nothing")
}
