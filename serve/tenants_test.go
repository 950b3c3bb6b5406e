package serve_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// as is a copy of a that sends token.
func (a *api) as(token string) *api {
	c := *a
	c.token = token
	return &c
}

type madeTenant struct {
	serve.Tenant
	Token         string `json:"token"`
	SigningSecret string `json:"signing_secret"`
}

// tenant makes a tenant with a's (admin) token.
func (a *api) tenant(name string, quota map[string]any) madeTenant {
	a.t.Helper()
	body := map[string]any{"name": name}
	for k, v := range quota {
		body[k] = v
	}
	var out madeTenant
	require.Equal(a.t, http.StatusCreated, a.do("POST", "/v1/tenants", body, &out))
	return out
}

func (a *api) schedule(body map[string]any) serve.Schedule {
	a.t.Helper()
	var sc serve.Schedule
	require.Equal(a.t, http.StatusCreated, a.do("POST", "/v1/schedules", body, &sc))
	return sc
}

var publicHook = map[string]any{"url": "https://203.0.113.10/hook", "period": "1h"}

// TestTenantShapes: the acceptance's shapes. An admin makes a tenant and
// gets its id, a first tenant token and a Standard Webhooks secret; a
// tenant token lists only its tenant's schedules, another tenant's
// schedule answers 404 to GET, PATCH and DELETE, and /v1/tenants 403.
func TestTenantShapes(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	acme, other := a.tenant("acme", nil), a.tenant("other", nil)
	require.NotEqual(t, uuid.Nil, acme.ID)
	require.True(t, strings.HasPrefix(acme.SigningSecret, "whsec_"), acme.SigningSecret)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(acme.SigningSecret, "whsec_"))
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.NotEqual(t, acme.SigningSecret, other.SigningSecret)
	require.Equal(t, serve.DefaultMaxSchedules, acme.MaxSchedules, "the server's default quota")
	var taken apiErr
	require.Equal(t, http.StatusConflict, a.do("POST", "/v1/tenants", map[string]any{"name": "acme"}, &taken))
	require.Equal(t, "name", taken.Field)

	mine := a.as(acme.Token).schedule(publicHook)
	theirs := a.as(other.Token).schedule(publicHook)
	admins := a.schedule(publicHook)
	require.Equal(t, acme.ID, mine.Tenant)
	def, err := a.srv.DefaultTenant(context.Background())
	require.NoError(t, err)
	require.Equal(t, def, admins.Tenant, "an admin's schedule without a tenant is the default tenant's")
	// One URL, two tenants: two upstream keys, so one's 429 never pauses
	// the other's calls.
	require.NotEqual(t, mine.Upstream, theirs.Upstream)
	require.Equal(t, acme.ID.String()+" https://203.0.113.10:443", mine.Upstream)

	ids := func(token, query string) []uuid.UUID {
		var page struct{ Schedules []serve.Schedule }
		require.Equal(t, http.StatusOK, a.as(token).do("GET", "/v1/schedules"+query, nil, &page))
		var out []uuid.UUID
		for _, sc := range page.Schedules {
			out = append(out, sc.ID)
		}
		return out
	}
	require.Equal(t, []uuid.UUID{mine.ID}, ids(acme.Token, ""))
	require.Equal(t, []uuid.UUID{mine.ID}, ids(acme.Token, "?tenant="+other.ID.String()), "a tenant's ?tenant= is its own")
	require.ElementsMatch(t, []uuid.UUID{mine.ID, theirs.ID, admins.ID}, ids(a.token, ""))
	require.Equal(t, []uuid.UUID{theirs.ID}, ids(a.token, "?tenant="+other.ID.String()))

	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		var e apiErr
		require.Equal(t, http.StatusNotFound, a.as(acme.Token).do(m, "/v1/schedules/"+theirs.ID.String(), map[string]any{"paused": true}, &e), m)
		require.Equal(t, "id", e.Field)
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+theirs.ID.String(), nil, nil), "still there, unchanged")
	require.Equal(t, http.StatusForbidden, a.as(acme.Token).do("GET", "/v1/tenants", nil, nil))
	var e apiErr
	require.Equal(t, http.StatusForbidden, a.as(acme.Token).do("POST", "/v1/schedules", map[string]any{"url": "https://203.0.113.10/", "period": "1h", "tenant": other.ID}, &e))
	require.Equal(t, "tenant", e.Field)

	// The secret again, for the tenant's token only.
	var secret struct{ Secret string }
	require.Equal(t, http.StatusOK, a.as(acme.Token).do("GET", "/v1/signing-secret", nil, &secret))
	require.Equal(t, acme.SigningSecret, secret.Secret)

	// Deleting a tenant deletes its schedules and revokes its tokens.
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/tenants/"+other.ID.String(), nil, nil))
	require.Equal(t, http.StatusUnauthorized, a.as(other.Token).do("GET", "/v1/schedules", nil, nil))
	var gone serve.Schedule
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/schedules/"+theirs.ID.String(), nil, &gone))
	require.NotNil(t, gone.DeletedAt)
	require.Equal(t, http.StatusBadRequest, a.do("DELETE", "/v1/tenants/"+def.String(), nil, nil), "the default tenant stays")
}

