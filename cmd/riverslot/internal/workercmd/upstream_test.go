package workercmd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/syncjob"
)

// TestUpstreamCaller calls a fake upstream as a sync does and checks what
// each answer becomes: a 2xx nil, a 429 riverslot.Throttled for its
// Retry-After, anything else an error naming the status.
func TestUpstreamCaller(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		base string
		mu   sync.Mutex
		// paths and sentAt are what the fake upstream received.
		paths  []string
		sentAt []string
	}
	setup := func(t *testing.T, status int, retryAfter string) *testBundle {
		t.Helper()

		b := &testBundle{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.mu.Lock()
			b.paths = append(b.paths, r.URL.EscapedPath())
			b.sentAt = append(b.sentAt, r.Header.Get("X-Riverslot-Sent-At"))
			b.mu.Unlock()
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		b.base = srv.URL + "/banks/"
		return b
	}

	t.Run("NoBase", func(t *testing.T) {
		t.Parallel()

		require.NoError(t, upstreamCaller("")(ctx, "bank a"))
	})

	t.Run("Success", func(t *testing.T) {
		t.Parallel()

		b := setup(t, http.StatusNoContent, "")
		require.NoError(t, upstreamCaller(b.base)(ctx, "bank a/b"))
		require.Equal(t, []string{"/banks/bank%20a%2Fb"}, b.paths, "one call, the key escaped, no doubled slash")
		sent, err := time.Parse(time.RFC3339Nano, b.sentAt[0])
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), sent, time.Minute)
	})

	t.Run("Throttled", func(t *testing.T) {
		t.Parallel()

		for _, tt := range []struct {
			retryAfter string
			want       time.Duration
		}{
			{"7", 7 * time.Second},
			{"", time.Second},
			{"soon", time.Second},
		} {
			b := setup(t, http.StatusTooManyRequests, tt.retryAfter)
			err := upstreamCaller(b.base)(ctx, "bank")
			var throttled *syncjob.ThrottledError
			require.True(t, errors.As(err, &throttled), "Retry-After %q: %v", tt.retryAfter, err)
			require.Equal(t, tt.want, throttled.RetryAfter, "Retry-After %q", tt.retryAfter)
			require.EqualError(t, throttled.Err, `upstream "bank" answered 429`)
		}
	})

	t.Run("Failed", func(t *testing.T) {
		t.Parallel()

		b := setup(t, http.StatusBadGateway, "")
		err := upstreamCaller(b.base)(ctx, "bank")
		require.EqualError(t, err, `upstream "bank" answered 502`)
		var throttled *syncjob.ThrottledError
		require.False(t, errors.As(err, &throttled))
	})
}
