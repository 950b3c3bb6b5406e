package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// serveProcess is a `riverslot serve` child process.
type serveProcess struct {
	cmd  *exec.Cmd
	api  string
	logs *lockedBuffer
	done chan error
}

func startServe(t *testing.T, schema, tokenFile string) *serveProcess {
	t.Helper()
	return startServeWith(t, schema, tokenFile, "--periods", "16s", "--max-conns", "5", "--workers", "10")
}

// startServeWith starts `riverslot serve` on schema with args added (its
// periods, connections and workers).
func startServeWith(t testing.TB, schema, tokenFile string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(riverslotBinary(t), append([]string{"serve", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--addr", "127.0.0.1:0",
		"--token-file", tokenFile, "--allow-private-targets"}, args...)...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &serveProcess{cmd: cmd, logs: logs, done: make(chan error, 1)}
	api := make(chan string, 1)
	re := regexp.MustCompile(`API at (http://\S+)/v1/`)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				api <- m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve logs:\n%s", lastLines(logs.String(), 40))
			var notable []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "bootstrapped") || strings.Contains(line, "leader") || strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") ||
					(strings.Contains(line, "fanned out") && !strings.Contains(line, "skipped_late=0")) {
					notable = append(notable, line)
				}
			}
			t.Logf("serve log lines on cycles, leadership, warnings and late accounts:\n%s", lastLines(strings.Join(notable, "\n"), 60))
		}
	})
	select {
	case p.api = <-api:
	case err := <-p.done:
		t.Fatalf("riverslot serve exited before starting: %v\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("riverslot serve did not start within 60s\n%s", logs.String())
	}
	return p
}