// TestScopes: a table driven from the OpenAPI document. Every operation
// it lists is public (the document, the page) or an endpoint with an
// x-scope, which is the scope enforced (401 without a token); each is
// called as admin, as a tenant token and a read token of acme on acme's
// things, and as a tenant token and a read token of another tenant on
// acme's: a narrower scope 403, a wide enough one its answer, another
// tenant's schedule or token 404, and nothing another tenant reads
// names acme's tenant or schedules.
func TestScopes(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	resp, err := http.Get(a.http.URL + "/v1/openapi.json")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	resp.Body.Close()

	acme := a.tenant("acme", nil)
	other := a.tenant("other", nil)
	ctx := context.Background()
	read, err := a.srv.AddTenantToken(ctx, acme.ID, "reader", serve.ScopeRead)
	require.NoError(t, err)
	otherRead, err := a.srv.AddTenantToken(ctx, other.ID, "reader", serve.ScopeRead)
	require.NoError(t, err)
	// acme's things another tenant must never see in a list.
	acmeSchedule := a.schedule(map[string]any{"url": "https://203.0.113.10/acme", "period": "1h", "tenant": acme.ID})

	type who struct {
		name  string
		token string
		scope serve.Scope
		own   bool // acts on acme's things
	}
	principals := []who{
		{"admin", a.token, serve.ScopeAdmin, true},
		{"acme tenant", acme.Token, serve.ScopeTenant, true},
		{"acme read", read, serve.ScopeRead, true},
		{"other tenant", other.Token, serve.ScopeTenant, false},
		{"other read", otherRead, serve.ScopeRead, false},
	}
	allowed := func(p who, need serve.Scope) bool {
		switch need {
		case serve.ScopeRead:
			return true
		case serve.ScopeTenant:
			return p.scope != serve.ScopeRead
		}
		return p.scope == serve.ScopeAdmin
	}
	// The table is the OpenAPI document's: every operation it lists is
	// either public (these two, static) or has an x-scope, enforced as
	// Endpoints says; an endpoint added without a scope decision, or
	// served and not documented, fails here.
	public := map[string]bool{"GET /v1/openapi.json": true, "GET /v1/page": true}
	byOp := map[string]serve.Endpoint{}
	for _, ep := range serve.Endpoints() {
		byOp[ep.Method+" "+ep.Path] = ep
		_, ok := doc.Paths[ep.Path][strings.ToLower(ep.Method)]
		require.True(t, ok, "%s %s is served and in the OpenAPI document", ep.Method, ep.Path)
	}
	var ops []string
	for path, methods := range doc.Paths {
		for m := range methods {
			switch m {
			case "get", "post", "put", "patch", "delete", "head":
				ops = append(ops, strings.ToUpper(m)+" "+path)
			}
		}
	}
	slices.Sort(ops)
	require.Len(t, ops, len(byOp)+len(public), "every documented operation is an endpoint or public")
	seen := 0
	for _, opName := range ops {
		method, docPath, _ := strings.Cut(opName, " ")
		var op struct {
			Scope serve.Scope `json:"x-scope"`
		}
		require.NoError(t, json.Unmarshal(doc.Paths[docPath][strings.ToLower(method)], &op))
		if public[opName] {
			require.Empty(t, op.Scope, "%s is public: no x-scope", opName)
			resp, err := http.Get(a.http.URL + docPath)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s needs no token", opName)
			continue
		}
		ep, ok := byOp[opName]
		require.True(t, ok, "%s is documented: it must be an endpoint with a scope (serve.Endpoints)", opName)
		require.NotEmpty(t, op.Scope, "%s: the document names its scope (x-scope)", opName)
		require.Equal(t, ep.Scope, op.Scope, "%s: the document's x-scope is the one enforced", opName)
		// Without a token: 401, never served.
		require.Equal(t, http.StatusUnauthorized, a.as("").do(method, strings.ReplaceAll(docPath, "{id}", "1"), nil, nil), "%s without a token", opName)
		for _, p := range principals {
			// Each case on things of its own, made here by the admin: acme's
			// schedule, a token of acme's, a tenant of its own.
			path, body := ep.Path, map[string]any(nil)
			byID := strings.Contains(path, "{id}")
			switch {
			case strings.HasPrefix(path, "/v1/schedules"):
				sc := a.schedule(map[string]any{"url": "https://203.0.113.10/hook", "period": "1h", "tenant": acme.ID})
				path = strings.Replace(path, "{id}", sc.ID.String(), 1)
				body = map[string]any{"url": "https://203.0.113.10/x", "period": "1h", "paused": true}
				if ep.Method == "POST" {
					delete(body, "paused")
				}
				if strings.HasSuffix(path, "/trigger") {
					body = nil
				}
			case strings.HasPrefix(path, "/v1/tokens"):
				tok, err := a.srv.AddTenantToken(ctx, acme.ID, "victim", serve.ScopeRead)
				require.NoError(t, err)
				var list struct {
					Tokens []struct {
						ID   int64  `json:"id"`
						Name string `json:"name"`
					}
				}
				require.Equal(t, http.StatusOK, a.as(tok).do("GET", "/v1/me", nil, nil))
				require.Equal(t, http.StatusOK, a.do("GET", "/v1/tokens", nil, &list))
				path = strings.Replace(path, "{id}", strconv.FormatInt(list.Tokens[len(list.Tokens)-1].ID, 10), 1)
				body = map[string]any{"scope": "read", "tenant": acme.ID}
			case strings.HasPrefix(path, "/v1/tenants"):
				tn := a.tenant(fmt.Sprintf("t-%s-%s-%d", ep.Method, p.name, seen), nil)
				path = strings.Replace(path, "{id}", tn.ID.String(), 1)
				body = map[string]any{"name": fmt.Sprintf("n-%s-%s-%d", ep.Method, p.name, seen), "max_schedules": 5}
			}
			seen++
			var raw json.RawMessage
			status := a.as(p.token).do(ep.Method, path, body, &raw)
			var e apiErr
			_ = json.Unmarshal(raw, &e)
			switch {
			case !allowed(p, ep.Scope):
				require.Equal(t, http.StatusForbidden, status, "%s %s as %s: %s", ep.Method, path, p.name, e.Error)
				require.Contains(t, e.Error, string(ep.Scope))
			case !p.own && byID:
				require.Equal(t, http.StatusNotFound, status, "%s %s as %s: another tenant's", ep.Method, path, p.name)
			case !p.own && ep.Method == "POST" && body["tenant"] != nil:
				require.Equal(t, http.StatusForbidden, status, "%s %s as %s: naming another tenant", ep.Method, path, p.name)
			default:
				require.True(t, status >= 200 && status < 300, "%s %s as %s: %d %s", ep.Method, path, p.name, status, e.Error)
			}
			if !p.own && ep.Method == "GET" {
				// What another tenant reads holds nothing of acme's.
				require.NotContains(t, string(raw), acme.ID.String(), "%s %s as %s", ep.Method, path, p.name)
				require.NotContains(t, string(raw), acmeSchedule.ID.String(), "%s %s as %s", ep.Method, path, p.name)
			}
		}
	}

	// What the collections show another tenant: nothing of acme's.
	var toks struct {
		Tokens []struct {
			Tenant *uuid.UUID `json:"tenant"`
		}
	}
	require.Equal(t, http.StatusOK, a.as(other.Token).do("GET", "/v1/tokens", nil, &toks))
	require.NotEmpty(t, toks.Tokens)
	for _, tok := range toks.Tokens {
		require.Equal(t, other.ID, *tok.Tenant)
	}
	var me struct {
		Scope  serve.Scope  `json:"scope"`
		Tenant serve.Tenant `json:"tenant"`
	}
	require.Equal(t, http.StatusOK, a.as(read).do("GET", "/v1/me", nil, &me))
	require.Equal(t, serve.ScopeRead, me.Scope)
	require.Equal(t, acme.ID, me.Tenant.ID)
}

