package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Scope is what a token may do.
type Scope string

const (
	// ScopeAdmin manages tenants, their quotas and every token, and reads
	// and changes every tenant's schedules. The --token-file token is an
	// admin token.
	ScopeAdmin Scope = "admin"
	// ScopeTenant reads and changes its tenant's schedules, its signing
	// secret and its tenant's tokens; it sees nothing of other tenants.
	ScopeTenant Scope = "tenant"
	// ScopeRead reads its tenant's schedules, calls and stats; it changes
	// nothing and never sees the signing secret.
	ScopeRead Scope = "read"
)

// ErrTokenRevoked is returned by TokenFile for a file whose token was
// revoked: a revoked token stays revoked through restarts.
var ErrTokenRevoked = errors.New("the token in --token-file was revoked (DELETE /v1/tokens/{id}); delete the file and start again for a new one, or give another --token-file")

// ErrUnauthenticated is returned by Server.TokenAuth for a request
// without a valid token of the service: the API answers it 401.
var ErrUnauthenticated = errors.New("a valid token is required: Authorization: Bearer <token> (riverslot serve --token-file writes one)")

// Principal is who a request to the API speaks for: what a token of the
// service stands for (Server.TokenAuth), or what Config.Authenticate
// decides.
type Principal struct {
	// Scope is what the request may do: ScopeAdmin, ScopeTenant or
	// ScopeRead.
	Scope Scope
	// Tenant is the tenant whose schedules, calls, tokens and secret the
	// request sees; uuid.Nil for ScopeAdmin, which sees every tenant's.
	Tenant uuid.UUID
	// TokenID is the id of the service's token that authenticated the
	// request (GET /v1/tokens lists it); 0 when Config.Authenticate did.
	TokenID int64
}

// check returns an error saying what is wrong with a Principal that
// Config.Authenticate returned.
func (p Principal) check() error {
	switch {
	case p.Scope != ScopeAdmin && p.Scope != ScopeTenant && p.Scope != ScopeRead:
		return fmt.Errorf("serve: Config.Authenticate returned a Principal with Scope %q; it must be %q, %q or %q", p.Scope, ScopeAdmin, ScopeTenant, ScopeRead)
	case p.Scope == ScopeAdmin && p.Tenant != uuid.Nil:
		return fmt.Errorf("serve: Config.Authenticate returned an admin Principal with Tenant %s; an admin belongs to no tenant: leave Tenant uuid.Nil, or give Scope %q", p.Tenant, ScopeTenant)
	case p.Scope != ScopeAdmin && p.Tenant == uuid.Nil:
		return fmt.Errorf("serve: Config.Authenticate returned a %q Principal without a Tenant; set Tenant to the tenant's id (POST /v1/tenants answers it)", p.Scope)
	}
	return nil
}

// can reports whether p's scope allows need: a reading token reads, a
// tenant token reads and writes, an admin token does all.
func (p Principal) can(need Scope) bool {
	switch need {
	case ScopeRead:
		return true
	case ScopeTenant:
		return p.Scope == ScopeTenant || p.Scope == ScopeAdmin
	}
	return p.Scope == ScopeAdmin
}

type principalKey struct{}

