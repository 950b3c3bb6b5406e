package serve_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, signedArrival{id: r.Header.Get(serve.HeaderWebhookID), verified: receiver.Verify(body, r.Header)})
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
		require.NoError(t, c.verified, "call %d verifies with the server's secret", i)
		require.Error(t, forged[i], "call %d does not verify with another secret", i)
		require.True(t, strings.HasPrefix(c.id, "msg_"+sc.ID.String()+"_"), c.id)
	}
	require.Equal(t, arrivals[0].id, arrivals[1].id, "the retry carries its call's webhook-id")
	require.NotEqual(t, arrivals[1].id, arrivals[2].id, "the next period's call carries another")
}