// TestRevokedForGood: a revoked token is refused at once by the process
// that revoked it, within seconds by another process of the schema, and
// by every process started later; a revoked --token-file token stops
// the server at start.
func TestRevokedForGood(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "token")
	_, err := a.srv.TokenFile(ctx, path)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	fileToken := strings.TrimSpace(string(b))
	acme := a.tenant("acme", nil)

	// A second process of the same schema.
	second, err := serve.New(serve.Config{Pool: a.srv.Pool(), Schema: a.srv.Schema(), Periods: []time.Duration{time.Hour}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	b2 := &api{t: t, srv: second, http: newHTTP(t, second)}
	require.Equal(t, http.StatusOK, b2.as(fileToken).do("GET", "/v1/schedules", nil, nil))
	require.Equal(t, http.StatusOK, b2.as(acme.Token).do("GET", "/v1/schedules", nil, nil))

	var list struct {
		Tokens []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		}
	}
	require.Equal(t, http.StatusOK, a.as(acme.Token).do("GET", "/v1/tokens", nil, &list))
	require.Len(t, list.Tokens, 1)
	require.Equal(t, http.StatusOK, a.as(acme.Token).do("DELETE", "/v1/tokens/"+strconv.FormatInt(list.Tokens[0].ID, 10), nil, nil), "a tenant revokes its own token")
	require.Equal(t, http.StatusUnauthorized, a.as(acme.Token).do("GET", "/v1/schedules", nil, nil), "at once here")
	riverslottest.WaitFor(t, 15*time.Second, "the other process to refuse the revoked token", func() bool {
		return b2.as(acme.Token).do("GET", "/v1/schedules", nil, nil) == http.StatusUnauthorized
	})

	// The operator's file token, revoked by an admin: refused now, and the
	// next start refuses the file.
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tokens", nil, &list))
	var fileID int64
	for _, tok := range list.Tokens {
		if tok.Name == "token-file" {
			fileID = tok.ID
		}
	}
	require.NotZero(t, fileID)
	require.Equal(t, http.StatusOK, a.do("DELETE", "/v1/tokens/"+strconv.FormatInt(fileID, 10), nil, nil))
	require.Equal(t, http.StatusUnauthorized, a.as(fileToken).do("GET", "/v1/schedules", nil, nil))
	restarted, err := serve.New(serve.Config{Pool: a.srv.Pool(), Schema: a.srv.Schema(), Periods: []time.Duration{time.Hour}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	_, err = restarted.TokenFile(ctx, path)
	require.ErrorIs(t, err, serve.ErrTokenRevoked)
	r3 := &api{t: t, srv: restarted, http: newHTTP(t, restarted)}
	require.Equal(t, http.StatusUnauthorized, r3.as(fileToken).do("GET", "/v1/schedules", nil, nil))
	require.Equal(t, http.StatusUnauthorized, r3.as(acme.Token).do("GET", "/v1/schedules", nil, nil))
	require.Equal(t, http.StatusOK, r3.as(a.token).do("GET", "/v1/schedules", nil, nil), "the tokens not revoked still work")
}

// TestBadTokensLockNoOneOut: a flood of made-up tokens costs no query of
// its own (the tokens are read at most once a second, whatever the
// flood), and every request of a valid token is served meanwhile: one
// known before the flood, and one made by another process during it.
func TestBadTokensLockNoOneOut(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	other, err := serve.New(serve.Config{Pool: a.srv.Pool(), Schema: a.srv.Schema(), Periods: []time.Duration{time.Hour}, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/me", nil, nil))

	start, readsBefore := time.Now(), a.srv.TokenReads()
	stop := make(chan struct{})
	var (
		wg             sync.WaitGroup
		bad, badServed atomic.Int64
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status := a.as(fmt.Sprintf("rs_made_up_%d_%d", w, i)).do("GET", "/v1/schedules?limit=1", nil, nil)
				bad.Add(1)
				if status != http.StatusUnauthorized {
					badServed.Add(1)
				}
			}
		})
	}
	var goodFailures []string
	for i := range 40 {
		if status := a.do("GET", "/v1/schedules?limit=1", nil, nil); status != http.StatusOK {
			goodFailures = append(goodFailures, fmt.Sprintf("known token, request %d: %d", i, status))
		}
		if i == 10 {
			// A token made by another process while the flood goes on: found
			// within the once-a-second read.
			fresh, err := other.AddToken(context.Background(), "during the flood")
			require.NoError(t, err)
			riverslottest.WaitFor(t, 10*time.Second, "the new token to be accepted", func() bool {
				return a.as(fresh).do("GET", "/v1/me", nil, nil) == http.StatusOK
			})
		}
		time.Sleep(25 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	reads := a.srv.TokenReads() - readsBefore
	require.Empty(t, goodFailures)
	require.Zero(t, badServed.Load())
	require.Greater(t, bad.Load(), int64(100), "the flood was a flood")
	// At most one read a second (and one for a stale copy every 5 s).
	require.LessOrEqual(t, reads, int64(elapsed/time.Second)+2, "%d reads for %d bad tokens in %s", reads, bad.Load(), elapsed)
}

// TestQuotas: a tenant's schedules and planned calls per second are
// bounded: past either, a create (or a change to a shorter period) is 429
// naming the quota, and concurrent creates never pass the quota together.
func TestQuotas(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Minute, time.Hour)
	small := a.tenant("small", map[string]any{"max_schedules": 3})
	as := a.as(small.Token)
	const tries = 10
	statuses := make([]int, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Go(func() { statuses[i] = as.do("POST", "/v1/schedules", publicHook, nil) })
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusTooManyRequests}, s)
		if s == http.StatusCreated {
			created++
		}
	}
	require.Equal(t, 3, created, "concurrent creates stop at the quota: %v", statuses)
	var e struct {
		Quota string `json:"quota"`
		Error string `json:"error"`
	}
	require.Equal(t, http.StatusTooManyRequests, as.do("POST", "/v1/schedules", publicHook, &e))
	require.Equal(t, "max_schedules", e.Quota, e.Error)
	var page struct{ Schedules []serve.Schedule }
	require.Equal(t, http.StatusOK, as.do("GET", "/v1/schedules", nil, &page))
	require.Len(t, page.Schedules, 3)
	require.Equal(t, http.StatusOK, as.do("DELETE", "/v1/schedules/"+page.Schedules[0].ID.String(), nil, nil))
	as.schedule(publicHook) // the place freed

	// Calls per second: a schedule of 1m plans 1/60 a second; 0.051
	// holds three of them and not a fourth.
	rate := a.tenant("rate", map[string]any{"max_calls_per_second": 0.051, "max_schedules": 0})
	ar := a.as(rate.Token)
	minute := map[string]any{"url": "https://203.0.113.10/hook", "period": "1m"}
	for range 3 {
		ar.schedule(minute)
	}
	require.Equal(t, http.StatusTooManyRequests, ar.do("POST", "/v1/schedules", minute, &e))
	require.Equal(t, "max_calls_per_second", e.Quota, e.Error)
	hourly := ar.schedule(publicHook) // 1/3600 more: 0.05028
	require.Equal(t, http.StatusTooManyRequests, ar.do("PATCH", "/v1/schedules/"+hourly.ID.String(), map[string]any{"period": "1m"}, &e))
	require.Equal(t, "max_calls_per_second", e.Quota)
	var got serve.Tenant
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+rate.ID.String(), nil, &got))
	require.EqualValues(t, 4, got.Schedules)
	require.InDelta(t, 3.0/60+1.0/3600, got.PlannedCallsPerSecond, 1e-6)
	// An admin raises it.
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/tenants/"+rate.ID.String(), map[string]any{"max_calls_per_second": 1}, nil))
	require.Equal(t, http.StatusOK, ar.do("PATCH", "/v1/schedules/"+hourly.ID.String(), map[string]any{"period": "1m"}, nil))
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+rate.ID.String(), nil, &got))
	require.InDelta(t, 4.0/60, got.PlannedCallsPerSecond, 1e-6)

	// A tenant without a quota is counted from its schedules; a quota set
	// later holds from what it has.
	free := a.tenant("free", map[string]any{"max_schedules": 0})
	af := a.as(free.Token)
	var made []serve.Schedule
	for range 3 {
		made = append(made, af.schedule(publicHook))
	}
	require.Equal(t, http.StatusOK, af.do("DELETE", "/v1/schedules/"+made[0].ID.String(), nil, nil))
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+free.ID.String(), nil, &got))
	require.EqualValues(t, 2, got.Schedules)
	require.InDelta(t, 2.0/3600, got.PlannedCallsPerSecond, 1e-9)
	require.Equal(t, http.StatusOK, a.do("PATCH", "/v1/tenants/"+free.ID.String(), map[string]any{"max_schedules": 3}, &got))
	require.EqualValues(t, 2, got.Schedules)
	af.schedule(publicHook)
	require.Equal(t, http.StatusTooManyRequests, af.do("POST", "/v1/schedules", publicHook, &e))
	require.Equal(t, "max_schedules", e.Quota)
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+free.ID.String(), nil, &got))
	require.EqualValues(t, 3, got.Schedules)
}