func principalOf(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// Tokens are "rs_" and 32 random bytes in hex; the server keeps their
// SHA-256 only.
func newTokenValue() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "rs_" + hex.EncodeToString(b), nil
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// How the tokens a process knows follow the database: every token not
// revoked is held in memory (its hash, never the token) and read again
// when the copy is older than tokensFresh, or, for a token the copy does
// not hold, at most once per tokensMissReload. A request with an unknown
// token therefore costs no query of its own: a flood of made-up tokens
// makes at most one read a second, and a valid token is never refused
// because of it. A token revoked on another process stops working here
// within tokensFresh; one made there works here within
// tokensMissReload.
const (
	tokensFresh      = 5 * time.Second
	tokensMissReload = time.Second
)

// tokenSet is the process's copy of the tokens not revoked.
type tokenSet struct {
	mu     sync.Mutex
	byHash map[[sha256.Size]byte]Principal
	read   time.Time     // when byHash was read
	doing  chan struct{} // closed when the read under way ends
	loads  atomic.Int64  // reads made, for tests
	// revoked are the tokens this process revoked in the last minute: a
	// read that began before a revocation committed cannot bring one back.
	revoked map[int64]time.Time
}

// lookup returns the Principal of a token, reading the tokens again when
// the copy is stale (or, for a token it lacks, older than
// tokensMissReload).
func (s *Server) lookup(ctx context.Context, token string) (Principal, bool) {
	hash := [sha256.Size]byte(tokenHash(token))
	ts := &s.tokenSet
	for try := 0; ; try++ {
		ts.mu.Lock()
		p, ok := ts.byHash[hash]
		age := time.Since(ts.read)
		fresh := ts.byHash != nil && age < tokensFresh
		if ok && fresh || !ok && ts.byHash != nil && (age < tokensMissReload || try > 0) {
			ts.mu.Unlock()
			return p, ok
		}
		doing := ts.doing
		if doing == nil {
			doing = make(chan struct{})
			ts.doing = doing
			ts.mu.Unlock()
			s.readTokens(ctx, doing)
		} else {
			ts.mu.Unlock()
			select {
			case <-doing:
			case <-ctx.Done():
				return Principal{}, false
			}
		}
		if try > 0 {
			// The read failed (logged): a known token keeps working on the
			// copy it has.
			ts.mu.Lock()
			p, ok = ts.byHash[hash]
			ts.mu.Unlock()
			return p, ok
		}
	}
}

// readTokens reads every token not revoked into the set and closes done.
func (s *Server) readTokens(ctx context.Context, done chan struct{}) {
	ts := &s.tokenSet
	ts.loads.Add(1)
	// The read serves every request waiting for it: not cancelled with the
	// one that began it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	byHash := map[[sha256.Size]byte]Principal{}
	rows, err := s.cfg.Pool.Query(ctx, `SELECT hash, id, scope, coalesce(tenant_id, '00000000-0000-0000-0000-000000000000') FROM `+s.tokens+` WHERE revoked_at IS NULL`)
	if err == nil {
		var (
			hash []byte
			p    Principal
		)
		_, err = pgx.ForEachRow(rows, []any{&hash, &p.TokenID, &p.Scope, &p.Tenant}, func() error {
			if len(hash) == sha256.Size {
				byHash[[sha256.Size]byte(hash)] = p
			}
			return nil
		})
	}
	ts.mu.Lock()
	if err == nil {
		for h, p := range byHash {
			if at, ok := ts.revoked[p.TokenID]; ok && time.Since(at) < time.Minute {
				delete(byHash, h)
			}
		}
		ts.byHash, ts.read = byHash, time.Now()
	} else {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: error reading the tokens; the copy read before stays in use", slog.String("error", err.Error()))
		if ts.byHash == nil {
			ts.byHash = map[[sha256.Size]byte]Principal{}
		}
		// The next read is due at the next miss a second from now, not at
		// every request.
		ts.read = time.Now().Add(-tokensFresh + tokensMissReload)
	}
	ts.doing = nil
	ts.mu.Unlock()
	close(done)
}

// remember adds a token this process made to its copy at once (other
// processes find it at their next read).
func (s *Server) remember(token string, p Principal) {
	ts := &s.tokenSet
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.byHash != nil {
		ts.byHash[[sha256.Size]byte(tokenHash(token))] = p
	}
}

// forget drops a revoked token (by id) from this process's copy at once.
func (s *Server) forget(ids ...int64) {
	ts := &s.tokenSet
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.revoked == nil {
		ts.revoked = map[int64]time.Time{}
	}
	for id, at := range ts.revoked {
		if time.Since(at) > time.Minute {
			delete(ts.revoked, id)
		}
	}
	for _, id := range ids {
		ts.revoked[id] = time.Now()
	}
	for h, p := range ts.byHash {
		for _, id := range ids {
			if p.TokenID == id {
				delete(ts.byHash, h)
			}
		}
	}
}

// TokenAuth returns the Principal of r's bearer token, one of the
// service's tokens (POST /v1/tokens, --token-file), or
// ErrUnauthenticated. It is how the API authenticates unless
// Config.Authenticate is set; an Authenticate of a team's own may call it
// for the requests its own scheme does not claim.
func (s *Server) TokenAuth(r *http.Request) (Principal, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > 256 {
		return Principal{}, ErrUnauthenticated
	}
	// The set is keyed by the token's SHA-256: the lookup's timing can
	// tell only about hashes, which a caller without a token cannot aim.
	p, ok := s.lookup(r.Context(), token)
	if !ok {
		return Principal{}, ErrUnauthenticated
	}
	return p, nil
}

// tokenInfo is a token as GET /v1/tokens lists it (never the token).
type tokenInfo struct {
	ID        int64      `json:"id"`
	Name      string     `json:"name"`
	Scope     Scope      `json:"scope"`
	Tenant    *uuid.UUID `json:"tenant,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

func tokenNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no token %s: ids are the numbers GET /v1/tokens lists", id)}
}

func (s *Server) listTokens(_ http.ResponseWriter, r *http.Request) (int, any) {
	p := principalOf(r)
	where, args := "true", []any{}
	if p.Scope != ScopeAdmin {
		where, args = "tenant_id = $1", []any{p.Tenant}
	}
	if r.URL.Query().Get("revoked") != "true" {
		where += " AND revoked_at IS NULL"
	}
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT id, name, scope, tenant_id, created_at, revoked_at FROM `+s.tokens+` WHERE `+where+` ORDER BY id`, args...)
	if err != nil {
		return internal(err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tokenInfo])
	if err != nil {
		return internal(err)
	}
	if list == nil {
		list = []tokenInfo{}
	}
	return http.StatusOK, map[string]any{"tokens": list}
}

