package riverslot_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusRunningCycleBesidePrepared: with the cycle running now failing
// (slot 0's fan-out hit a database error, its per-slot job cancelled) and
// the next cycle bootstrapped ahead of its start by EnqueueCycle, Status
// and StatusFromLedger (the page) describe the running cycle, verdict
// "failed slot 0", and name the prepared one beside it (TaskStatus.Prepared,
// "prepared" in the JSON) instead of describing it. Before the fix they
// described the prepared cycle, all its slots scheduled and on track.
func TestStatusRunningCycleBesidePrepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	const cycle = time.Hour // 16 slots of 225 s
	// The cycle running now started a minute ago (on the task's grid):
	// slot 0's fan-out runs at once, the others wait, and the cycle ends
	// in 59 minutes, far from this test.
	running := time.Now().Add(-time.Minute).Truncate(time.Second).UTC()
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, TriggerOffset: time.Duration(running.UnixNano() % int64(cycle)), Schema: schema, Table: "accounts",
		Queue: "parked", ControlQueue: river.QueueDefault, Sync: noopSync,
	}}})
	require.NoError(t, err)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	next := running.Add(cycle)
	failingSlotZero(ctx, t, pool, schema, scheduler, running, next)

	for _, tt := range []struct {
		name   string
		status func() (*riverslot.TaskStatus, error)
	}{
		{"Status", func() (*riverslot.TaskStatus, error) { return scheduler.Status(ctx, "transactions") }},
		{"StatusFromLedger", func() (*riverslot.TaskStatus, error) {
			return scheduler.StatusFromLedger(ctx, "transactions", time.Time{})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := tt.status()
			require.NoError(t, err)
			c := st.Current
			require.True(t, c.CycleStart.Equal(running), "the running cycle %s, got %s", running, c.CycleStart)
			require.False(t, c.OnTrack)
			require.Equal(t, 0, c.FailedSlot)
			require.True(t, strings.HasPrefix(c.Verdict, "failed slot 0: "), c.Verdict)
			require.Contains(t, c.Verdict, "sync inserts are broken")
			require.NotNil(t, st.Prepared, "the prepared cycle beside it")
			require.Equal(t, riverslot.PreparedCycle{CycleStart: next, Plan: info.PlanID, Slots: info.Plan.Slots}, *st.Prepared)

			body, err := json.Marshal(st)
			require.NoError(t, err)
			var got struct {
				CycleStart string `json:"cycle_start"`
				OnTrack    bool   `json:"on_track"`
				Prepared   *struct {
					CycleStart string `json:"cycle_start"`
					Plan       string `json:"plan"`
					Slots      int    `json:"slots"`
				} `json:"prepared"`
			}
			require.NoError(t, json.Unmarshal(body, &got), string(body))
			require.Equal(t, running.Format(time.RFC3339), got.CycleStart)
			require.False(t, got.OnTrack)
			require.NotNil(t, got.Prepared, string(body))
			require.Equal(t, next.Format(time.RFC3339), got.Prepared.CycleStart)
			require.Equal(t, info.PlanID, got.Prepared.Plan)
			require.Equal(t, info.Plan.Slots, got.Prepared.Slots)
		})
	}

	// An asked cycle is described alone; the prepared one is still whole
	// under StatusAt.
	st, err := scheduler.StatusAt(ctx, "transactions", running)
	require.NoError(t, err)
	require.Nil(t, st.Prepared)
	st, err = scheduler.StatusAt(ctx, "transactions", next)
	require.NoError(t, err)
	require.True(t, st.Current.OnTrack, st.Current.Verdict)
	require.Equal(t, info.Plan.Slots, countState(st.Current, riverslot.SlotScheduled), "every slot of the prepared cycle waits")
}

// failingSlotZero bootstraps the task's cycle running (started already)
// and the next one, ahead of its start, through EnqueueCycle and a River
// client that works the control queue. Every insert of a sync job fails (a
// trigger raising "sync inserts are broken": a real database error in the
// middle of a fan-out), and once slot 0's fan-out has failed, its per-slot
// job is cancelled: the slot is failed for good, the running cycle's
// verdict "failed slot 0". The accounts table has 20 accounts, all in slot
// 0 (bucket 0).
func failingSlotZero(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, scheduler *riverslot.Scheduler, running, next time.Time) {
	t.Helper()
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)")
	require.NoError(t, err)
	for range 20 {
		id := uuid.New()
		id[15] = 0
		_, err := pool.Exec(ctx, "INSERT INTO "+accounts+" (id) VALUES ($1)", id)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	fn := pgx.Identifier{schema, "fail_sync_inserts"}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'sync inserts are broken'; END $$;
		CREATE TRIGGER fail_sync_inserts BEFORE INSERT ON `+jobs+` FOR EACH ROW WHEN (NEW.kind = 'riverslot_sync') EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)

	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test makes its cycles itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	for _, start := range []time.Time{running, next} {
		_, err := scheduler.EnqueueCycle(ctx, client, "transactions", start)
		require.NoError(t, err)
	}
	riverslottest.WaitFor(t, 30*time.Second, "both cycles' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == 2*int64(info.Plan.Slots)
	})
	var slot0 int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2 AND (args->>'slot')::int = 0",
		perslot.Kind, running).Scan(&slot0))
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's fan-out to fail", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND cardinality(errors) > 0", slot0) == 1
	})
	_, err = client.JobCancel(ctx, slot0)
	require.NoError(t, err)
	riverslottest.WaitFor(t, 30*time.Second, "slot 0's per-slot job to be cancelled", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE id = $1 AND state = 'cancelled'", slot0) == 1
	})
}

func countState(c *riverslot.CycleStatus, state string) int {
	n := 0
	for _, p := range c.PerSlot {
		if p.State == state {
			n++
		}
	}
	return n
}
