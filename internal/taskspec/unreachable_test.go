package taskspec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestUnreachable tells an outage of the database from an error of the
// query or of the job itself: a job's own timeout (a context deadline,
// which is also a net.Error) must not be waited through as an outage.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"canceled", fmt.Errorf("query: %w", context.Canceled), false},
		{"refused", fmt.Errorf("dial: %w", refused), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"plain", errors.New("upstream said no"), false},
	} {
		require.Equal(t, tt.want, Unreachable(tt.err), tt.name)
	}
}

func TestUnreachableWaitFor(t *testing.T) {
	t.Parallel()
	for snoozes := range 12 {
		base := min(UnreachableWait<<min(snoozes, 5), UnreachableWaitMax)
		for range 50 {
			d := UnreachableWaitFor(snoozes)
			require.GreaterOrEqual(t, d, base*3/4, "snoozes %d", snoozes)
			require.LessOrEqual(t, d, base*5/4, "snoozes %d", snoozes)
		}
	}
	require.LessOrEqual(t, UnreachableWaitFor(100), UnreachableWaitMax*5/4)
	// Per job, each wait longer than the last (beyond the jitter), until
	// the cap; another job starts again at the first.
	var w Waits
	for i, want := range []time.Duration{UnreachableWait, 2 * UnreachableWait, 4 * UnreachableWait} {
		d := w.Next(7)
		require.GreaterOrEqual(t, d, want*3/4, "wait %d", i+1)
		require.LessOrEqual(t, d, want*5/4, "wait %d", i+1)
	}
	require.LessOrEqual(t, w.Next(8), UnreachableWait*5/4)
	require.Equal(t, 4, w.Add(7))
}
