package serve

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SigningTable holds the secret every call is signed with.
const SigningTable = "riverslot_signing_secret"

// Headers of a signed call, as Standard Webhooks names them
// (https://www.standardwebhooks.com): the message id, the Unix time of
// the signature, and "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
const (
	HeaderWebhookID        = standardwebhooks.HeaderWebhookID
	HeaderWebhookTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderWebhookSignature = standardwebhooks.HeaderWebhookSignature
)

// signingDDL creates the one-row table of the signing secret.
func signingDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS ` + table + ` (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	secret text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`
}

// SigningSecret returns the secret the server signs every call with, in
// Standard Webhooks' form "whsec_<base64>": give it to the receivers,
// whose Standard Webhooks library (or the scheme's few lines of HMAC)
// then verifies each call. The server makes it on first use and keeps
// it in its schema, so every node and every restart signs alike. The
// API serves it at GET /v1/signing-secret.
func (s *Server) SigningSecret(ctx context.Context) (string, error) {
	if p := s.secret.Load(); p != nil {
		return *p, nil
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", err
	}
	fresh := "whsec_" + base64.StdEncoding.EncodeToString(key[:])
	var secret string
	// One statement: two nodes making it at once keep the first's. DO
	// UPDATE (to the same value) returns the row the other committed,
	// where DO NOTHING and a SELECT in the same statement would see no
	// row (the statement's snapshot predates the other's commit).
	err := s.cfg.Pool.QueryRow(ctx, `INSERT INTO `+s.signing+` AS t (secret) VALUES ($1)
ON CONFLICT (one) DO UPDATE SET secret = t.secret RETURNING secret`, fresh).Scan(&secret)
	if err != nil {
		return "", fmt.Errorf("error reading the signing secret (run serve.Migrate): %w", err)
	}
	s.secret.Store(&secret)
	return secret, nil
}

// messageID is a call's Standard Webhooks message id: the schedule and
// the period's start, so a retry of the period's call carries the same
// id (the receiver's idempotency key) and the next period's call another.
func messageID(schedule uuid.UUID, periodStart time.Time) string {
	return "msg_" + schedule.String() + "_" + strconv.FormatInt(periodStart.Unix(), 10)
}

// sign sets the Standard Webhooks headers of req, whose body is body.
func (s *Server) sign(ctx context.Context, req *http.Request, msgID string, body []byte) error {
	secret, err := s.SigningSecret(ctx)
	if err != nil {
		return err
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("error reading the signing secret: %w", err)
	}
	now := time.Now()
	sig, err := wh.Sign(msgID, now, body)
	if err != nil {
		return err
	}
	req.Header.Set(HeaderWebhookID, msgID)
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderWebhookSignature, sig)
	return nil
}

// apiSigningSecret serves GET /v1/signing-secret.
func (s *Server) apiSigningSecret(w http.ResponseWriter, r *http.Request) (int, any) {
	secret, err := s.SigningSecret(r.Context())
	if err != nil {
		return internal(err)
	}
	return http.StatusOK, map[string]string{"secret": secret}
}