// TestServeProcesses: two `riverslot serve` processes on one schema call
// the schedules created over one's API, each once per period; the first,
// River's leader, is killed with SIGKILL and the other goes on: no schedule is ever called
// twice in a period, and every one is called in every period from the
// second after the kill on, for three periods, each call within the second
// after its place (the same second every period); the calls' places are
// spread evenly over the period (chi-square). After the kill a schedule
// deleted through the survivor is never called again, and one paused and
// resumed is not called while paused and is called again at its place.
func TestServeProcesses(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 2)
	const (
		period    = 16 * time.Second
		schedules = 64
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

	// a alone first, until it is River's leader: the kill below is then a
	// kill of the leader (checked again before it), which stops River's
	// scheduler until b is elected; serve's task is Punctual, so its
	// calls must not wait for that.
	a := startServe(t, schema, tokenFile)
	leaderTable := pgx.Identifier{schema, "river_leader"}.Sanitize()
	var leader string
	riverslottest.WaitFor(t, time.Minute, "the first serve process elected River's leader", func() bool {
		return pool.QueryRow(ctx, "SELECT leader_id FROM "+leaderTable).Scan(&leader) == nil
	})
	b := startServe(t, schema, tokenFile)
	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	send := func(api, method, path string, body any, out any) int {
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
	var all []schedule
	for range schedules {
		var sc schedule
		require.Equal(t, http.StatusCreated, send(a.api, "POST", "/v1/schedules", map[string]any{"url": target.URL + "/s/pending", "period": "16s", "timeout": "2s", "paused": true}, &sc))
		// Its own path, resumed: through the other process.
		require.Equal(t, http.StatusOK, send(b.api, "PATCH", "/v1/schedules/"+sc.ID, map[string]any{"url": target.URL + "/s/" + sc.ID, "paused": false}, nil))
		all = append(all, sc)
	}
	// Two more: one to delete, one to pause and resume, after the kill.
	extra := map[string]schedule{}
	for _, name := range []string{"deleted", "paused"} {
		var sc schedule
		require.Equal(t, http.StatusCreated, send(a.api, "POST", "/v1/schedules", map[string]any{"url": target.URL + "/s/pending", "period": "16s", "timeout": "2s", "paused": true}, &sc))
		require.Equal(t, http.StatusOK, send(b.api, "PATCH", "/v1/schedules/"+sc.ID, map[string]any{"url": target.URL + "/s/" + sc.ID, "paused": false}, nil))
		extra[name] = sc
	}
	of := func(id string) []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), calls[id]...)
	}
	riverslottest.WaitFor(t, 3*period, "a first call of every schedule", func() bool {
		for _, sc := range all {
			if len(of(sc.ID)) == 0 {
				return false
			}
		}
		return true
	})
	// The kill falls in the first half of a period whose cycle was
	// bootstrapped before it, so that its second half is called during the
	// failover.
	riverslottest.WaitFor(t, 3*period, "the first half of a bootstrapped period", func() bool {
		now := time.Now()
		start := now.Truncate(period)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()+
			" WHERE slot = -1 AND cycle_start = $1", start).Scan(&n))
		return n > 0 && now.Sub(start) < period/4
	})
	var stillLeader string
	require.NoError(t, pool.QueryRow(ctx, "SELECT leader_id FROM "+leaderTable).Scan(&stillLeader))
	require.Equal(t, leader, stillLeader, "the process to kill is River's leader")
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.done
	killed := time.Now()
	// River's leader was killed: until another node is elected
	// (its TTL, 15 s, and up to an elect interval) no periodic trigger
	// runs, and a cycle whose trigger fell then is bootstrapped late, its
	// past slots' calls skipped. From the first cycle the survivor
	// bootstrapped ahead of its start, three periods.
	var from time.Time
	riverslottest.WaitFor(t, 4*period, "a cycle bootstrapped on time after the kill", func() bool {
		var first *time.Time
		require.NoError(t, pool.QueryRow(ctx, "SELECT min(cycle_start) FROM "+pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()+
			" WHERE slot = -1 AND created_at > $1 AND created_at < cycle_start", killed).Scan(&first))
		if first != nil {
			from = first.UTC()
		}
		return first != nil
	})
	t.Logf("first cycle bootstrapped ahead of its start after the kill: %s, %s after it", from.Format(time.TimeOnly), from.Sub(killed).Round(time.Millisecond))
	to := from.Add(3 * period)
	// calledIn returns the schedule's calls in the period starting at k.
	calledIn := func(sc schedule, k time.Time) []time.Time {
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		var in []time.Time
		for _, at := range of(sc.ID) {
			if !at.Before(k.Add(offset)) && at.Before(k.Add(offset+period)) {
				in = append(in, at)
			}
		}
		return in
	}
	// Once each has been called in the first period, delete one and pause
	// the other, through the survivor; resume the paused one half a period
	// later.
	riverslottest.WaitFor(t, 2*period, "the first calls after the kill of the schedules to delete and pause", func() bool {
		return len(calledIn(extra["deleted"], from)) > 0 && len(calledIn(extra["paused"], from)) > 0
	})
	require.Equal(t, http.StatusOK, send(b.api, "DELETE", "/v1/schedules/"+extra["deleted"].ID, nil, nil))
	deleted := time.Now()
	require.Equal(t, http.StatusOK, send(b.api, "PATCH", "/v1/schedules/"+extra["paused"].ID, map[string]any{"paused": true}, nil))
	paused := time.Now()
	resumeAt := from.Add(period + period/2)
	riverslottest.WaitFor(t, time.Until(resumeAt)+period, "half a period after the pause", func() bool { return time.Now().After(resumeAt) })
	require.Equal(t, http.StatusOK, send(b.api, "PATCH", "/v1/schedules/"+extra["paused"].ID, map[string]any{"paused": false}, nil))
	resumed := time.Now()
	riverslottest.WaitFor(t, time.Until(to)+period, "three periods after the kill", func() bool { return time.Now().After(to.Add(period / 2)) })

	require.Empty(t, of("pending"), "no schedule was called while paused")
	var late []time.Duration // each call's lateness after its place
	lateness := func(sc schedule, at time.Time) time.Duration {
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		return at.Sub(from.Add(offset)) % period
	}
	bins := make([]int, 8) // the checked calls' places, by eighths of the period
	failover := 0          // schedules called at their place during the failover
	for _, sc := range all {
		offset := time.Duration(sc.OffsetSeconds * float64(time.Second))
		per := map[int64]int{}
		for _, at := range of(sc.ID) {
			per[at.Add(-offset).Truncate(period).Unix()]++
		}
		for k, n := range per {
			require.Equal(t, 1, n, "schedule %s: %d calls in the period from %s", sc.ID, n, time.Unix(k, 0).UTC())
		}
		// During the failover: the period the kill fell in was fanned
		// out before it, and its later places (2 s after the kill on: a
		// call the killed process held is its loss) are called at their
		// time though no process is River's leader, since serve's task is
		// Punctual (without it they wait for a new leader's scheduler).
		if inKill := killed.Truncate(period); !inKill.Add(offset).Before(killed.Add(2 * time.Second)) {
			require.Equal(t, 1, per[inKill.Unix()], "schedule %s (offset %s): no call at its place %s during the failover (kill at %s); its calls: %v",
				sc.ID, offset, inKill.Add(offset).UTC(), killed.UTC(), of(sc.ID))
			failover++
		}
		for k := from; k.Before(to); k = k.Add(period) {
			require.Equal(t, 1, per[k.Unix()], "schedule %s (offset %s): no call in the period from %s (after the kill at %s); its calls: %v", sc.ID, offset, k.UTC(), killed.UTC(), of(sc.ID))
			at := calledIn(sc, k)[0]
			late = append(late, lateness(sc, at))
			if k.Equal(from) {
				// Once per schedule: its place is the same every period,
				// so its three calls are one sample, not three.
				bins[int(at.Sub(k)%period*8/period)]++
			}
		}
	}
	slices.Sort(late)
	t.Logf("%d schedules called at their place in the period of the kill, while River had no leader", failover)
	t.Logf("%d calls in the three periods after the kill: lateness p50 %s, p99 %s, max %s; by eighth of the period %v",
		len(late), late[len(late)/2], late[len(late)*99/100], late[len(late)-1], bins)
	// At its place, not a period or a retry later: within 3 s on a busy
	// machine. The ±1 s of a quiet machine is BenchmarkServeFleet's
	// (100,000 of 100,000 within 1 s, p99 0.337 s); beside integration_test's
	// other real-cycle tests on 2 cores this test saw a max of 1.23-4.2 s
	// in five CI runs of 2026-11-28 (p50 0.27-0.32 s), each call once.
	require.Less(t, late[len(late)-1], 3*time.Second, "every call within 3 s after its place")
	require.GreaterOrEqual(t, late[0], -50*time.Millisecond, "no call before its place")
	// Each schedule's place (one sample per schedule: counting its three
	// calls as three samples made the statistic three times too large, a
	// false alarm about one run in ten; a CI run failed at 35.25 on
	// [12 18 42 15 39 24 18 24]) in 8 eighths. Chi-square, 7 degrees of
	// freedom, below 35.26: a false alarm once in 100,000 runs; places
	// bunched into a few eighths give hundreds.
	want := float64(len(all)) / 8
	var chi2 float64
	for _, n := range bins {
		chi2 += (float64(n) - want) * (float64(n) - want) / want
	}
	require.Less(t, chi2, 35.26, "schedules' places per eighth of the period: %v", bins)

	// The deleted schedule: never called after its deletion.
	for _, at := range of(extra["deleted"].ID) {
		require.False(t, at.After(deleted), "the deleted schedule was called at %s, after its deletion at %s", at, deleted)
	}
	// The paused one: not called while paused, then at its place again.
	var after []time.Time
	for _, at := range of(extra["paused"].ID) {
		require.False(t, at.After(paused) && at.Before(resumed), "the paused schedule was called at %s, while paused (%s to %s)", at, paused, resumed)
		if at.After(resumed) {
			after = append(after, at)
		}
	}
	require.NotEmpty(t, after, "the paused schedule is called again after it was resumed at %s", resumed)
	for _, at := range after {
		l := lateness(extra["paused"], at)
		require.True(t, l >= -50*time.Millisecond && l < time.Second, "resumed, called at %s: %s after its place", at, l)
	}
	// The surviving process still answers, with the calls in its history.
	var got struct {
		LastCalls []struct {
			OK bool `json:"ok"`
		} `json:"last_calls"`
	}
	require.Equal(t, http.StatusOK, send(b.api, "GET", "/v1/schedules/"+all[0].ID, nil, &got))
	require.GreaterOrEqual(t, len(got.LastCalls), 3)
}
