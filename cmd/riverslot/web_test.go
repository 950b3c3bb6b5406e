package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"image/png"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

var screenshotPath = flag.String("screenshot", "", "TestWeb/Browser also saves the page's screenshot here (docs/web.png: -screenshot ../../docs/web.png)")

// syncBuffer is a bytes.Buffer safe for a command's concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startWeb runs riverslot web with args on a free port until the test
// ends, and returns its base URL.
func startWeb(t *testing.T, args ...string) string {
	t.Helper()
	reserveCmdConns(t, []string{"web", "--database-url"}) // given back when the test ends
	ctx, cancel := context.WithCancel(context.Background())
	out, outW := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"web", "--database-url", riverslottest.DatabaseURL(), "--addr", "127.0.0.1:0"}, args...), outW, &stderr)
		outW.Close()
		done <- code
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "riverslot web printed no address; stderr:\n%s", stderr.String())
	go func() { _, _ = io.Copy(io.Discard, out) }()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, <-done, "riverslot web exits 0 when stopped; stderr:\n%s", stderr.String())
	})
	require.True(t, strings.HasPrefix(line, "serving http://"), line)
	return strings.Fields(line)[1]
}

// httpGet fetches url without keeping the connection (no goroutine
// outlives the test).
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// chromium returns the path of the Chromium binary, failing the test with
// how to install it when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("Chromium is needed for the browser test and was not found (looked for chromium, chromium-browser, /usr/bin/chromium): " +
		"install it with `sudo apt-get install -y chromium` (Debian/Ubuntu; .ci/run does this) or your system's package")
	return ""
}

// headless runs Chromium headless on url with extra flags and returns its
// stdout.
func headless(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}, extra...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
	return stdout.String()
}

