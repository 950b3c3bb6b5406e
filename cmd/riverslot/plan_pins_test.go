package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/plancmd"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// pinnedCycle is one real cycle of two tasks over the same accounts, fanned
// out by the library: transactions, weighted, whose giant account (2.5 times
// a mean slot) gets a slot of its own, so that slot's ~200 other accounts
// are pinned to other slots; and reports, OppositeOf transactions, which
// follows those pins shifted by half the slots. The sync jobs wait in a
// queue no client works.
type pinnedCycle struct {
	pool      *pgxpool.Pool
	schema    string
	scheduler *riverslot.Scheduler
	start     time.Time
}

// The pinned cycle's layout: a 16 s cycle has 16 slots of 1 s, 16 buckets
// each.
const (
	pinnedCycleLength = 16 * time.Second
	pinnedSlots       = 16
	pinnedSlotLength  = time.Second
)

func newPinnedCycle(t *testing.T) *pinnedCycle {
	t.Helper()
	ctx := context.Background()
	// A pool of its own, closed when the test ends: the fan-outs' large
	// COPY writes can start pgx's background reader on a connection, whose
	// goroutine then waits on that connection until it closes (goleak
	// would find it on the binary's shared pool).
	cfg, err := pgxpool.ParseConfig(riverslottest.DatabaseURL())
	require.NoError(t, err)
	cfg.MaxConns = 10
	pool, err := riverslottest.NewPool(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // after the client stops and the schema is dropped
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 0)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	for _, stmt := range []string{
		"ALTER TABLE " + accounts + " ADD COLUMN weight double precision NOT NULL DEFAULT 1",
		"INSERT INTO " + accounts + " (id, weight) SELECT gen_random_uuid(), 1 FROM generate_series(1, 3200)",
		"INSERT INTO " + accounts + " (id, weight) VALUES (gen_random_uuid(), 600)",
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	sync := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	transactions := riverslot.Task{Name: "transactions", Cycle: pinnedCycleLength, Schema: schema, Table: "accounts", Filter: "active",
		Weight: "weight", Queue: "parked", ControlQueue: river.QueueDefault, Sync: sync}
	reports := transactions
	reports.Name, reports.Weight, reports.OppositeOf = "reports", "", "transactions"
	scheduler, err := riverslot.New(pool, &riverslot.Config{Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{transactions, reports}})
	require.NoError(t, err)
	require.NoError(t, scheduler.CreateIndexes(ctx))
	config := &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}, FetchPollInterval: 200 * time.Millisecond}
	require.NoError(t, scheduler.Configure(config))
	config.PeriodicJobs = nil // the test enqueues its cycle itself
	client, _ := riverslottest.StartClient(ctx, t, pool, config)

	// A cycle an hour ahead, whose per-slot jobs are then made to run now:
	// every sync lands at its regular time, none is late.
	info, err := scheduler.Task("transactions")
	require.NoError(t, err)
	start := info.Schedule.Next(time.Now().Add(time.Hour)).UTC()
	for _, task := range []string{"transactions", "reports"} {
		_, err := scheduler.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
	}
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "both tasks' per-slot jobs", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot'") == 2*pinnedSlots
	})
	_, err = pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = 'riverslot_perslot'")
	require.NoError(t, err)
	riverslottest.WaitFor(t, 60*time.Second, "every per-slot job to complete", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot' AND state = 'completed'") == 2*pinnedSlots
	})
	require.EqualValues(t, 2*3201, riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_sync'"),
		"one sync job per account and task")
	return &pinnedCycle{pool: pool, schema: schema, scheduler: scheduler, start: start}
}

// syncOf returns the slot and scheduled time of the sync job the fan-out
// inserted for the account and task.
func (c *pinnedCycle) syncOf(t *testing.T, task string, id uuid.UUID) (int, time.Time) {
	t.Helper()
	var (
		slot int
		at   time.Time
	)
	require.NoError(t, c.pool.QueryRow(context.Background(), "SELECT (args->>'slot')::int, scheduled_at FROM "+pgx.Identifier{c.schema, "river_job"}.Sanitize()+
		" WHERE kind = 'riverslot_sync' AND args->>'task' = $1 AND args->>'account_id' = $2", task, id.String()).Scan(&slot, &at))
	return slot, at
}