// TestExternalID: a create naming an external_id the tenant has answers
// that schedule (200), however many are sent at once: one schedule, one
// place of the quota. Another tenant's same external_id is its own.
func TestExternalID(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	acme, other := a.tenant("acme", nil), a.tenant("other", nil)
	body := map[string]any{"url": "https://203.0.113.10/hook", "period": "1h", "external_id": "invoice-sync-42"}
	const n = 8
	ids := make([]uuid.UUID, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var sc serve.Schedule
			statuses[i] = a.as(acme.Token).do("POST", "/v1/schedules", body, &sc)
			ids[i] = sc.ID
		})
	}
	wg.Wait()
	createdN := 0
	for i := range n {
		require.Equal(t, ids[0], ids[i])
		if statuses[i] == http.StatusCreated {
			createdN++
		} else {
			require.Equal(t, http.StatusOK, statuses[i])
		}
	}
	require.Equal(t, 1, createdN)
	var got serve.Tenant
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/tenants/"+acme.ID.String(), nil, &got))
	require.EqualValues(t, 1, got.Schedules)
	theirs := a.as(other.Token).schedule(body)
	require.NotEqual(t, ids[0], theirs.ID)
	require.Equal(t, "invoice-sync-42", *theirs.ExternalID)
	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.as(acme.Token).do("PATCH", "/v1/schedules/"+ids[0].String(), map[string]any{"external_id": "x"}, &e))
	require.Equal(t, "external_id", e.Field)
	// Deleted, the external_id is free again.
	require.Equal(t, http.StatusOK, a.as(acme.Token).do("DELETE", "/v1/schedules/"+ids[0].String(), nil, nil))
	again := a.as(acme.Token).schedule(body)
	require.NotEqual(t, ids[0], again.ID)
}

// TestTokenFileOfATenant: a token file holding a tenant's token is not an
// admin's: the server refuses it rather than serve with it.
func TestTokenFileOfATenant(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	acme := a.tenant("acme", nil)
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(acme.Token+"\n"), 0o600))
	_, err := a.srv.TokenFile(context.Background(), path)
	require.Error(t, err)
	require.False(t, errors.Is(err, serve.ErrTokenRevoked))
	require.Contains(t, err.Error(), "tenant")
}

// newHTTP serves srv's API on loopback for the test.
func newHTTP(t *testing.T, srv *serve.Server) *httptest.Server {
	t.Helper()
	h := httptest.NewServer(srv.Handler())
	t.Cleanup(h.Close)
	return h
}