// TestWeb runs riverslot web, as an operator would, on a real weighted
// cycle and the cycle of a task OppositeOf it: it finds both tasks in the
// schema from their jobs alone (no --cycle, no --task), serves the same
// figures as riverslot status --json, an account's pinned slot as the real
// fan-out scheduled it, and a page that headless Chromium renders with the
// task's cycle in its DOM; bad flags exit 2 before anything is served.
func TestWeb(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newPinnedCycle(t)
	jobs := pgx.Identifier{c.schema, "river_job"}.Sanitize()
	// The transactions cycle's sync jobs run: 3 fail for good, the rest
	// complete 300 ms late.
	for _, stmt := range []string{
		`UPDATE ` + jobs + ` SET state = 'discarded', attempt = 5, attempted_at = scheduled_at + interval '1 second', finalized_at = scheduled_at + interval '2 seconds',
			errors = ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 5, "error": "payments API: 503 Service Unavailable"}'::jsonb]
			WHERE id IN (SELECT id FROM ` + jobs + ` WHERE kind = 'riverslot_sync' AND args->>'task' = 'transactions' ORDER BY id LIMIT 3)`,
		`UPDATE ` + jobs + ` SET state = 'completed', attempt = 1, attempted_at = scheduled_at + interval '300 milliseconds', finalized_at = scheduled_at + interval '400 milliseconds'
			WHERE kind = 'riverslot_sync' AND args->>'task' = 'transactions' AND state = 'scheduled'`,
	} {
		_, err := c.pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	var giant uuid.UUID
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT id FROM "+pgx.Identifier{c.schema, "accounts"}.Sanitize()+" WHERE weight = 600").Scan(&giant))

	base := startWeb(t, "--schema", c.schema, "--refresh", "30s")

	t.Run("StatusAsCLI", func(t *testing.T) {
		for _, task := range []string{"transactions", "reports"} {
			code, body := httpGet(t, base+"api/status?task="+task)
			require.Equal(t, http.StatusOK, code, body)
			code, cli, stderr := runCmd(t, "status", "--database-url", riverslottest.DatabaseURL(), "--schema", c.schema, "--task", task, "--json")
			require.Equal(t, 0, code, "on track; stderr: %s", stderr)
			var web, want map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &web))
			require.NoError(t, json.Unmarshal([]byte(cli), &want))
			require.Equal(t, keys(want), keys(web), "the same JSON as riverslot status --json")
			for _, k := range []string{"task", "cycle_start", "plan", "placement", "slots", "slots_done", "sync_enqueued", "sync_completed", "sync_failed", "accounts_expected", "verdict", "on_track"} {
				require.Equal(t, want[k], web[k], "%s: %s", task, k)
			}
			require.Equal(t, c.start.Format(time.RFC3339), web["cycle_start"])
		}
	})

	t.Run("Account", func(t *testing.T) {
		for _, task := range []string{"transactions", "reports"} {
			slot, at := c.syncOf(t, task, giant)
			code, body := httpGet(t, base+"api/accounts/"+giant.String()+"?task="+task)
			require.Equal(t, http.StatusOK, code, body)
			var a struct {
				Pinned     bool `json:"pinned"`
				PinnedSlot *int `json:"pinned_slot"`
				Current    *struct {
					Slot        int    `json:"slot"`
					State       string `json:"state"`
					ScheduledAt string `json:"scheduled_at"`
				} `json:"current_cycle_sync"`
				NextSyncs []string `json:"next_syncs"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &a), body)
			require.True(t, a.Pinned, "%s: the giant is pinned in the cycle: %s", task, body)
			require.NotNil(t, a.PinnedSlot)
			require.Equal(t, slot, *a.PinnedSlot, "%s: the slot the fan-out served it in", task)
			require.NotNil(t, a.Current)
			require.Equal(t, slot, a.Current.Slot)
			require.Equal(t, at.UTC().Format(time.RFC3339Nano), a.Current.ScheduledAt)
			require.Len(t, a.NextSyncs, 3)
		}
		code, body := httpGet(t, base+"api/accounts/12345?task=transactions")
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, `{"error":"account id must be a UUID, e.g. 0b6f3c1e-2a4d-4f8e-9c1a-7d2e5b8f4a10, got \"12345\""}`+"\n", body)
		code, body = httpGet(t, base+"api/accounts/"+giant.String()+"?task=payroll")
		require.Equal(t, http.StatusNotFound, code)
		require.Contains(t, body, `no task named \"payroll\"`)
	})

	t.Run("Browser", func(t *testing.T) {
		bin := chromium(t)
		page := base + "?task=transactions&account=" + giant.String()
		dom := headless(t, bin, page, "--dump-dom")
		require.Contains(t, dom, `<span id="task">transactions</span>`)
		require.Contains(t, dom, `<b id="cycle-start">`+c.start.Format("2006-01-02 15:04:05.000Z")+`</b>`, "the task's cycle")
		require.Contains(t, dom, `id="verdict">on track</span>`)
		require.Equal(t, pinnedSlots, strings.Count(dom, `class="slot slot-done"`), "one bar per slot, each done")
		require.Contains(t, dom, "payments API: 503 Service Unavailable", "failures with their last error")
		require.Contains(t, dom, "pinned to slot", "the account search found the pinned giant")

		shot := filepath.Join(t.TempDir(), "web.png")
		headless(t, bin, page, "--screenshot="+shot, "--window-size=1100,1900", "--hide-scrollbars")
		f, err := os.Open(shot)
		require.NoError(t, err)
		defer f.Close()
		img, err := png.Decode(f)
		require.NoError(t, err)
		require.Equal(t, 1100, img.Bounds().Dx())
		if *screenshotPath != "" {
			data, err := os.ReadFile(shot)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(*screenshotPath, data, 0o644))
		}
	})

	t.Run("BadFlags", func(t *testing.T) {
		empty := riverslottest.Schema(ctx, t, c.pool)
		for _, tt := range []struct {
			name string
			args []string
			want string
		}{
			{"NoRiverSchema", []string{"--schema", "no_such_schema"}, `--schema "no_such_schema" has no river_job table`},
			{"NoTask", []string{"--schema", empty}, `no riverslot task in --schema "` + empty + `"`},
			{"UnknownTask", []string{"--schema", c.schema, "--task", "payroll"}, `--task "payroll" has no cycle in the ledger`},
			{"BadTaskName", []string{"--schema", c.schema, "--task", "a b"}, "--task must be 1-64 letters"},
			{"BadAddr", []string{"--schema", c.schema, "--addr", "nowhere"}, `--addr "nowhere"`},
			{"BadRefresh", []string{"--schema", c.schema, "--refresh", "10ms"}, "--refresh must be at least 1s, got 10ms"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				code, _, stderr := runCmd(t, append([]string{"web", "--database-url", riverslottest.DatabaseURL()}, tt.args...)...)
				require.Equal(t, 2, code, stderr)
				require.Contains(t, stderr, tt.want)
			})
		}
	})

	// Last: River's retention deletes every finished job (the short
	// CompletedJobRetentionPeriod docs/scale.md recommends). A new
	// riverslot web still finds both tasks and their cycle, from the
	// ledger, and the cycle keeps its slots and what they did.
	t.Run("AfterRiverDeletes", func(t *testing.T) {
		_, err := c.pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE state IN ('completed', 'cancelled', 'discarded')")
		require.NoError(t, err)
		require.Zero(t, riverslottest.Count(ctx, t, c.pool, "SELECT count(*) FROM "+jobs+" WHERE kind IN ('riverslot_bootstrap', 'riverslot_perslot')"))
		base := startWeb(t, "--schema", c.schema)
		for _, task := range []string{"transactions", "reports"} {
			code, body := httpGet(t, base+"api/status?task="+task)
			require.Equal(t, http.StatusOK, code, body)
			var st struct {
				CycleStart string `json:"cycle_start"`
				SlotsDone  int    `json:"slots_done"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &st), body)
			require.Equal(t, c.start.Format(time.RFC3339), st.CycleStart, "%s: the cycle the ledger records", task)
			require.Equal(t, pinnedSlots, st.SlotsDone, "%s: every slot done, from the ledger", task)
		}
	})

	t.Run("ReadOnly", func(t *testing.T) {
		pool, err := connectReadOnly(ctx, riverslottest.DatabaseURL(), 1)
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{c.schema, "web_wrote_this"}.Sanitize()+" (id int)")
		require.ErrorContains(t, err, "read-only transaction")
	})
}

func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// TestOpenWarning: a page without authentication listening beyond
// loopback is warned about; on loopback it is not.
func TestOpenWarning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {"[::1]:0", false}, {"0.0.0.0:0", true}, {":0", true}} {
		ln, err := net.Listen("tcp", tt.addr)
		if err != nil && strings.HasPrefix(tt.addr, "[::1]") {
			continue // no IPv6 loopback on this machine
		}
		require.NoError(t, err)
		got := openWarning("--web-addr", ln.Addr())
		require.NoError(t, ln.Close())
		if tt.warn {
			require.Contains(t, got, "no authentication", tt.addr)
			require.Contains(t, got, "--web-addr", tt.addr)
		} else {
			require.Empty(t, got, tt.addr)
		}
	}
}
