package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestWorkerMetrics runs a worker with --metrics-addr and scrapes
// /metrics until the cycle its periodic trigger bootstrapped has fanned out
// a slot and started syncs.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	markDemoSchema(ctx, t, pool, schema)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 300)

	stdout, stderr, stop := startWorkerCmd(t, "--database-url", riverslottest.DatabaseURL(), "--schema", schema,
		"--cycle", "16s", "--filter", "", "--max-conns", "4", "--metrics-addr", "127.0.0.1:0")
	url := regexp.MustCompile(`metrics at (\S+)`).FindStringSubmatch(stdout.String())
	require.NotNil(t, url, "stdout: %s", stdout.String())

	var body string
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url[1])
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		if body = string(b); regexp.MustCompile(`riverslot_sync_lateness_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`).MatchString(body) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Regexp(t, `riverslot_sync_enqueued_total\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Regexp(t, `riverslot_sync_lateness_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Regexp(t, `riverslot_slot_lag_seconds_count\{[^}]*task="demo"[^}]*\} [1-9]`, body)
	require.Contains(t, body, "go_goroutines")

	require.Equal(t, 0, stop(), stderr.String())
}

func TestWorkerMetricsBadAddr(t *testing.T) {
	t.Parallel()

	code, _, stderr := runCmd(t, "worker", "--metrics-addr", "no-such-host.invalid:notaport")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `riverslot worker: --metrics-addr "no-such-host.invalid:notaport"`)
	require.Contains(t, stderr, "give host:port")
}
