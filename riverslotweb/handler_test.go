package riverslotweb_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

const (
	webCycle    = 32 * time.Second
	webSlots    = 32
	webAccounts = 320
)

// webCycles is two real consecutive cycles of task "transactions" whose
// fan-outs ran (an hour ahead, their per-slot jobs made to run now) and
// whose sync jobs wait in a queue no client works: the first cycle's are
// then finished by hand (10 failed, 5 stale, the rest completed 500 ms
// late), counted in the ledger as the workers would have, and the
// completed ones deleted as River's retention would (River keeps discarded
// jobs 7 days by default); the second's stay scheduled.
type webCycles struct {
	pool      *pgxpool.Pool
	schema    string
	scheduler *riverslot.Scheduler
	starts    [2]time.Time
	ids       []uuid.UUID
	jobs      string
}

func newWebCycles(t *testing.T) *webCycles {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(riverslottest.DatabaseURL())
	require.NoError(t, err)
	cfg.MaxConns = 8
	pool, err := riverslottest.NewPool(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", webAccounts)
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: "transactions", Cycle: webCycle, Schema: schema, Table: "accounts", Filter: "active", Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync},
		{Name: "reports", Cycle: webCycle, Schema: schema, Table: "accounts", OppositeOf: "transactions", Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync},
	}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}, FetchPollInterval: 200 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	first := info.Schedule.Next(time.Now().Add(time.Hour)).UTC()
	starts := [2]time.Time{first, first.Add(webCycle)}
	for _, start := range starts {
		_, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "both cycles' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == 2*webSlots
	})
	_, err = pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = 'riverslot_perslot'")
	require.NoError(t, err)
	riverslottest.WaitFor(t, 60*time.Second, "every per-slot job to complete", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot' AND state = 'completed'") == 2*webSlots
	})
	require.EqualValues(t, 2*webAccounts, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync'"))

	firstKey := first.Format(time.RFC3339Nano)
	for _, stmt := range []string{
		`UPDATE ` + jobs + ` SET state = 'discarded', attempt = 5, attempted_at = scheduled_at + interval '1 second', finalized_at = scheduled_at + interval '2 seconds',
			errors = ARRAY['{"at": "2026-01-01T00:00:00Z", "attempt": 5, "error": "upstream said no"}'::jsonb]
			WHERE id IN (SELECT id FROM ` + jobs + ` WHERE kind = 'riverslot_sync' AND args->>'cycle_start' = $1 ORDER BY id LIMIT 10)`,
		`UPDATE ` + jobs + ` SET state = 'completed', attempt = 1, attempted_at = scheduled_at + interval '20 seconds', finalized_at = scheduled_at + interval '20 seconds',
			metadata = '{"output": {"riverslot_skipped": "stale"}}'
			WHERE id IN (SELECT id FROM ` + jobs + ` WHERE kind = 'riverslot_sync' AND args->>'cycle_start' = $1 AND state = 'scheduled' ORDER BY id LIMIT 5)`,
		`UPDATE ` + jobs + ` SET state = 'completed', attempt = 1, attempted_at = scheduled_at + interval '500 milliseconds', finalized_at = scheduled_at + interval '600 milliseconds'
			WHERE kind = 'riverslot_sync' AND args->>'cycle_start' = $1 AND state = 'scheduled'`,
	} {
		_, err := pool.Exec(ctx, stmt, firstKey)
		require.NoError(t, err)
	}
	// What the sync workers that ended them would have counted in the
	// cycle's ledger row; then River's retention deletes them: the page
	// reads the ledger, not River's finished jobs.
	for _, o := range []struct {
		outcome  ledger.Outcome
		n        int
		lateness time.Duration
	}{{ledger.OutcomeFailed, 10, 0}, {ledger.OutcomeStale, 5, 0}, {ledger.OutcomeSynced, webAccounts - 15, 500 * time.Millisecond}} {
		riverslottest.CountOutcomes(ctx, t, pool, schema, "transactions", info.PlanID, first, o.outcome, o.n, o.lateness)
	}
	_, err = pool.Exec(ctx, "DELETE FROM "+jobs+" WHERE kind = 'riverslot_sync' AND state = 'completed'")
	require.NoError(t, err)
	return &webCycles{pool: pool, schema: schema, scheduler: scheduler, starts: starts, ids: ids, jobs: jobs}
}

