package riverslottest

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/syncjob"
)

// heldReplies is a loopback proxy to the test database that holds the
// server's replies to the client from hold until release: a write commits
// and its answer comes only when the test says, as on a machine too busy
// to read it before the caller's deadline.
type heldReplies struct {
	addr *net.TCPAddr
	mu   sync.Mutex
	gate chan struct{} // nil: replies pass
}

func startHeldReplies(t *testing.T, target string) *heldReplies {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &heldReplies{addr: ln.Addr().(*net.TCPAddr)} //nolint:forcetypeassert
	t.Cleanup(func() {
		_ = ln.Close()
		p.release()
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client, target)
		}
	}()
	return p
}

func (p *heldReplies) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

func (p *heldReplies) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

func (p *heldReplies) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestRecordContextKeepsTheCommit: a recording Sync whose INSERT commits
// while its answer comes after the job's context ended (its timeout). With
// the job's context the INSERT returns the context's error although the
// row is in (River would retry the job and record the account twice);
// RecordSync, through measure.RecordContext, waits for the answer and returns nil.
func TestRecordContextKeepsTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := Pool(t)
	schema := Schema(ctx, t, pool)
	CreateSyncedTable(ctx, t, pool, schema)
	table := pgx.Identifier{schema, "synced"}.Sanitize()
	insert := "INSERT INTO " + table + " (task, account_id, cycle_start) VALUES ($1, $2, $3)"
	start := time.Now().UTC().Truncate(time.Second)

	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	require.NoError(t, err)
	proxy := startHeldReplies(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = proxy.addr.IP.String(), uint16(proxy.addr.Port) //nolint:gosec // a loopback port
	cfg.MaxConns = 1
	// Two pools of one connection each, the INSERT prepared on both while
	// replies pass: then it is one round trip, and the first case's broken
	// connection does not touch the second's.
	pools := make([]*pgxpool.Pool, 2)
	for i := range pools {
		pools[i], err = NewPool(ctx, cfg.Copy())
		require.NoError(t, err)
		t.Cleanup(pools[i].Close)
		_, err = pools[i].Exec(ctx, insert, "warm", uuid.New(), start)
		require.NoError(t, err)
	}
	// run calls f with a context that ends once f's row has committed,
	// while the proxy holds the answer. With returnsHeld, f must return
	// while the answer is held (it can only learn of the cancel); else the
	// answer is let through after a moment, and f returns what it says.
	run := func(id uuid.UUID, returnsHeld bool, f func(ctx context.Context) error) error {
		proxy.hold()
		defer proxy.release()
		jobCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- f(jobCtx) }()
		WaitFor(t, 30*time.Second, "the row committed", func() bool {
			return Count(ctx, t, pool, "SELECT count(*) FROM "+table+" WHERE account_id = $1", id) == 1
		})
		cancel()
		wait := 200 * time.Millisecond
		if returnsHeld {
			wait = 30 * time.Second
		}
		select {
		case err := <-done:
			return err // returned before the answer came
		case <-time.After(wait):
			require.False(t, returnsHeld, "the call did not return within 30 s of its context's end")
		}
		proxy.release()
		return <-done
	}

	// The hazard, with the job's context.
	hazard := uuid.New()
	err = run(hazard, true, func(ctx context.Context) error {
		_, err := pools[0].Exec(ctx, insert, "t", hazard, start)
		return err
	})
	require.ErrorIs(t, err, context.Canceled, "with the job's context, the INSERT that committed returns the context's error")

	// RecordSync: the same, and the INSERT's real outcome.
	id := uuid.New()
	job := &river.Job[syncjob.Args]{JobRow: &rivertype.JobRow{ID: 1}, Args: syncjob.Args{Task: "t", AccountID: id, CycleStart: start}}
	err = run(id, false, func(ctx context.Context) error { return RecordSync(pools[1], schema)(ctx, id, job) })
	require.NoError(t, err, "the Sync returns that its record committed")
	require.EqualValues(t, 1, Count(ctx, t, pool, "SELECT count(*) FROM "+table+" WHERE account_id = $1", id))
}