// deleteToken revokes a token for good: its row stays, marked revoked, so
// that the same token (a --token-file's) is refused after any restart.
func (s *Server) deleteToken(_ http.ResponseWriter, r *http.Request) (int, any) {
	p := principalOf(r)
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return 0, tokenNotFound(strconv.Quote(r.PathValue("id")))
	}
	// A tenant's token revokes its tenant's tokens only: another tenant's
	// token is "not found", as if it did not exist.
	tag, err := s.cfg.Pool.Exec(r.Context(), `UPDATE `+s.tokens+` SET revoked_at = clock_timestamp()
WHERE id = $1 AND revoked_at IS NULL AND ($2::uuid IS NULL OR tenant_id = $2)`, id, p.tenantFilter())
	if err != nil {
		return internal(err)
	}
	if tag.RowsAffected() == 0 {
		return 0, tokenNotFound(strconv.FormatInt(id, 10))
	}
	s.forget(id)
	return http.StatusOK, map[string]any{"id": id, "revoked": true}
}

// tenantFilter is nil for an admin (every tenant) and the token's tenant
// otherwise.
func (p Principal) tenantFilter() *uuid.UUID {
	if p.Scope == ScopeAdmin {
		return nil
	}
	return &p.Tenant
}

type tokenInput struct {
	Name   string  `json:"name"`
	Scope  Scope   `json:"scope"`
	Tenant *string `json:"tenant"`
}

func (s *Server) newToken(_ http.ResponseWriter, r *http.Request) (int, any) {
	p := principalOf(r)
	var in tokenInput
	if r.ContentLength != 0 {
		if e := decode(r, &in); e != nil {
			return 0, e
		}
	}
	if len(in.Name) > 200 {
		return 0, badField("name", "must be at most 200 bytes")
	}
	var tenant *uuid.UUID
	if in.Tenant != nil {
		id, err := uuid.Parse(*in.Tenant)
		if err != nil {
			return 0, badField("tenant", "must be a tenant's id (POST /v1/tenants answers it), got %q", *in.Tenant)
		}
		tenant = &id
	}
	if p.Scope != ScopeAdmin {
		// A tenant's token makes tokens of its own tenant, never wider.
		if tenant != nil && *tenant != p.Tenant {
			return 0, &apiError{status: http.StatusForbidden, Field: "tenant", Error: "tenant: a tenant's token makes tokens of its own tenant only; leave tenant out"}
		}
		tenant = &p.Tenant
		if in.Scope == ScopeAdmin {
			return 0, &apiError{status: http.StatusForbidden, Field: "scope", Error: `scope: a tenant's token makes "tenant" and "read" tokens only`}
		}
	}
	switch {
	case in.Scope == "" && tenant == nil:
		in.Scope = ScopeAdmin
	case in.Scope == "":
		in.Scope = ScopeTenant
	case in.Scope != ScopeAdmin && in.Scope != ScopeTenant && in.Scope != ScopeRead:
		return 0, badField("scope", `must be "admin", "tenant" or "read", got %q`, in.Scope)
	}
	if in.Scope == ScopeAdmin && tenant != nil {
		return 0, badField("scope", `"admin" tokens belong to no tenant: leave tenant out, or ask for scope "tenant" or "read"`)
	}
	if in.Scope != ScopeAdmin && tenant == nil {
		return 0, badField("tenant", "is required for a %q token: the tenant's id", in.Scope)
	}
	if tenant != nil {
		if _, e := s.liveTenant(r.Context(), *tenant); e != nil {
			return 0, e
		}
	}
	token, id, err := s.addToken(r.Context(), in.Name, in.Scope, tenant)
	if err != nil {
		return internal(err)
	}
	return http.StatusCreated, map[string]any{"id": id, "token": token, "name": in.Name, "scope": in.Scope, "tenant": tenant,
		"note": "shown once; the server keeps only its hash"}
}

