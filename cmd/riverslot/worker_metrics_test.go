package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestWorkerMetrics runs a worker with --metrics-addr and --web-addr and
// scrapes /metrics until the cycle its periodic trigger bootstrapped has
// fanned out a slot and started syncs; --web-addr's port serves the same
// metrics and the operator's page and API for the worker's task.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	markDemoSchema(ctx, t, pool, schema)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 300)

	stdout, stderr, stop := startWorkerCmd(t, "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--cycle", "16s", "--filter", "", "--max-conns", "4", "--metrics-addr", "127.0.0.1:0", "--web-addr", "127.0.0.1:0")
	url := regexp.MustCompile(`(?m)^metrics at (\S+)`).FindStringSubmatch(stdout.String())
	require.NotNil(t, url, "stdout: %s", stdout.String())
	web := regexp.MustCompile(`operator's page at (http://\S+)/ \(metrics at (\S+)\)`).FindStringSubmatch(stdout.String())
	require.NotNil(t, web, "stdout: %s", stdout.String())
	require.NotEqual(t, url[1], web[2], "two ports")

	var body string
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		var code int
		code, body = httpGet(t, url[1])
		require.Equal(t, http.StatusOK, code)
		if regexp.MustCompile(`riverslot_sync_lateness_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`).MatchString(body) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Regexp(t, `riverslot_sync_enqueued_total\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Regexp(t, `riverslot_sync_lateness_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Regexp(t, `riverslot_slot_lag_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Contains(t, body, "go_goroutines")

	// The page's port serves the same provider's metrics, the page and the
	// API for the worker's task.
	code, webMetrics := httpGet(t, web[2])
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `riverslot_sync_enqueued_total\{[^}]*task="demo"[^}]*\} [1-9]`, webMetrics)
	code, page := httpGet(t, web[1]+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "<html")
	require.Contains(t, page, "demo")
	code, status := httpGet(t, web[1]+"/api/status?task=demo")
	require.Equal(t, http.StatusOK, code, status)
	var st struct {
		Task  string `json:"task"`
		Slots int    `json:"slots"`
	}
	require.NoError(t, json.Unmarshal([]byte(status), &st), status)
	require.Equal(t, "demo", st.Task)
	require.Equal(t, 16, st.Slots, "16 s cycle: gcd(16, 256) slots")
	code, _ = httpGet(t, web[1]+"/api/status?task=nosuchtask")
	require.Equal(t, http.StatusNotFound, code)

	require.Equal(t, 0, stop(), stderr.String())
}

func TestWorkerMetricsBadAddr(t *testing.T) {
	t.Parallel()

	code, _, stderr := runCmd(t, "worker", "--metrics-addr", "no-such-host.invalid:notaport")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `riverslot worker: --metrics-addr "no-such-host.invalid:notaport"`)
	require.Contains(t, stderr, "give host:port")

	code, _, stderr = runCmd(t, "worker", "--web-addr", "no-such-host.invalid:notaport")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `riverslot worker: --web-addr "no-such-host.invalid:notaport"`)
	require.Contains(t, stderr, "give host:port")
}
