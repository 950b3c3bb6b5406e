package riverslotweb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// TestHandlerPreparedCycle: the cycle running now began a minute ago (1h
// cycle) and the next one is bootstrapped ahead of its start with
// EnqueueCycle. The page, its /api/status and /api/accounts describe the
// running cycle, and the page names the prepared one beside it in a
// "prepared ahead: cycle ..., N slots, plan ..." line (as riverslot
// status does), which headless Chromium renders under the page's CSP.
// Before, the page showed no such line (only /api/status's JSON had
// "prepared"), and /api/accounts described the prepared cycle.
func TestHandlerPreparedCycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	const cycle = time.Hour // 16 slots of 225 s
	running := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	next := running.Add(cycle)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 20)
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: schema, Table: "accounts",
		Filter: "active", Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync,
	}}})
	require.NoError(t, err)
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycles itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	for _, start := range []time.Time{running, next} {
		_, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
		require.NoError(t, err)
	}
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "both cycles' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == 2*int64(info.Plan.Slots)
	})
	h, err := riverslotweb.New(scheduler, nil)
	require.NoError(t, err)
	const ts = "2006-01-02 15:04:05.000Z"
	prepared := `<p class="muted" id="prepared">prepared ahead: cycle <b id="prepared-start">` + next.Format(ts) + `</b>, 16 slots, plan ` + info.PlanID +
		` (bootstrapped, not started: this page shows the cycle running now)</p>`

	t.Run("Status", func(t *testing.T) {
		code, body, _ := get(t, h, "/api/status?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		var st struct {
			CycleStart string `json:"cycle_start"`
			Prepared   *struct {
				CycleStart string `json:"cycle_start"`
				Plan       string `json:"plan"`
				Slots      int    `json:"slots"`
			} `json:"prepared"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &st), body)
		require.Equal(t, running.Format(time.RFC3339), st.CycleStart)
		require.NotNil(t, st.Prepared, body)
		require.Equal(t, next.Format(time.RFC3339), st.Prepared.CycleStart)
	})

	t.Run("Account", func(t *testing.T) {
		id := ids[0]
		code, body, _ := get(t, h, "/api/accounts/"+id.String()+"?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		var a struct {
			CycleStart string `json:"cycle_start"`
			Current    *struct {
				CycleStart string `json:"cycle_start"`
			} `json:"current_cycle_sync"`
			Previous *struct{} `json:"previous_cycle_sync"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &a), body)
		require.Equal(t, running.Format(time.RFC3339), a.CycleStart, "the running cycle: %s", body)
		require.NotNil(t, a.Current, body)
		require.Equal(t, running.Format(time.RFC3339), a.Current.CycleStart)
		require.Nil(t, a.Previous, "no cycle before the running one: %s", body)
	})

	t.Run("Page", func(t *testing.T) {
		code, body, hdr := get(t, h, "/?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, hdr.Get("Content-Security-Policy"), "default-src 'none'", "the CSP is kept")
		require.Contains(t, body, `<b id="cycle-start">`+running.Format(ts)+`</b>`, "the running cycle")
		require.Contains(t, body, prepared, "the prepared cycle beside it")
	})

	t.Run("Browser", func(t *testing.T) {
		bin := chromium(t)
		srv := httptest.NewServer(h)
		defer srv.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--dump-dom", srv.URL+"/?task=transactions")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "chromium: %s", stderr.String())
		dom := stdout.String()
		require.Contains(t, dom, `<b id="cycle-start">`+running.Format(ts)+`</b>`, "the running cycle")
		require.Contains(t, dom, prepared, "the prepared cycle beside it, rendered")
	})
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
