package serve

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SigningTable held the one secret every call was signed with before
// each tenant had its own: Migrate gives it to the default tenant.
const SigningTable = "riverslot_signing_secret"

// RotationOverlap is how long a tenant's previous signing secret still
// signs after a rotation: every call carries both signatures meanwhile,
// so receivers can move to the new secret at their pace.
const RotationOverlap = 24 * time.Hour

// Headers of a signed call, as Standard Webhooks names them
// (https://www.standardwebhooks.com): the message id, the Unix time of
// the signature, and "v1,<base64 HMAC-SHA256 of id.timestamp.body>" (two
// of them, space-separated, while a rotated secret overlaps).
const (
	HeaderWebhookID        = standardwebhooks.HeaderWebhookID
	HeaderWebhookTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderWebhookSignature = standardwebhooks.HeaderWebhookSignature
)

// signingDDL creates the one-row table of the secret of before tenants.
func signingDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	secret text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`
}

// newSigningSecret is a new secret in Standard Webhooks' form
// "whsec_<base64 of 32 random bytes>".
func newSigningSecret() (string, error) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key[:]), nil
}

// SigningSecret returns the secret the calls of tenant's schedules are
// signed with, in Standard Webhooks' form "whsec_<base64>": the tenant
// gives it to its receivers, whose Standard Webhooks library (or the
// scheme's few lines of HMAC) then verifies each call. The API serves it
// to the tenant's tokens at GET /v1/signing-secret.
func (s *Server) SigningSecret(ctx context.Context, tenant uuid.UUID) (string, error) {
	var secret string
	err := s.cfg.Pool.QueryRow(ctx, `SELECT signing_secret FROM `+s.tenants+` WHERE id = $1 AND deleted_at IS NULL`, tenant).Scan(&secret)
	if err != nil {
		return "", fmt.Errorf("error reading tenant %s's signing secret: %w", tenant, err)
	}
	return secret, nil
}

// RotateSigningSecret gives tenant a new signing secret and returns it;
// the previous one still signs, beside it, until the time returned
// (RotationOverlap from now). A second rotation within the overlap ends
// the first's previous secret at once.
func (s *Server) RotateSigningSecret(ctx context.Context, tenant uuid.UUID) (string, time.Time, error) {
	fresh, err := newSigningSecret()
	if err != nil {
		return "", time.Time{}, err
	}
	var until time.Time
	err = s.cfg.Pool.QueryRow(ctx, `UPDATE `+s.tenants+` SET previous_secret = signing_secret, signing_secret = $2,
	previous_until = clock_timestamp() + $3 * interval '1 millisecond' WHERE id = $1 AND deleted_at IS NULL RETURNING previous_until`,
		tenant, fresh, RotationOverlap.Milliseconds()).Scan(&until)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("error rotating tenant %s's signing secret: %w", tenant, err)
	}
	return fresh, until, nil
}

// messageID is a call's Standard Webhooks message id: the schedule and
// the period's start, so a retry of the period's call carries the same
// id (the receiver's idempotency key) and the next period's call another.
func messageID(schedule uuid.UUID, periodStart time.Time) string {
	return "msg_" + schedule.String() + "_" + strconv.FormatInt(periodStart.Unix(), 10)
}

// sign sets the Standard Webhooks headers of req, whose body is body: one
// signature per secret (the tenant's, and its previous one while it
// overlaps).
func sign(req *http.Request, msgID string, body []byte, secrets []string) error {
	if len(secrets) == 0 {
		return errors.New("no signing secret")
	}
	now := time.Now()
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return fmt.Errorf("error reading the signing secret: %w", err)
		}
		sig, err := wh.Sign(msgID, now, body)
		if err != nil {
			return err
		}
		sigs = append(sigs, sig)
	}
	req.Header.Set(HeaderWebhookID, msgID)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
	return nil
}

// secretTenant is the tenant whose secret a request reads or rotates: the
// token's, or for an admin the ?tenant= one (default: the default
// tenant).
func (s *Server) secretTenant(r *http.Request) (uuid.UUID, *apiError) {
	p := principalOf(r)
	if p.Scope != ScopeAdmin {
		return p.Tenant, nil
	}
	if v := r.URL.Query().Get("tenant"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return uuid.Nil, badField("tenant", "must be a tenant's id, got %q", v)
		}
		return id, nil
	}
	id, err := s.DefaultTenant(r.Context())
	if err != nil {
		return uuid.Nil, &apiError{status: http.StatusInternalServerError, cause: err}
	}
	return id, nil
}

// apiSigningSecret serves GET /v1/signing-secret.
func (s *Server) apiSigningSecret(_ http.ResponseWriter, r *http.Request) (int, any) {
	tenant, e := s.secretTenant(r)
	if e != nil {
		return 0, e
	}
	var (
		secret string
		until  *time.Time
	)
	err := s.cfg.Pool.QueryRow(r.Context(), `SELECT signing_secret, CASE WHEN previous_until > clock_timestamp() THEN previous_until END FROM `+s.tenants+`
WHERE id = $1 AND deleted_at IS NULL`, tenant).Scan(&secret, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, tenantNotFound(tenant.String())
	}
	if err != nil {
		return internal(err)
	}
	out := map[string]any{"secret": secret, "tenant": tenant}
	if until != nil {
		out["previous_signs_until"] = until.UTC()
	}
	return http.StatusOK, out
}

// apiRotate serves POST /v1/signing-secret/rotate.
func (s *Server) apiRotate(_ http.ResponseWriter, r *http.Request) (int, any) {
	tenant, e := s.secretTenant(r)
	if e != nil {
		return 0, e
	}
	if _, e := s.liveTenant(r.Context(), tenant); e != nil {
		return 0, e
	}
	secret, until, err := s.RotateSigningSecret(r.Context(), tenant)
	if err != nil {
		return internal(err)
	}
	return http.StatusOK, map[string]any{"secret": secret, "tenant": tenant, "previous_signs_until": until.UTC(),
		"note": "calls carry a signature by each secret until previous_signs_until; move the receivers to the new secret before then"}
}
