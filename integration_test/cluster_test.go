package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// cluster is a throwaway PostgreSQL cluster owned by one test, on a free
// port, so the test can restart it without disturbing anyone else.
type cluster struct {
	bin  string
	data string
	port int
	run  []string // prefix to run as the postgres user when we are root
}

func postgresBinDir(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real)
		}
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatalf("this test starts its own PostgreSQL cluster and needs the server binaries (initdb, pg_ctl): install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) or put initdb on PATH")
	}
	return dirs[len(dirs)-1]
}

func startCluster(t *testing.T) *cluster {
	t.Helper()

	c := &cluster{bin: postgresBinDir(t)}
	data, err := os.MkdirTemp("", "riverslot-pg-")
	require.NoError(t, err)
	c.data = data
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root: PostgreSQL needs a 'postgres' user to run the throwaway cluster")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(data, uid, gid))
		c.run = []string{"runuser", "-u", "postgres", "--"}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c.port = l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	c.cmd(t, "initdb", "-D", filepath.Join(data, "db"), "-U", "postgres", "--auth=trust", "--no-sync")
	c.pgctl(t, "start")
	t.Cleanup(func() { _ = c.exec("pg_ctl", "-D", filepath.Join(c.data, "db"), "-m", "immediate", "stop") })
	return c
}

func (c *cluster) exec(name string, args ...string) error {
	all := append(append([]string{}, c.run...), append([]string{filepath.Join(c.bin, name)}, args...)...)
	out, err := exec.Command(all[0], all[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", name, err, out)
	}
	return nil
}

func (c *cluster) cmd(t *testing.T, name string, args ...string) {
	t.Helper()
	require.NoError(t, c.exec(name, args...))
}

// pgctl runs pg_ctl start or restart (fast shutdown) and waits for it.
func (c *cluster) pgctl(t *testing.T, action string) {
	t.Helper()
	c.cmd(t, "pg_ctl", "-D", filepath.Join(c.data, "db"), "-l", filepath.Join(c.data, "server.log"), "-w", "-m", "fast",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", c.port, c.data), action)
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *cluster) pool(ctx context.Context, t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(c.url())
	require.NoError(t, err)
	cfg.MaxConns = 20
	pool, err := riverslottest.NewPool(ctx, cfg)
	require.NoError(t, err)
	return pool
}
