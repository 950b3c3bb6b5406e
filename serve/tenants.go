package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TenantsTable holds the tenants: the accounts of the service, each
// owning its schedules, its tokens and its signing secret.
const TenantsTable = "riverslot_tenant"

// DefaultTenantName is the tenant Migrate makes: schedules made before
// tenants existed belong to it, and an admin token's schedules do unless
// the request names another tenant.
const DefaultTenantName = "default"

// DefaultMaxSchedules is a new tenant's schedules quota unless
// Config.TenantQuota or the request gives one.
const DefaultMaxSchedules = 10_000

// TenantQuota is what a tenant may have. Zero is no quota.
type TenantQuota struct {
	// MaxSchedules bounds the tenant's schedules not deleted.
	MaxSchedules int `json:"max_schedules"`
	// MaxCallsPerSecond bounds the calls per second its schedules plan
	// over all its periods (a schedule of period p plans 1/p a second): a
	// create or a change of period past it is refused.
	MaxCallsPerSecond float64 `json:"max_calls_per_second"`
}

// Tenant is a tenant as the API reads it.
type Tenant struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
	TenantQuota
	// Schedules counts its schedules not deleted, and
	// PlannedCallsPerSecond the calls a second they plan.
	Schedules             int64      `json:"schedules"`
	PlannedCallsPerSecond float64    `json:"planned_calls_per_second"`
	CreatedAt             time.Time  `json:"created_at"`
	DeletedAt             *time.Time `json:"deleted_at,omitempty"`
}

// plannedNCPS is the SQL of the calls a schedule of period_ms plans, in
// billionths of a call a second (a monthly schedule's month counted as
// 30.436875 days): integers, so that the tenant's sum, added to and taken
// from, never drifts.
func plannedNCPS(periodMS string) string {
	return `(CASE WHEN ` + periodMS + ` > 0 THEN round(1e12 / ` + periodMS + `)::bigint ELSE 380 END)`
}

func tenantsDDL(t string) []string {
	return []string{`CREATE TABLE IF NOT EXISTS ` + t + ` (
	id uuid PRIMARY KEY,
	name text NOT NULL,
	max_schedules int NOT NULL DEFAULT 0,
	max_calls_per_second double precision NOT NULL DEFAULT 0,
	schedules bigint NOT NULL DEFAULT 0,
	planned_ncps bigint NOT NULL DEFAULT 0,
	signing_secret text NOT NULL,
	previous_secret text,
	previous_until timestamptz,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	deleted_at timestamptz
)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS riverslot_tenant_name ON ` + t + ` (name) WHERE deleted_at IS NULL`,
	}
}

// tenantColumns are a tenant's columns as scanTenant reads them. Its use
// is counted on its row only while it has a quota (chargeTenant); a
// tenant without one is counted here, from its schedules.
func (s *Server) tenantColumns() string {
	live := func(expr string) string {
		return `(SELECT ` + expr + ` FROM ` + s.schedules + ` x WHERE x.tenant_id = ` + s.tenants + `.id AND x.deleted_at IS NULL)`
	}
	return `id, name, max_schedules, max_calls_per_second,
	CASE WHEN max_schedules > 0 OR max_calls_per_second > 0 THEN schedules ELSE ` + live(`count(*)`) + ` END,
	(CASE WHEN max_schedules > 0 OR max_calls_per_second > 0 THEN planned_ncps ELSE ` + live(`coalesce(sum(`+plannedNCPS("x.period_ms")+`), 0)`) + ` END)::float8 / 1e9,
	created_at, deleted_at`
}

func scanTenant(row pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.Name, &t.MaxSchedules, &t.MaxCallsPerSecond, &t.Schedules, &t.PlannedCallsPerSecond, &t.CreatedAt, &t.DeletedAt)
	return t, err
}

func tenantNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no tenant %s: ids are the ones GET /v1/tenants lists", id)}
}

// liveTenant returns the tenant id, not deleted.
func (s *Server) liveTenant(ctx context.Context, id uuid.UUID) (Tenant, *apiError) {
	rows, err := s.cfg.Pool.Query(ctx, `SELECT `+s.tenantColumns()+` FROM `+s.tenants+` WHERE id = $1 AND deleted_at IS NULL`, id)
	if err != nil {
		return Tenant{}, &apiError{status: http.StatusInternalServerError, cause: err}
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, &apiError{status: http.StatusNotFound, Field: "tenant", Error: fmt.Sprintf("tenant: no tenant %s (GET /v1/tenants lists them)", id)}
	}
	if err != nil {
		return Tenant{}, &apiError{status: http.StatusInternalServerError, cause: err}
	}
	return t, nil
}