// AddToken makes a new admin token named name and returns it.
func (s *Server) AddToken(ctx context.Context, name string) (string, error) {
	token, _, err := s.addToken(ctx, name, ScopeAdmin, nil)
	return token, err
}

// AddTenantToken makes a new token of tenant with scope (ScopeTenant or
// ScopeRead) and returns it.
func (s *Server) AddTenantToken(ctx context.Context, tenant uuid.UUID, name string, scope Scope) (string, error) {
	if scope != ScopeTenant && scope != ScopeRead {
		return "", fmt.Errorf("serve: a tenant's token has scope %q or %q, got %q", ScopeTenant, ScopeRead, scope)
	}
	token, _, err := s.addToken(ctx, name, scope, &tenant)
	return token, err
}

func (s *Server) addToken(ctx context.Context, name string, scope Scope, tenant *uuid.UUID) (string, int64, error) {
	token, id, err := addTokenTx(ctx, s.cfg.Pool, s.tokens, name, scope, tenant)
	if err == nil {
		p := Principal{TokenID: id, Scope: scope}
		if tenant != nil {
			p.Tenant = *tenant
		}
		s.remember(token, p)
	}
	return token, id, err
}

func addTokenTx(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table, name string, scope Scope, tenant *uuid.UUID,
) (string, int64, error) {
	token, err := newTokenValue()
	if err != nil {
		return "", 0, err
	}
	var id int64
	err = db.QueryRow(ctx, `INSERT INTO `+table+` (hash, name, scope, tenant_id) VALUES ($1, $2, $3, $4) RETURNING id`, tokenHash(token), name, scope, tenant).Scan(&id)
	return token, id, err
}

// TokenFile makes sure the admin token in path is accepted: when the file
// is missing, it writes a new random token there (mode 0600); either way
// the token's hash is stored. It reports whether it wrote the file. A
// token that was revoked is not accepted again: TokenFile returns an
// error wrapping ErrTokenRevoked, and the server does not start.
func (s *Server) TokenFile(ctx context.Context, path string) (bool, error) {
	b, err := os.ReadFile(path)
	created := false
	var token string
	switch {
	case errors.Is(err, os.ErrNotExist):
		if token, err = newTokenValue(); err != nil {
			return false, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			// Another process on this host wrote it first: accept its token
			// once it is complete.
			time.Sleep(100 * time.Millisecond)
			return s.TokenFile(ctx, path)
		}
		if err != nil {
			return false, fmt.Errorf("--token-file: %w", err)
		}
		if _, err := f.WriteString(token + "\n"); err != nil {
			_ = f.Close()
			return false, fmt.Errorf("--token-file: %w", err)
		}
		if err := f.Close(); err != nil {
			return false, fmt.Errorf("--token-file: %w", err)
		}
		created = true
	case err != nil:
		return false, fmt.Errorf("--token-file: %w", err)
	default:
		token = strings.TrimSpace(string(b))
		if len(token) < 16 {
			return false, fmt.Errorf("--token-file %s holds a token of %d characters; tokens are at least 16 (delete the file for a new one)", path, len(token))
		}
	}
	var (
		revoked *time.Time
		scope   Scope
	)
	// The row made here, or the one there was. A process storing the same
	// file's token at once may leave neither visible to this statement's
	// snapshot: the second try sees its row.
	for try := 0; ; try++ {
		err = s.cfg.Pool.QueryRow(ctx, `WITH ins AS (
	INSERT INTO `+s.tokens+` (hash, name, scope) VALUES ($1, 'token-file', 'admin') ON CONFLICT (hash) DO NOTHING RETURNING revoked_at, scope)
SELECT revoked_at, scope FROM ins UNION ALL SELECT revoked_at, scope FROM `+s.tokens+` WHERE hash = $1`, tokenHash(token)).Scan(&revoked, &scope)
		if !errors.Is(err, pgx.ErrNoRows) || try > 0 {
			break
		}
	}
	if err != nil {
		return created, fmt.Errorf("error storing the --token-file token: %w", err)
	}
	if revoked != nil {
		return false, fmt.Errorf("%s (revoked at %s): %w", path, revoked.UTC().Format(time.RFC3339), ErrTokenRevoked)
	}
	if scope != ScopeAdmin {
		return false, fmt.Errorf("--token-file %s holds a %q token of a tenant; the file's token is the administrator's: give another file", path, scope)
	}
	s.tokenSet.mu.Lock()
	s.tokenSet.read = time.Time{} // this process reads it at its next request
	s.tokenSet.mu.Unlock()
	return created, nil
}
