package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestServeRestart: the only `riverslot serve` process is stopped (SIGTERM)
// for 35 s (two periods and more), then started again: from the first period it bootstraps ahead
// of its start, every schedule is called once per period, and the calls
// the stop missed are history entries (server_down or fan_out_late), never
// silence.
func TestServeRestart(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 1)
	const (
		period    = 16 * time.Second
		schedules = 24
	)
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	tokenFile := filepath.Join(t.TempDir(), "token")
	var (
		mu    sync.Mutex
		calls = map[string][]time.Time{}
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[strings.TrimPrefix(r.URL.Path, "/s/")] = append(calls[strings.TrimPrefix(r.URL.Path, "/s/")], time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(target.Close)
	of := func(i int) []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), calls[string(rune('A'+i))]...)
	}

	p := startServe(t, schema, tokenFile)
	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	send := func(api, method, path string, body, out any) int {
		t.Helper()
		buf, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest(method, api+path, bytes.NewReader(buf))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if out != nil {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
		}
		return resp.StatusCode
	}
	type schedule struct {
		ID            string  `json:"id"`
		OffsetSeconds float64 `json:"offset_seconds"`
	}
	all := make([]schedule, schedules)
	for i := range all {
		require.Equal(t, http.StatusCreated, send(p.api, "POST", "/v1/schedules", map[string]any{"url": target.URL + "/s/" + string(rune('A'+i)), "period": "16s", "timeout": "2s"}, &all[i]))
	}
	riverslottest.WaitFor(t, 3*period, "a first call of every schedule", func() bool {
		for i := range all {
			if len(of(i)) == 0 {
				return false
			}
		}
		return true
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	<-p.done
	stopped := time.Now()
	riverslottest.WaitFor(t, 60*time.Second, "35 s stopped", func() bool { return time.Since(stopped) > 35*time.Second })
	p = startServe(t, schema, tokenFile)
	restarted := time.Now()

	var from time.Time
	riverslottest.WaitFor(t, 4*period, "a cycle bootstrapped ahead of its start after the restart", func() bool {
		var first *time.Time
		require.NoError(t, pool.QueryRow(ctx, "SELECT min(cycle_start) FROM "+pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()+
			" WHERE slot = -1 AND created_at > $1 AND created_at < cycle_start", restarted).Scan(&first))
		if first != nil {
			from = first.UTC()
		}
		return first != nil
	})
	to := from.Add(2 * period)
	riverslottest.WaitFor(t, time.Until(to)+2*period, "two periods after the restart", func() bool { return time.Now().After(to.Add(period / 2)) })
	t.Logf("stopped %s, restarted %s, first cycle bootstrapped ahead %s", stopped.Format(time.TimeOnly), restarted.Format(time.TimeOnly), from.Format(time.TimeOnly))
	for i, sc := range all {
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		per := map[int64]int{}
		for _, at := range of(i) {
			per[at.Add(-offset).Truncate(period).Unix()]++
		}
		for k := from; k.Before(to); k = k.Add(period) {
			require.Equal(t, 1, per[k.Unix()], "schedule %d: calls in the period from %s after the restart; its calls %v", i, k.Format(time.TimeOnly), of(i))
		}
	}
	// The stop's periods: each schedule's calls missed are in its
	// history, with their reason.
	riverslottest.WaitFor(t, 2*period, "the missed calls' entries", func() bool {
		var sc struct {
			LastCalls []struct {
				Missed *string `json:"missed"`
			} `json:"last_calls"`
		}
		send(p.api, "GET", "/v1/schedules/"+all[0].ID, nil, &sc)
		for _, c := range sc.LastCalls {
			if c.Missed != nil {
				return true
			}
		}
		return false
	})
}