// DefaultTenant returns the id of the tenant named DefaultTenantName.
func (s *Server) DefaultTenant(ctx context.Context) (uuid.UUID, error) {
	if p := s.defaultTenant.Load(); p != nil {
		return *p, nil
	}
	var id uuid.UUID
	if err := s.cfg.Pool.QueryRow(ctx, `SELECT id FROM `+s.tenants+` WHERE name = $1 AND deleted_at IS NULL`, DefaultTenantName).Scan(&id); err != nil {
		return uuid.Nil, fmt.Errorf("error reading the default tenant (run serve.Migrate): %w", err)
	}
	s.defaultTenant.Store(&id)
	return id, nil
}

type tenantInput struct {
	Name              *string  `json:"name"`
	MaxSchedules      *int     `json:"max_schedules"`
	MaxCallsPerSecond *float64 `json:"max_calls_per_second"`
}

// check validates in's fields.
func (in tenantInput) check(create bool) *apiError {
	if in.Name != nil || create {
		if in.Name == nil || strings.TrimSpace(*in.Name) == "" {
			return badField("name", `is required: a name for the tenant, e.g. "acme"`)
		}
		if len(*in.Name) > 200 || !validHeaderValue(*in.Name) {
			return badField("name", "must be one line of at most 200 printable bytes")
		}
	}
	if in.MaxSchedules != nil && (*in.MaxSchedules < 0 || *in.MaxSchedules > 10_000_000) {
		return badField("max_schedules", "must be between 0 (no quota) and 10000000, got %d", *in.MaxSchedules)
	}
	if in.MaxCallsPerSecond != nil && (*in.MaxCallsPerSecond < 0 || *in.MaxCallsPerSecond > 1e6) {
		return badField("max_calls_per_second", "must be between 0 (no quota) and 1000000, got %g", *in.MaxCallsPerSecond)
	}
	return nil
}

