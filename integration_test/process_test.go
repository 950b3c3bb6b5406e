package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// riverslotBinary builds cmd/riverslot once per test run (without -race, it
// is a separate process) and returns its path.
func riverslotBinary(t testing.TB) string {
	t.Helper()

	binOnce.Do(func() {
		// make test builds it before the tests start, so that its
		// compile does not run beside the first real cycles.
		if p := os.Getenv("RIVERSLOT_BIN"); p != "" {
			if _, err := os.Stat(p); err != nil {
				binErr = fmt.Errorf("RIVERSLOT_BIN: %w (build it with go build -o %s ./cmd/riverslot, or unset it)", err, p)
			}
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "riverslot-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "riverslot")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/riverslot")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/riverslot: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

// worker is a `riverslot worker` child process.
type worker struct {
	id   string
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWorker starts a worker process on schema and waits until its River
// client has started. It is killed at the end of the test if still running.
func startWorker(t *testing.T, schema, id string, args ...string) *worker {
	t.Helper()

	all := append([]string{"worker", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--id", id, "--max-conns", "5"}, args...)
	cmd := exec.Command(riverslotBinary(t), all...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	w := &worker{id: id, cmd: cmd, logs: logs, done: make(chan error, 1)}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "worker ") && strings.HasSuffix(sc.Text(), " started") {
				close(started)
			}
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			if dir := os.Getenv("RIVERSLOT_TEST_KEEP_FAILED"); dir != "" {
				path := filepath.Join(os.TempDir(), "riverslot-worker-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"+id+".log")
				if err := os.WriteFile(path, []byte(logs.String()), 0o644); err == nil {
					t.Logf("RIVERSLOT_TEST_KEEP_FAILED: worker %s logs in %s", id, path)
				}
			}
			t.Logf("worker %s logs:\n%s", id, lastLines(logs.String(), 40))
		}
	})

	select {
	case <-started:
	case err := <-w.done:
		t.Fatalf("worker %s exited before starting: %v\n%s", id, err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("worker %s did not start within 60s\n%s", id, logs.String())
	}
	return w
}

// kill sends SIGKILL: no graceful shutdown, jobs stay "running".
func (w *worker) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	<-w.done
}

// stop sends SIGTERM and waits for a graceful exit.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-w.done:
		require.NoError(t, err, "worker %s: %s", w.id, lastLines(w.logs.String(), 20))
	case <-time.After(60 * time.Second):
		t.Fatalf("worker %s did not stop within 60s", w.id)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// insertAccountsInSlot adds n random UUIDv4 accounts whose last byte lies in
// [lo, hi], so they all belong to one slot.
func insertAccountsInSlot(ctx context.Context, t *testing.T, b *testBundle, n int, lo, hi byte) []uuid.UUID {
	t.Helper()

	ids := make([]uuid.UUID, n)
	rows := make([][]any, n)
	span := int(hi-lo) + 1
	for i := range ids {
		ids[i] = uuid.New()
		var r [1]byte
		_, _ = rand.Read(r[:])
		ids[i][15] = lo + byte(int(r[0])%span)
		rows[i] = []any{ids[i], true}
	}
	_, err := b.pool.CopyFrom(ctx, pgx.Identifier{b.schema, "accounts"}, []string{"id", "active"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	return ids
}
