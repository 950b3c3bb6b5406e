package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestWebMonthly: riverslot web serves a schema whose ledger holds a
// calendar-month task (it divided by the monthly plan's zero Cycle and
// panicked): the page and the status API answer, the status names the
// month's plan and its days as slots.
func TestWebMonthly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 50)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	sync := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "invoices", Monthly: true, Location: berlin, Schema: schema, Table: "accounts", Sync: sync,
	}}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 200 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycle itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	// Next month, made ahead: its per-slot jobs wait, one per local day.
	now := time.Now().In(berlin)
	start := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, berlin)
	days := time.Date(now.Year(), now.Month()+2, 0, 0, 0, 0, 0, berlin).Day()
	_, err = scheduler.EnqueueCycle(ctx, client, "invoices", start)
	require.NoError(t, err)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "the month's per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == int64(days)
	})

	base := startWeb(t, "--schema", schema)
	code, body := httpGet(t, base)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "invoices")
	code, body = httpGet(t, base+"api/status?task=invoices")
	require.Equal(t, http.StatusOK, code, body)
	var st struct {
		CycleStart time.Time `json:"cycle_start"`
		Plan       string    `json:"plan"`
		Slots      int       `json:"slots"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.True(t, start.Equal(st.CycleStart), "cycle_start %s, want %s", st.CycleStart, start)
	require.Contains(t, st.Plan, "monthly/")
	require.Equal(t, days, st.Slots, "one slot per day of the month")
}