func nameTaken(name string) *apiError {
	return &apiError{status: http.StatusConflict, Field: "name", Error: fmt.Sprintf("name: a tenant named %q exists; names are unique", name)}
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// createTenant serves POST /v1/tenants: the tenant, its first token
// (scope tenant) and its signing secret, the two shown once.
func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) (int, any) {
	var in tenantInput
	if e := decode(r, &in); e != nil {
		return 0, e
	}
	if e := in.check(true); e != nil {
		return 0, e
	}
	q := s.cfg.TenantQuota
	if in.MaxSchedules != nil {
		q.MaxSchedules = *in.MaxSchedules
	}
	if in.MaxCallsPerSecond != nil {
		q.MaxCallsPerSecond = *in.MaxCallsPerSecond
	}
	secret, err := newSigningSecret()
	if err != nil {
		return internal(err)
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	rows, err := tx.Query(r.Context(), `INSERT INTO `+s.tenants+` (id, name, max_schedules, max_calls_per_second, signing_secret)
VALUES (gen_random_uuid(), $1, $2, $3, $4) RETURNING `+s.tenantColumns(), *in.Name, q.MaxSchedules, q.MaxCallsPerSecond, secret)
	if err != nil {
		return internal(err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	if isUniqueViolation(err) {
		return 0, nameTaken(*in.Name)
	}
	if err != nil {
		return internal(err)
	}
	token, tokenID, err := addTokenTx(r.Context(), tx, s.tokens, *in.Name, ScopeTenant, &t.ID)
	if err != nil {
		return internal(err)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	s.remember(token, Principal{TokenID: tokenID, Scope: ScopeTenant, Tenant: t.ID})
	w.Header().Set("Location", "/v1/tenants/"+t.ID.String())
	return http.StatusCreated, struct {
		Tenant
		Token         string `json:"token"`
		TokenID       int64  `json:"token_id"`
		SigningSecret string `json:"signing_secret"`
		Note          string `json:"note"`
	}{t, token, tokenID, secret, "token and signing_secret are shown once: the server keeps the token's hash only; GET /v1/signing-secret with a tenant token shows the secret again"}
}

func (s *Server) listTenants(_ http.ResponseWriter, r *http.Request) (int, any) {
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT `+s.tenantColumns()+` FROM `+s.tenants+` WHERE deleted_at IS NULL ORDER BY name`)
	if err != nil {
		return internal(err)
	}
	list, err := pgx.CollectRows(rows, scanTenant)
	if err != nil {
		return internal(err)
	}
	if list == nil {
		list = []Tenant{}
	}
	return http.StatusOK, map[string]any{"tenants": list}
}

func tenantPathID(r *http.Request) (uuid.UUID, *apiError) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, tenantNotFound(fmt.Sprintf("%q", r.PathValue("id")))
	}
	return id, nil
}

func (s *Server) getTenant(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := tenantPathID(r)
	if e != nil {
		return 0, e
	}
	t, e := s.liveTenant(r.Context(), id)
	if e != nil {
		if e.status == http.StatusNotFound {
			return 0, tenantNotFound(id.String())
		}
		return 0, e
	}
	return http.StatusOK, t
}

// patchTenant changes a tenant's name or quotas. A quota below what the
// tenant has refuses new schedules; it deletes none.
func (s *Server) patchTenant(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := tenantPathID(r)
	if e != nil {
		return 0, e
	}
	var in tenantInput
	if e := decode(r, &in); e != nil {
		return 0, e
	}
	if e := in.check(false); e != nil {
		return 0, e
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	// FOR UPDATE waits for the creates and deletes in flight (each holds
	// the row FOR KEY SHARE): a quota set now counts every one of them.
	var counted bool
	err = tx.QueryRow(r.Context(), `SELECT max_schedules > 0 OR max_calls_per_second > 0 FROM `+s.tenants+` WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, id).Scan(&counted)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, tenantNotFound(id.String())
	}
	if err != nil {
		return internal(err)
	}
	// Not counted on its row until now: its counts from its schedules,
	// which no create or delete changes while the row is locked.
	var live struct{ schedules, ncps *int64 }
	if !counted {
		var n, ncps int64
		if err := tx.QueryRow(r.Context(), `SELECT count(*), coalesce(sum(`+plannedNCPS("period_ms")+`), 0)::bigint FROM `+s.schedules+`
WHERE tenant_id = $1 AND deleted_at IS NULL`, id).Scan(&n, &ncps); err != nil {
			return internal(err)
		}
		live.schedules, live.ncps = &n, &ncps
	}
	rows, err := tx.Query(r.Context(), `UPDATE `+s.tenants+` SET name = coalesce($2, name), max_schedules = coalesce($3, max_schedules),
	max_calls_per_second = coalesce($4, max_calls_per_second), schedules = coalesce($5, schedules), planned_ncps = coalesce($6, planned_ncps)
WHERE id = $1 RETURNING `+s.tenantColumns(), id, in.Name, in.MaxSchedules, in.MaxCallsPerSecond, live.schedules, live.ncps)
	if err != nil {
		return internal(err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTenant)
	switch {
	case isUniqueViolation(err):
		return 0, nameTaken(*in.Name)
	case err != nil:
		return internal(err)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	return http.StatusOK, t
}

// deleteTenant deletes a tenant: its schedules are deleted (their history
// kept for the server's History) and its tokens revoked, in one
// transaction.
func (s *Server) deleteTenant(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := tenantPathID(r)
	if e != nil {
		return 0, e
	}
	def, err := s.DefaultTenant(r.Context())
	if err != nil {
		return internal(err)
	}
	if id == def {
		return 0, &apiError{status: http.StatusBadRequest, Field: "id", Error: "id: the default tenant holds the admin's schedules and is never deleted; delete its schedules instead"}
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	tag, err := tx.Exec(r.Context(), `UPDATE `+s.tenants+` SET deleted_at = clock_timestamp(), schedules = 0, planned_ncps = 0 WHERE id = $1 AND deleted_at IS NULL`, id)
	if err != nil {
		return internal(err)
	}
	if tag.RowsAffected() == 0 {
		return 0, tenantNotFound(id.String())
	}
	deleted, err := tx.Exec(r.Context(), `UPDATE `+s.schedules+` SET deleted_at = clock_timestamp(), updated_at = clock_timestamp() WHERE tenant_id = $1 AND deleted_at IS NULL`, id)
	if err != nil {
		return internal(err)
	}
	rows, err := tx.Query(r.Context(), `UPDATE `+s.tokens+` SET revoked_at = clock_timestamp() WHERE tenant_id = $1 AND revoked_at IS NULL RETURNING id`, id)
	if err != nil {
		return internal(err)
	}
	revoked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return internal(err)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	s.forget(revoked...)
	return http.StatusOK, map[string]any{"id": id, "deleted": true, "schedules_deleted": deleted.RowsAffected(), "tokens_revoked": len(revoked)}
}

// me serves GET /v1/me: the token's scope and tenant, with its quotas
// and use.
func (s *Server) me(_ http.ResponseWriter, r *http.Request) (int, any) {
	p := principalOf(r)
	out := map[string]any{"token_id": p.TokenID, "scope": p.Scope}
	if p.Scope != ScopeAdmin {
		t, e := s.liveTenant(r.Context(), p.Tenant)
		if e != nil {
			return 0, e
		}
		out["tenant"] = t
	}
	return http.StatusOK, out
}

// quotaExceeded is the 429 of a tenant's quota.
func quotaExceeded(quota string, limit any, detail string) *apiError {
	return &apiError{status: http.StatusTooManyRequests, Quota: quota,
		Error: fmt.Sprintf("quota %s (%v) reached: %s; an admin raises it with PATCH /v1/tenants/{id}", quota, limit, detail)}
}

// chargeTenant adds a schedule of periodMS (n = 1) or takes one away (n =
// -1), or moves one between periods (n = 0, oldPeriodMS given), on the
// counts of its tenant when it has a quota, inside tx: the tenant's row
// stays locked until tx ends, so two requests cannot both take the last
// place of a quota. Only a change that adds is checked against the
// quotas.
func (s *Server) chargeTenant(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, n int, periodMS, oldPeriodMS int64) *apiError {
	var (
		schedules, maxSchedules int64
		ncps                    int64
		maxCPS                  float64
	)
	// FOR KEY SHARE: creates of one tenant do not wait for each other,
	// and a change of its quotas (FOR UPDATE) waits for them. A tenant
	// without a quota is not counted on its row (tenantColumns counts it
	// from its schedules): its creates never queue on it.
	err := tx.QueryRow(ctx, `SELECT max_schedules, max_calls_per_second FROM `+s.tenants+` WHERE id = $1 AND deleted_at IS NULL FOR KEY SHARE`, tenant).Scan(&maxSchedules, &maxCPS)
	if errors.Is(err, pgx.ErrNoRows) {
		return &apiError{status: http.StatusNotFound, Field: "tenant", Error: fmt.Sprintf("tenant: no tenant %s (deleted, or never made)", tenant)}
	}
	if err != nil {
		return &apiError{status: http.StatusInternalServerError, cause: err}
	}
	if maxSchedules == 0 && maxCPS == 0 {
		return nil
	}
	err = tx.QueryRow(ctx, `UPDATE `+s.tenants+` SET schedules = schedules + $2,
	planned_ncps = planned_ncps + $2 * `+plannedNCPS("$3::bigint")+` + CASE WHEN $2 = 0 THEN `+plannedNCPS("$3::bigint")+` - `+plannedNCPS("$4::bigint")+` ELSE 0 END
WHERE id = $1 AND deleted_at IS NULL RETURNING schedules, max_schedules, planned_ncps, max_calls_per_second`, tenant, n, periodMS, oldPeriodMS).
		Scan(&schedules, &maxSchedules, &ncps, &maxCPS)
	if errors.Is(err, pgx.ErrNoRows) {
		return &apiError{status: http.StatusNotFound, Field: "tenant", Error: fmt.Sprintf("tenant: no tenant %s (deleted, or never made)", tenant)}
	}
	if err != nil {
		return &apiError{status: http.StatusInternalServerError, cause: err}
	}
	if n > 0 && maxSchedules > 0 && schedules > maxSchedules {
		return quotaExceeded("max_schedules", maxSchedules, fmt.Sprintf("the tenant has %d schedules", schedules-1))
	}
	if (n > 0 || n == 0 && faster(periodMS, oldPeriodMS)) && maxCPS > 0 && float64(ncps)/1e9 > maxCPS {
		return quotaExceeded("max_calls_per_second", maxCPS, fmt.Sprintf("with this schedule the tenant's schedules would plan %.3f calls a second", float64(ncps)/1e9))
	}
	return nil
}

// faster reports whether a period of ms plans more calls than one of
// oldMS (a monthly period, -1, the fewest).
func faster(ms, oldMS int64) bool {
	switch {
	case ms < 0:
		return false
	case oldMS < 0:
		return true
	}
	return ms < oldMS
}
