package riverslot_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestStatusStarting: a cycle whose per-slot jobs wait past their slots'
// middles is "starting" (not on track, not behind) while River's leader
// was elected less than StartingGrace ago, or while there is no leader and
// every waiting slot passed its middle less than StartingGrace ago; it is
// "behind" once the leader is older, with no leader long after the slots,
// or when a waiting per-slot job is held for later. The leader row is River's own table, written as River's elector
// writes it.
func TestStatusStarting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	leader := pgx.Identifier{schema, "river_leader"}.Sanitize()

	const cycle = 120 * time.Second // 8 slots of 15 s
	// A cycle that started 8-9 s ago (on the task's grid): slot 0 is past
	// its middle (7.5 s in), slot 1 not for another 13.5 s or more; the
	// assertions allow it to be, on a slow machine.
	start := time.Now().Add(-8 * time.Second).Truncate(time.Second).UTC()
	offset := time.Duration(start.UnixNano() % int64(cycle))
	s, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{{
		Name: "transactions", Cycle: cycle, TriggerOffset: offset, Schema: schema, Table: "accounts", Sync: noopSync,
	}}})
	require.NoError(t, err)
	require.NoError(t, s.Configure(&river.Config{Schema: schema}))
	info, err := s.Task("transactions")
	require.NoError(t, err)
	insertOnly, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	past := start.Add(-2 * cycle) // a cycle whose slots all passed long ago
	// Each cycle as its bootstrap makes it: the per-slot jobs, and the
	// ledger's rows of the cycle and its slots, which Status reads.
	led := pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()
	for _, c := range []time.Time{start, past} {
		_, err := pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, placement) VALUES ('transactions', $1, $2, -1, 'hash')", c, info.PlanID)
		require.NoError(t, err)
		for slot := range 8 {
			res, err := insertOnly.Insert(ctx, perslot.Args{Task: "transactions", CycleStart: c, Slot: slot, Plan: riverslottest.Key(t, info.PlanID)},
				&river.InsertOpts{ScheduledAt: c.Add(time.Duration(slot) * cycle / 8)})
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, job_id) VALUES ('transactions', $1, $2, $3, $4)", c, info.PlanID, slot, res.Job.ID)
			require.NoError(t, err)
		}
	}
	elect := func(ago string) {
		t.Helper()
		_, err := pool.Exec(ctx, "DELETE FROM "+leader)
		require.NoError(t, err)
		if ago != "" {
			_, err = pool.Exec(ctx, "INSERT INTO "+leader+" (leader_id, elected_at, expires_at) VALUES ('test', now() - $1::interval, now() + interval '15 seconds')", ago)
			require.NoError(t, err)
		}
	}
	status := func(at time.Time) *riverslot.CycleStatus {
		t.Helper()
		st, err := s.StatusAt(ctx, "transactions", at)
		require.NoError(t, err)
		return st.Current
	}

	elect("3 seconds")
	c := status(start)
	require.True(t, c.Starting)
	require.False(t, c.OnTrack)
	require.Positive(t, c.BehindSlots)
	require.Regexp(t, `^starting: River's leader was elected \d+s ago \(\d slots wait for their fan-out\)$`, c.Verdict)
	c = status(past)
	require.True(t, c.Starting, "a new leader: even old slots are starting, for StartingGrace")

	elect("2 minutes")
	c = status(start)
	require.False(t, c.Starting)
	require.Regexp(t, `^behind by [12] slots$`, c.Verdict)

	elect("")
	c = status(start)
	require.True(t, c.Starting, "no leader yet, the waiting slots passed their middles less than StartingGrace ago")
	require.Regexp(t, `^starting: no River leader elected yet \([12] slots wait for their fan-out\)$`, c.Verdict)
	c = status(past)
	require.False(t, c.Starting, "no leader, long after the slots")
	require.Equal(t, "behind by 8 slots", c.Verdict)

	// A slot whose per-slot job waits for later (held, or retrying) is
	// behind, leader or not.
	elect("3 seconds")
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+" SET state = 'scheduled', scheduled_at = now() + interval '1 hour'"+
		" WHERE kind = 'riverslot_perslot' AND args->>'cycle_start' = $1 AND args->>'slot' = '0'", start.Format(time.RFC3339Nano))
	require.NoError(t, err)
	c = status(start)
	require.False(t, c.Starting)
	require.Regexp(t, `^behind by [12] slots$`, c.Verdict)
}
