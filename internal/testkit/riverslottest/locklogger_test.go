package riverslottest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLockLoggerNamesTheHolder: a warning of a timed-out statement brings
// a report of the sessions, where the session waiting on a row lock names
// the pid that holds it.
func TestLockLoggerNamesTheHolder(t *testing.T) {
	ctx := context.Background()
	pool := Pool(t)
	schema := EmptySchema(ctx, t, pool)
	table := pgx.Identifier{schema, "rows"}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY); INSERT INTO `+table+` VALUES (1)`)
	require.NoError(t, err)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	var holderPID int
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID))
	_, err = holder.Exec(ctx, `SELECT id FROM `+table+` WHERE id = 1 FOR UPDATE`)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := pool.Exec(wctx, `SELECT id FROM `+table+` WHERE id = 1 FOR UPDATE`)
		waiting <- err
	}()
	WaitFor(t, 10*time.Second, "the second session to wait on the lock", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, holderPID).Scan(&n))
		return n > 0
	})

	var buf syncBuffer
	h := &lockHandler{Handler: slog.NewTextHandler(&buf, nil), dump: &lockDump{pool: pool, log: slog.New(slog.NewTextHandler(&buf, nil))}}
	slog.New(h).Warn("JobScheduler: error scheduling jobs", slog.String("error", "context deadline exceeded"))
	WaitFor(t, 10*time.Second, "the sessions' report", func() bool {
		return bytes.Contains([]byte(buf.String()), []byte("sessions after a statement timed out"))
	})
	require.Contains(t, buf.String(), fmt.Sprintf("blocked_by={%d}", holderPID))
	require.Contains(t, buf.String(), "FOR UPDATE")
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-waiting)
}