// TestPlanPinnedAccount asks riverslot plan when a pinned account is
// synced, by both tasks, and checks the answer against the sync jobs the
// real fan-out scheduled: the pinned slot's window and the account's time
// in it, not its hash slot's; later cycles, without pins yet, follow the
// latest pin. An account that is not pinned keeps its hash slot's times.
func TestPlanPinnedAccount(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	c := newPinnedCycle(t)
	pins := pgx.Identifier{c.schema, "riverslot_pins"}.Sanitize()

	// An account pinned away from its hash slot (bucket / 16), and one not
	// pinned at all.
	var (
		pinnedID, hashID uuid.UUID
		pinnedSlot       int
	)
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT account_id, slot FROM "+pins+
		" WHERE task = 'transactions' AND cycle_start = $1 AND slot <> bucket / 16 ORDER BY account_id LIMIT 1", c.start).Scan(&pinnedID, &pinnedSlot))
	require.NoError(t, c.pool.QueryRow(ctx, "SELECT id FROM "+pgx.Identifier{c.schema, "accounts"}.Sanitize()+" a WHERE NOT EXISTS (SELECT 1 FROM "+pins+
		" p WHERE p.account_id = a.id AND p.cycle_start = $1) ORDER BY id LIMIT 1", c.start).Scan(&hashID))
	hashSlot := int(pinnedID[15]) / 16
	require.NotEqual(t, hashSlot, pinnedSlot)

	plan := func(id uuid.UUID) (transactions, reports string) {
		t.Helper()
		code, out, stderr := runCmd(t, "plan", "--cycle", pinnedCycleLength.String(), "--task", "transactions", "--opposite", "reports",
			"--account", id.String(), "--database-url", riverslottest.DatabaseURL(), "--pins-schema", c.schema,
			"--now", c.start.Format(time.RFC3339))
		require.Equal(t, 0, code, stderr)
		i := strings.Index(out, "task           transactions")
		require.GreaterOrEqual(t, i, 0, out)
		transactions, reports, ok := strings.Cut(out[i:], "task           reports")
		require.True(t, ok, out)
		return transactions, reports
	}

	t.Run("Pinned", func(t *testing.T) {
		transactions, reports := plan(pinnedID)
		require.Contains(t, transactions, fmt.Sprintf("slot           %d of 16", hashSlot), "the hash slot is still shown")
		require.Contains(t, transactions, fmt.Sprintf("pinned         yes: to slot %d in the cycle of %s", pinnedSlot, c.start.Format(time.RFC3339)))

		// Each task: the real sync job's slot and time are the pinned
		// slot's (reports: half the slots further), and plan prints them.
		for _, tt := range []struct {
			task, out string
			slot      int
		}{
			{"transactions", transactions, pinnedSlot},
			{"reports", reports, (pinnedSlot + pinnedSlots/2) % pinnedSlots},
		} {
			jobSlot, jobAt := c.syncOf(t, tt.task, pinnedID)
			require.Equal(t, tt.slot, jobSlot, "%s: the fan-out served the account in its pinned slot", tt.task)
			slotStart := c.start.Add(time.Duration(tt.slot) * pinnedSlotLength)
			require.False(t, jobAt.Before(slotStart), tt.task)
			require.True(t, jobAt.Before(slotStart.Add(pinnedSlotLength)), tt.task)

			syncs := parseSyncs(tt.out)
			require.Len(t, syncs, 3, tt.out)
			require.True(t, syncs[0].Equal(jobAt), "%s: plan says %s, the fan-out scheduled %s", tt.task, syncs[0], jobAt)
			require.Contains(t, tt.out, fmt.Sprintf("pinned slot    %d: +%s to +%s after each cycle start", tt.slot,
				plancmd.Clock(time.Duration(tt.slot)*pinnedSlotLength), plancmd.Clock(time.Duration(tt.slot+1)*pinnedSlotLength)), tt.task)
			require.Contains(t, tt.out, fmt.Sprintf("    slot %d, %s to %s: pinned in that cycle\n", tt.slot,
				slotStart.Format(time.RFC3339Nano), slotStart.Add(pinnedSlotLength).Format(time.RFC3339Nano)), tt.task)
			// The next cycles have no pins yet: plan assumes the pin holds.
			for i := 1; i < 3; i++ {
				require.Equal(t, time.Duration(i)*pinnedCycleLength, syncs[i].Sub(syncs[0]), "%s: sync %d", tt.task, i)
			}
			require.Contains(t, tt.out, "that cycle has no pins yet: the pin of "+c.start.Format(time.RFC3339)+", if it holds", tt.task)
		}
	})

	t.Run("NotPinned", func(t *testing.T) {
		transactions, reports := plan(hashID)
		require.Contains(t, transactions, "pinned         no: it keeps its hash slot in the latest pinned cycle, "+c.start.Format(time.RFC3339))
		for _, tt := range []struct {
			task, out string
			slot      int
		}{
			{"transactions", transactions, int(hashID[15]) / 16},
			{"reports", reports, (int(hashID[15])/16 + pinnedSlots/2) % pinnedSlots},
		} {
			jobSlot, jobAt := c.syncOf(t, tt.task, hashID)
			require.Equal(t, tt.slot, jobSlot, tt.task)
			syncs := parseSyncs(tt.out)
			require.Len(t, syncs, 3, tt.out)
			require.True(t, syncs[0].Equal(jobAt), "%s: plan says %s, the fan-out scheduled %s", tt.task, syncs[0], jobAt)
			require.Contains(t, tt.out, fmt.Sprintf("    slot %d, ", tt.slot), tt.task)
			require.Contains(t, tt.out, "hash slot: not pinned in that cycle", tt.task)
			require.NotContains(t, tt.out, "pinned slot ", tt.task)
		}
	})
}