// TestHandler serves every endpoint of riverslotweb.New over two real
// cycles and checks each answer against the jobs: the status of the latest
// and of an asked cycle, the cycles' history (coverage, missed, failures,
// lateness), an account's slot, offset and sync jobs, /metrics, the page,
// and bad input (400), unknown tasks and cycles (404) and methods (405).
func TestHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWebCycles(t)
	metrics := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "riverslot_test_metric 1\n") })
	h, err := riverslotweb.New(w.scheduler, &riverslotweb.Config{Metrics: metrics, Refresh: 5 * time.Second})
	require.NoError(t, err)
	info, err := w.scheduler.Task("transactions")
	require.NoError(t, err)

	t.Run("Status", func(t *testing.T) {
		code, body, hdr := get(t, h, "/api/status?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		var st struct {
			Task             string `json:"task"`
			CycleStart       string `json:"cycle_start"`
			Plan             string `json:"plan"`
			Slots            int    `json:"slots"`
			SlotsDone        int    `json:"slots_done"`
			AccountsExpected int64  `json:"accounts_expected"`
			SyncEnqueued     int64  `json:"sync_enqueued"`
			SyncPending      int64  `json:"sync_pending"`
			Verdict          string `json:"verdict"`
			OnTrack          bool   `json:"on_track"`
			PerSlot          []struct {
				Expected int64 `json:"accounts_expected"`
				Enqueued int64 `json:"enqueued"`
			} `json:"per_slot"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &st), body)
		require.Equal(t, "transactions", st.Task)
		require.Equal(t, w.starts[1].Format(time.RFC3339), st.CycleStart, "the latest cycle")
		require.Equal(t, info.PlanID, st.Plan)
		require.Equal(t, webSlots, st.Slots)
		require.Equal(t, webSlots, st.SlotsDone)
		require.EqualValues(t, webAccounts, st.SyncEnqueued)
		require.EqualValues(t, webAccounts, st.SyncPending)
		require.EqualValues(t, webAccounts, st.AccountsExpected, "expected from the fan-outs' counts")
		require.Equal(t, "on track", st.Verdict)
		require.True(t, st.OnTrack)
		require.Len(t, st.PerSlot, webSlots)

		// The same JSON as riverslot status --json: the library's Status
		// encoded (which counts the accounts table) has the same keys and,
		// here, the same figures.
		lib, err := w.scheduler.Status(ctx, "transactions")
		require.NoError(t, err)
		want, err := json.Marshal(lib)
		require.NoError(t, err)
		require.JSONEq(t, string(want), body)

		code, body, _ = get(t, h, "/api/status?task=transactions&cycle_start="+url.QueryEscape(w.starts[0].Format(time.RFC3339)))
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `"cycle_start": "`+w.starts[0].Format(time.RFC3339)+`"`)
		require.Contains(t, body, `"sync_failed": 10`)
		require.Contains(t, body, `"sync_skipped_stale": 5`)

		code, body, _ = get(t, h, "/api/status")
		require.Equal(t, http.StatusOK, code, "the first task by default: %s", body)
		require.Contains(t, body, `"task": "transactions"`)
	})

	t.Run("StatusBadInput", func(t *testing.T) {
		code, body, _ := get(t, h, "/api/status?task=transactions&cycle_start=yesterday")
		requireJSONError(t, code, body, http.StatusBadRequest, `cycle_start must be RFC 3339`)
		code, body, _ = get(t, h, "/api/status?task=nope")
		requireJSONError(t, code, body, http.StatusNotFound, `no task named "nope"`)
		code, body, _ = get(t, h, "/api/status?task=transactions&cycle_start="+url.QueryEscape(w.starts[0].Add(-webCycle).Format(time.RFC3339)))
		requireJSONError(t, code, body, http.StatusNotFound, "has no ledger row with cycle start")
		code, body, _ = get(t, h, "/api/status?task=reports")
		requireJSONError(t, code, body, http.StatusNotFound, `task "reports" has no cycle yet`)
	})

	t.Run("Cycles", func(t *testing.T) {
		code, body, _ := get(t, h, "/api/cycles?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		var got struct {
			Task   string `json:"task"`
			Cycles []struct {
				CycleStart       string  `json:"cycle_start"`
				SlotsDone        int     `json:"slots_done"`
				FailedSlots      []int   `json:"failed_slots"`
				AccountsSelected int64   `json:"accounts_selected"`
				SyncEnqueued     int64   `json:"sync_enqueued"`
				SyncUnfinished   int64   `json:"sync_unfinished"`
				SyncFailed       int64   `json:"sync_failed"`
				SyncSkippedStale int64   `json:"sync_skipped_stale"`
				Synced           int64   `json:"synced"`
				Missed           int64   `json:"missed"`
				Coverage         float64 `json:"coverage"`
				Duplicates       int64   `json:"duplicates"`
				Uncounted        int64   `json:"uncounted"`
				P50              float64 `json:"lateness_p50_seconds"`
				Sample           int     `json:"lateness_sample"`
				Finished         bool    `json:"finished"`
			} `json:"cycles"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		require.Len(t, got.Cycles, 2)
		newest, oldest := got.Cycles[0], got.Cycles[1]
		require.Equal(t, w.starts[1].Format(time.RFC3339), newest.CycleStart, "newest first")
		require.Equal(t, w.starts[0].Format(time.RFC3339), oldest.CycleStart)

		require.Equal(t, webSlots, oldest.SlotsDone)
		require.Empty(t, oldest.FailedSlots)
		require.EqualValues(t, webAccounts, oldest.AccountsSelected)
		require.EqualValues(t, webAccounts, oldest.SyncEnqueued)
		require.EqualValues(t, 0, oldest.SyncUnfinished)
		require.EqualValues(t, 10, oldest.SyncFailed)
		require.EqualValues(t, 5, oldest.SyncSkippedStale)
		require.EqualValues(t, webAccounts-15, oldest.Synced)
		require.EqualValues(t, 15, oldest.Missed)
		require.InDelta(t, float64(webAccounts-15)/webAccounts, oldest.Coverage, 1e-9)
		require.Zero(t, oldest.Duplicates)
		require.Zero(t, oldest.Uncounted)
		require.InEpsilon(t, 0.5, oldest.P50, 0.26, "the completed syncs started 500 ms late (the ledger's histogram buckets are 26% wide)")
		require.Positive(t, oldest.Sample)
		require.False(t, oldest.Finished, "the cycle is an hour ahead")

		require.EqualValues(t, webAccounts, newest.SyncUnfinished)
		require.Zero(t, newest.Synced)
		require.Zero(t, newest.Missed)
		require.Zero(t, newest.Uncounted, "its jobs are all still queued")

		// Counts lost (a killed node's last 500 ms): 20 synced syncs ended
		// uncounted, neither synced nor missed, left out of the coverage.
		ledgerTable := pgx.Identifier{w.schema, "riverslot_ledger"}.Sanitize()
		_, err := w.pool.Exec(ctx, "UPDATE "+ledgerTable+" SET synced = synced - 20 WHERE task = 'transactions' AND slot = -1 AND cycle_start = $1", w.starts[0])
		require.NoError(t, err)
		code, body, _ = get(t, h, "/api/cycles?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		lost := got.Cycles[1]
		require.EqualValues(t, 20, lost.Uncounted)
		require.EqualValues(t, webAccounts-35, lost.Synced)
		require.EqualValues(t, 15, lost.Missed)
		require.InDelta(t, float64(webAccounts-35)/(webAccounts-20), lost.Coverage, 1e-9)
		_, err = w.pool.Exec(ctx, "UPDATE "+ledgerTable+" SET synced = synced + 20 WHERE task = 'transactions' AND slot = -1 AND cycle_start = $1", w.starts[0])
		require.NoError(t, err)

		code, body, _ = get(t, h, "/api/cycles?task=transactions&limit=1")
		require.Equal(t, http.StatusOK, code, body)
		require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		require.Len(t, got.Cycles, 1)

		for _, limit := range []string{"0", "-1", "201", "ten"} {
			code, body, _ = get(t, h, "/api/cycles?task=transactions&limit="+limit)
			requireJSONError(t, code, body, http.StatusBadRequest, "limit must be a whole number from 1 to 200")
		}
		code, body, _ = get(t, h, "/api/cycles?task=nope")
		requireJSONError(t, code, body, http.StatusNotFound, `no task named "nope"`)
		code, body, _ = get(t, h, "/api/cycles?task=reports")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `"cycles": []`)
	})

	t.Run("Account", func(t *testing.T) {
		// An account of a slot done in both cycles: River deleted its
		// finished sync of the first, and holds its second, scheduled.
		id := w.ids[0]
		type syncJSON struct {
			Source      string  `json:"source"`
			JobID       int64   `json:"job_id"`
			CycleStart  string  `json:"cycle_start"`
			Plan        string  `json:"plan"`
			Slot        int     `json:"slot"`
			State       string  `json:"state"`
			ScheduledAt string  `json:"scheduled_at"`
			AttemptedAt *string `json:"attempted_at"`
			FanOutAt    *string `json:"fan_out_at"`
			Attempts    int     `json:"attempts"`
			LastError   string  `json:"last_error"`
		}
		var a struct {
			AccountID string    `json:"account_id"`
			Bucket    int       `json:"bucket"`
			Slot      int       `json:"slot"`
			Offset    float64   `json:"offset_seconds"`
			Pinned    bool      `json:"pinned"`
			NextSyncs []string  `json:"next_syncs"`
			Current   *syncJSON `json:"current_cycle_sync"`
			Previous  *syncJSON `json:"previous_cycle_sync"`
		}
		lookup := func(id uuid.UUID) {
			a.Current, a.Previous = nil, nil
			code, body, _ := get(t, h, "/api/accounts/"+id.String()+"?task=transactions")
			require.Equal(t, http.StatusOK, code, body)
			require.NoError(t, json.Unmarshal([]byte(body), &a), body)
		}
		lookup(id)
		require.Equal(t, id.String(), a.AccountID)
		require.Equal(t, int(id[15]), a.Bucket)
		require.Equal(t, info.Plan.SlotOf(id), a.Slot)
		require.InDelta(t, info.Plan.Offset(info.Seed, id).Seconds(), a.Offset, 1e-9)
		require.False(t, a.Pinned)
		require.Len(t, a.NextSyncs, 3)
		// Its sync job of the second cycle, as the fan-out scheduled it.
		var scheduled time.Time
		var jobID int64
		require.NoError(t, w.pool.QueryRow(ctx, "SELECT id, scheduled_at FROM "+w.jobs+" WHERE kind = 'riverslot_sync' AND args->>'account_id' = $1 AND args->>'cycle_start' = $2",
			id.String(), w.starts[1].Format(time.RFC3339Nano)).Scan(&jobID, &scheduled))
		require.True(t, scheduled.Equal(info.Plan.Target(w.starts[1], info.Seed, id)), "the fan-out scheduled the account at its target")
		require.NotNil(t, a.Current)
		require.Equal(t, "river", a.Current.Source)
		require.Equal(t, jobID, a.Current.JobID)
		require.Equal(t, w.starts[1].Format(time.RFC3339), a.Current.CycleStart)
		require.Equal(t, "scheduled", a.Current.State)
		require.Equal(t, scheduled.UTC().Format(time.RFC3339Nano), a.Current.ScheduledAt)
		require.Nil(t, a.Current.AttemptedAt)
		// The first cycle's, from the ledger: River deleted the job.
		require.NotNil(t, a.Previous)
		require.Equal(t, "ledger", a.Previous.Source)
		require.Zero(t, a.Previous.JobID)
		require.Equal(t, w.starts[0].Format(time.RFC3339), a.Previous.CycleStart)
		require.Equal(t, info.PlanID, a.Previous.Plan)
		require.Equal(t, a.Slot, a.Previous.Slot)
		require.Equal(t, riverslot.SlotDone, a.Previous.State, "its slot's fan-out finished")
		require.NotNil(t, a.Previous.FanOutAt)
		require.Equal(t, info.Plan.Target(w.starts[0], info.Seed, id).UTC().Format(time.RFC3339Nano), a.Previous.ScheduledAt, "its regular time")

		// A slot whose fan-out failed, as the ledger records it.
		failedSlot := info.Plan.SlotOf(id)
		_, err := w.pool.Exec(ctx, "UPDATE "+pgx.Identifier{w.schema, "riverslot_ledger"}.Sanitize()+
			" SET finished_at = NULL, failed_at = now(), error = 'the accounts table is locked' WHERE task = 'transactions' AND cycle_start = $1 AND slot = $2", w.starts[0], failedSlot)
		require.NoError(t, err)
		lookup(id)
		require.Equal(t, riverslot.SlotFailed, a.Previous.State)
		require.Equal(t, "the accounts table is locked", a.Previous.LastError)
		_, err = w.pool.Exec(ctx, "UPDATE "+pgx.Identifier{w.schema, "riverslot_ledger"}.Sanitize()+
			" SET finished_at = now(), failed_at = NULL, error = NULL WHERE task = 'transactions' AND cycle_start = $1 AND slot = $2", w.starts[0], failedSlot)
		require.NoError(t, err)

		code, body, _ := get(t, h, "/api/accounts/not-a-uuid?task=transactions")
		requireJSONError(t, code, body, http.StatusBadRequest, `account id must be a UUID`)
		code, body, _ = get(t, h, "/api/accounts/"+id.String()+"?task=nope")
		requireJSONError(t, code, body, http.StatusNotFound, `no task named "nope"`)
		code, body, _ = get(t, h, "/api/accounts/"+uuid.NewString()+"?task=transactions")
		require.Equal(t, http.StatusOK, code, "an unknown account still has a slot: %s", body)
		require.Contains(t, body, `"source": "ledger"`, "its slot's fan-out, from the ledger")
	})

	t.Run("Metrics", func(t *testing.T) {
		code, body, _ := get(t, h, "/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "riverslot_test_metric 1\n", body)
		plain, err := riverslotweb.New(w.scheduler, nil)
		require.NoError(t, err)
		code, body, _ = get(t, plain, "/metrics")
		requireJSONError(t, code, body, http.StatusNotFound, "set riverslotweb.Config.Metrics")
	})

	t.Run("Page", func(t *testing.T) {
		code, body, hdr := get(t, h, "/?task=transactions&account="+w.ids[3].String())
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
		require.Contains(t, hdr.Get("Content-Security-Policy"), "default-src 'none'", "no external asset")
		require.Contains(t, body, `<meta http-equiv="refresh" content="5">`)
		require.Contains(t, body, `id="verdict">on track</span>`)
		require.Contains(t, body, `<b id="cycle-start">`+w.starts[1].Format("2006-01-02 15:04:05.000Z")+`</b>`)
		require.NotContains(t, body, `id="prepared"`, "no cycle has started: the latest prepared is the page's, none beside it")
		require.Equal(t, webSlots, strings.Count(body, `class="slot slot-done"`), "one bar per slot")
		require.Contains(t, body, `id="slot-circle"`)
		require.Equal(t, 2, strings.Count(body, `class="coverage"`), "one coverage bar per cycle")
		require.Contains(t, body, "upstream said no", "a failed sync's last error")
		require.Contains(t, body, `<table id="account">`)
		require.NotContains(t, body, "http://", "no external asset (the SVG namespace aside)")

		code, body, _ = get(t, h, "/?account=%3Cscript%3E")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `id="account-error">account id must be a UUID`)
		require.NotContains(t, body, "<script>", "escaped")

		code, body, _ = get(t, h, "/?task=nope")
		requireJSONError(t, code, body, http.StatusNotFound, `no task named "nope"`)
		code, _, _ = get(t, h, "/nope")
		require.Equal(t, http.StatusNotFound, code)
		req := httptest.NewRequest(http.MethodPost, "/api/status", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusMethodNotAllowed, rec.Code, "read-only")
	})

	// Last: River deletes the first cycle's bootstrap and per-slot jobs (as
	// a short CompletedJobRetentionPeriod would); the cycle and what its
	// fan-outs did are still listed, from riverslot's ledger.
	t.Run("CyclesAfterRiverDeletes", func(t *testing.T) {
		tag, err := w.pool.Exec(ctx, "DELETE FROM "+w.jobs+" WHERE kind IN ('riverslot_bootstrap', 'riverslot_perslot') AND args->>'cycle_start' = $1",
			w.starts[0].Format(time.RFC3339Nano))
		require.NoError(t, err)
		require.EqualValues(t, 1+webSlots, tag.RowsAffected())
		code, body, _ := get(t, h, "/api/cycles?task=transactions")
		require.Equal(t, http.StatusOK, code, body)
		var got struct {
			Cycles []struct {
				CycleStart       string  `json:"cycle_start"`
				SlotsDone        int     `json:"slots_done"`
				AccountsSelected int64   `json:"accounts_selected"`
				SyncEnqueued     int64   `json:"sync_enqueued"`
				Synced           int64   `json:"synced"`
				Coverage         float64 `json:"coverage"`
			} `json:"cycles"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &got), body)
		require.Len(t, got.Cycles, 2, body)
		oldest := got.Cycles[1]
		require.Equal(t, w.starts[0].Format(time.RFC3339), oldest.CycleStart)
		require.Equal(t, webSlots, oldest.SlotsDone)
		require.EqualValues(t, webAccounts, oldest.AccountsSelected)
		require.EqualValues(t, webAccounts, oldest.SyncEnqueued)
		require.EqualValues(t, webAccounts-15, oldest.Synced)
		require.InDelta(t, float64(webAccounts-15)/webAccounts, oldest.Coverage, 1e-9)

		code, body, _ = get(t, h, "/api/status?task=transactions&cycle_start="+url.QueryEscape(w.starts[0].Format(time.RFC3339)))
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `"slots_done": 32`)
	})

	// A failing query answers 500 without the database's error: no table,
	// schema or SQL reaches the page, only a request id for the log.
	t.Run("ServerErrorHidesTheDatabase", func(t *testing.T) {
		_, err := w.pool.Exec(ctx, "ALTER TABLE "+w.jobs+" RENAME TO river_job_away")
		require.NoError(t, err)
		defer func() {
			_, err := w.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{w.schema, "river_job_away"}.Sanitize()+" RENAME TO river_job")
			require.NoError(t, err)
		}()
		for _, path := range []string{"/api/status?task=transactions", "/api/cycles?task=transactions"} {
			code, body, _ := get(t, h, path)
			requireJSONError(t, code, body, http.StatusInternalServerError, "internal error reading the schedule (request ")
			for _, leak := range []string{"river_job", w.schema, "relation", "SQLSTATE", "SELECT"} {
				require.NotContains(t, body, leak, "%s: the 500 does not echo the database", path)
			}
		}
	})

	t.Run("BadConfig", func(t *testing.T) {
		_, err := riverslotweb.New(w.scheduler, &riverslotweb.Config{Refresh: 100 * time.Millisecond, Cycles: 500})
		require.ErrorContains(t, err, "Refresh must be at least 1s, got 100ms")
		require.ErrorContains(t, err, "Cycles must be between 1 and 200, got 500")
		unconfigured, err := riverslot.New(w.pool, &riverslot.Config{Tasks: []riverslot.Task{
			{Name: "transactions", Cycle: webCycle, Schema: w.schema, Table: "accounts", Sync: noopSync},
		}})
		require.NoError(t, err)
		_, err = riverslotweb.New(unconfigured, nil)
		require.ErrorContains(t, err, "call the scheduler's Configure before riverslotweb.New")
	})
}
