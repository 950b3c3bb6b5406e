package serve_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/serve"
)

// signedArrival is one call as a receiver saw it.
type signedArrival struct {
	id       string
	verified error
	// byHand is the signature computed here from the scheme's text (not
	// the library the server signs with); header the one received.
	byHand, header string
	// skew is how far webhook-timestamp is from the arrival.
	skew time.Duration
}

// signByHand is Standard Webhooks' v1 signature, written from the
// specification: base64 of HMAC-SHA256, keyed with the base64-decoded
// secret after "whsec_", over "id.timestamp.body".
func signByHand(t *testing.T, secret, id, timestamp string, body []byte) string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// TestSignedCalls: every call carries Standard Webhooks' headers, which a
// receiver verifies with the Standard Webhooks library and the secret the
// API hands out; a retry of a period's call carries the same webhook-id
// (the receiver's idempotency key), the next period's call another; a
// secret other than the server's does not verify; a schedule cannot set
// the signature headers itself.
func TestSignedCalls(t *testing.T) {
	t.Parallel()
	const period = 24 * time.Second
	a := setup(t, &serve.Guard{AllowPrivate: true}, period)

	var secret struct {
		Secret string `json:"secret"`
	}
	require.Equal(t, http.StatusOK, a.do("GET", "/v1/signing-secret", nil, &secret))
	require.True(t, strings.HasPrefix(secret.Secret, "whsec_"), secret.Secret)
	receiver, err := standardwebhooks.NewWebhook(secret.Secret)
	require.NoError(t, err)
	forger, err := standardwebhooks.NewWebhook("whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		arrivals []signedArrival
		forged   []error
		// The tenant's secret after the rotation below.
		rotated struct {
			Secret             string    `json:"secret"`
			PreviousSignsUntil time.Time `json:"previous_signs_until"`
		}
		newReceiver *standardwebhooks.Webhook
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		ts, _ := strconv.ParseInt(r.Header.Get(serve.HeaderWebhookTimestamp), 10, 64)
		id, stamp := r.Header.Get(serve.HeaderWebhookID), r.Header.Get(serve.HeaderWebhookTimestamp)
		arrivals = append(arrivals, signedArrival{id: id, verified: errors.Join(receiver.Verify(body, r.Header), newReceiver.Verify(body, r.Header)),
			byHand: signByHand(t, rotated.Secret, id, stamp, body) + " " + signByHand(t, secret.Secret, id, stamp, body),
			header: r.Header.Get(serve.HeaderWebhookSignature), skew: time.Since(time.Unix(ts, 0))})
		forged = append(forged, forger.Verify(body, r.Header))
		if len(arrivals) == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the first call fails: its retry follows
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ts.Close)

	var e apiErr
	require.Equal(t, http.StatusBadRequest, a.do("POST", "/v1/schedules", map[string]any{"url": ts.URL + "/hook", "period": "24s",
		"headers": map[string]string{"Webhook-Signature": "v1,forged"}}, &e))
	require.Equal(t, "headers", e.Field, e.Error)
	var sc serve.Schedule
	require.Equal(t, http.StatusCreated, a.do("POST", "/v1/schedules", map[string]any{"url": ts.URL + "/hook", "period": "24s", "method": "POST",
		"body": `{"hello":"world"}`, "retries": 1, "timeout": "2s"}, &sc))
	// A rotation: every call then carries the new secret's signature and
	// the old one's, so a receiver still on the old secret verifies it,
	// and one on the new secret too.
	mu.Lock()
	require.Equal(t, http.StatusOK, a.do("POST", "/v1/signing-secret/rotate", nil, &rotated))
	require.NotEqual(t, secret.Secret, rotated.Secret)
	require.WithinDuration(t, time.Now().Add(serve.RotationOverlap), rotated.PreviousSignsUntil, time.Minute)
	newReceiver, err = standardwebhooks.NewWebhook(rotated.Secret)
	mu.Unlock()
	require.NoError(t, err)

	ctx := context.Background()
	config := &river.Config{Schema: a.srv.Schema(), FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, a.srv.Configure(config, 5))
	riverslottest.StartClient(ctx, t, a.srv.Pool(), config)
	riverslottest.WaitFor(t, 4*period, "a failed call, its retry and the next period's call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(arrivals) >= 3
	})

	mu.Lock()
	defer mu.Unlock()
	for i, c := range arrivals {
		require.NoError(t, c.verified, "call %d verifies with the tenant's old secret and its new one", i)
		require.Equal(t, c.byHand, c.header, "call %d: the signatures are the specification's, the new secret's first", i)
		require.Less(t, c.skew.Abs(), 5*time.Second, "call %d: webhook-timestamp is the time of the call", i)
		require.Error(t, forged[i], "call %d does not verify with another secret", i)
		require.True(t, strings.HasPrefix(c.id, "msg_"+sc.ID.String()+"_"), c.id)
	}
	require.Equal(t, arrivals[0].id, arrivals[1].id, "the retry carries its call's webhook-id")
	require.NotEqual(t, arrivals[1].id, arrivals[2].id, "the next period's call carries another")
}

// TestMigrateKeepsTheSecret: a schema of before tenants (one signing
// secret for the server) keeps signing with that secret: Migrate gives it
// to the default tenant, once, however many servers migrate at once.
func TestMigrateKeepsTheSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	table := pgx.Identifier{schema, serve.SigningTable}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+table+` (one boolean PRIMARY KEY DEFAULT true CHECK (one), secret text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	const old = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	_, err = pool.Exec(ctx, `INSERT INTO `+table+` (secret) VALUES ($1)`, old)
	require.NoError(t, err)
	require.NoError(t, serve.Migrate(ctx, pool, schema))
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = serve.Migrate(ctx, pool, schema) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var defaults int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, serve.TenantsTable}.Sanitize()+` WHERE name = 'default'`).Scan(&defaults))
	require.Equal(t, 1, defaults)
	srv, err := serve.New(serve.Config{Pool: pool, Schema: schema, Logger: riverslottest.Logger(t)})
	require.NoError(t, err)
	def, err := srv.DefaultTenant(ctx)
	require.NoError(t, err)
	secret, err := srv.SigningSecret(ctx, def)
	require.NoError(t, err)
	require.Equal(t, old, secret)
}
