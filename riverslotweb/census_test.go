package riverslotweb_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// TestPageShowsACensusStall: a weighted task's census that took no step in
// its last attempts (its stall record, as the census worker writes it) is
// in /api/status and on the page.
func TestPageShowsACensusStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "accounts"}.Sanitize()+" (id uuid PRIMARY KEY, weight double precision NOT NULL DEFAULT 1)")
	require.NoError(t, err)
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: "transactions", Cycle: time.Hour, Schema: schema, Table: "accounts", Weight: "weight", Sync: noopSync},
	}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	require.NoError(t, scheduler.Configure(&river.Config{Schema: schema}))
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)

	start := info.Schedule.Start(time.Now())
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, ledger.Table}.Sanitize()+" (task, cycle_start, plan, slot) VALUES ('transactions', $1, $2, -1)", start, info.PlanID)
	require.NoError(t, err)
	since := time.Now().Add(-time.Minute).Truncate(time.Second)
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, taskspec.PinCensusTable}.Sanitize()+
		" (task, plan, cycle_start, totals, stalls, stalled_since) VALUES ('transactions', $1, $2, '{}', 3, $3)", info.PlanID, start.Add(time.Hour), since)
	require.NoError(t, err)

	h, err := riverslotweb.New(scheduler, nil)
	require.NoError(t, err)
	code, body, _ := get(t, h, "/api/status?task=transactions")
	require.Equal(t, http.StatusOK, code, body)
	var got struct {
		Census struct {
			Stalls       int    `json:"stalls"`
			StalledSince string `json:"stalled_since"`
		} `json:"census"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got), body)
	require.Equal(t, 3, got.Census.Stalls)
	require.Equal(t, since.UTC().Format(time.RFC3339Nano), got.Census.StalledSince)

	code, body, _ = get(t, h, "/?task=transactions")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="census-stalled"`)
	require.Contains(t, body, "no step in its last 3 attempts", "the page shows the stall")
}
