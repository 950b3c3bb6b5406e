package perslot

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

type testBundle struct {
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
	ids    []uuid.UUID
	pool   *pgxpool.Pool
	schema string
	spec   *taskspec.Spec
	worker *Worker
}

// setup creates n accounts (the first inactive ones given by inactive), a
// spec over them with filter "active" and batches of batch, and a started
// client that works per-slot jobs only (sync jobs stay queued).
func setup(t *testing.T, n, batch int, mutate func(*taskspec.Spec)) (context.Context, *testBundle) {
	t.Helper()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", n)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
	spec := riverslottest.Spec(t, "transactions", schema, "accounts", "active", 2*time.Minute, batch)
	spec.SyncOpts.Queue = "parked" // not worked
	if mutate != nil {
		mutate(spec)
	}
	w := NewWorker(pool, riverslottest.Logger(t))
	w.AddTask(spec)
	workers := river.NewWorkers()
	require.NoError(t, w.Register(workers))
	client, events := riverslottest.StartClient(ctx, t, pool, &river.Config{
		Schema:              schema,
		SkipUnknownJobCheck: true,
		Queues:              map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:             workers,
	})
	return ctx, &testBundle{client: client, events: events, ids: ids, pool: pool, schema: schema, spec: spec, worker: w}
}

func (b *testBundle) table(name string) string { return pgx.Identifier{b.schema, name}.Sanitize() }

// slotAccounts returns the ids in slot, from the Go mirror of the bucket.
func (b *testBundle) slotAccounts(slot int) map[uuid.UUID]bool {
	out := map[uuid.UUID]bool{}
	for _, id := range b.ids {
		if b.spec.Plan.SlotOf(id) == slot {
			out[id] = true
		}
	}
	return out
}

// syncJobs returns the account ids of the sync jobs inserted, with their count.
func (b *testBundle) syncJobs(ctx context.Context, t *testing.T) map[uuid.UUID]int {
	t.Helper()
	rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid FROM "+b.table("river_job")+" WHERE kind = 'riverslot_sync'")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	out := map[uuid.UUID]int{}
	for _, id := range ids {
		out[id]++
	}
	return out
}

func (b *testBundle) run(ctx context.Context, t *testing.T, slot int, maxAttempts int) *river.Event {
	t.Helper()
	// A cycle far ahead: every account is on time.
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev := <-b.events:
			if ev.Job.ID == res.Job.ID && ev.Job.FinalizedAt != nil {
				return ev
			}
		case <-timeout:
			t.Fatalf("per-slot job %d did not finish within 60s", res.Job.ID)
		}
	}
}

func TestFanOut(t *testing.T) {
	t.Parallel()

	t.Run("FilteredAccountsAreNotEnqueued", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, 2000, 50, nil)
		// Every third account is inactive.
		inactive := map[uuid.UUID]bool{}
		for i, id := range b.ids {
			if i%3 == 0 {
				inactive[id] = true
				_, err := b.pool.Exec(ctx, "UPDATE "+b.table("accounts")+" SET active = false WHERE id = $1", id)
				require.NoError(t, err)
			}
		}
		const slot = 5
		ev := b.run(ctx, t, slot, 1)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)

		want := map[uuid.UUID]int{}
		for id := range b.slotAccounts(slot) {
			if !inactive[id] {
				want[id] = 1
			}
		}
		require.NotEmpty(t, want)
		require.Less(t, len(want), len(b.slotAccounts(slot)), "the slot must hold inactive accounts for this test to mean anything")
		require.Equal(t, want, b.syncJobs(ctx, t), "exactly the slot's active accounts, once each")
	})

	t.Run("PhaseShiftsTheBuckets", func(t *testing.T) {
		t.Parallel()
		// Slots shifted by 3: slot 5 serves the accounts of bucket slot 2,
		// at slot 5's times.
		ctx, b := setup(t, 2000, 50, func(s *taskspec.Spec) { s.Shift = 3 })
		ev := b.run(ctx, t, 5, 1)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		want := map[uuid.UUID]int{}
		for id := range b.slotAccounts(2) {
			want[id] = 1
		}
		require.NotEmpty(t, want)
		require.Equal(t, want, b.syncJobs(ctx, t))
		slot5 := time.Date(2030, 1, 1, 0, 0, 5*15, 0, time.UTC)
		require.Zero(t, riverslottest.Count(ctx, t, b.pool, "SELECT count(*) FROM "+b.table("river_job")+
			" WHERE kind = 'riverslot_sync' AND NOT (scheduled_at >= $1 AND scheduled_at < $2)", slot5, slot5.Add(15*time.Second)),
			"every sync inside slot 5's window")
	})

	t.Run("LedgerRecordsTheFanOut", func(t *testing.T) {
		t.Parallel()
		// Attempt 1 fails before batch 3; the retry finishes. The ledger
		// row (none existed: the job was not made by a bootstrap) holds
		// the totals across attempts, written with the last batch.
		ctx, b := setup(t, 2000, 20, nil)
		b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
			if batch == 3 && job.Attempt == 1 {
				return errors.New("connection lost")
			}
			return nil
		}
		const slot = 4
		ev := b.run(ctx, t, slot, 3)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		n := int64(len(b.slotAccounts(slot)))
		require.Greater(t, n, int64(40))
		got := b.ledgerRow(ctx, t, slot)
		require.Equal(t, ledgerRow{JobID: ev.Job.ID, Accounts: n, RangeAccounts: n, Inserted: n, Batches: int((n + 19) / 20), Finished: true}, got)
	})

	t.Run("LedgerRecordsProgress", func(t *testing.T) {
		t.Parallel()
		// The fan-out's last attempt fails before batch 3: the slot's row
		// (made by a bootstrap) holds the two committed batches' progress,
		// not finished, and the failure with its error.
		ctx, b := setup(t, 2000, 20, nil)
		b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
			if batch == 3 {
				return errors.New("connection lost")
			}
			return nil
		}
		const slot = 4
		start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		led := b.table("riverslot_ledger")
		res, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, job_id) VALUES ($1, $2, $3, $4, $5)", b.spec.Name, start, b.spec.PlanID, slot, res.Job.ID)
		require.NoError(t, err)
		select {
		case ev := <-b.events:
			require.Equal(t, river.EventKindJobFailed, ev.Kind)
		case <-time.After(60 * time.Second):
			t.Fatal("the per-slot job did not finish within 60 s")
		}
		require.Equal(t, ledgerRow{JobID: res.Job.ID, Accounts: 40, RangeAccounts: 40, Inserted: 40, Batches: 2}, b.ledgerRow(ctx, t, slot))
		require.EqualValues(t, 1, riverslottest.Count(ctx, t, b.pool, "SELECT count(*) FROM "+led+" WHERE slot = $1 AND failed_at IS NOT NULL AND error LIKE '%connection lost%'", slot))
	})

	t.Run("LedgerRecordsAFanOutWhoseLastBatchIsEmpty", func(t *testing.T) {
		t.Parallel()
		// The slot's accounts fill exactly one batch: the last batch finds
		// none and records the fan-out alone.
		ctx, b := setup(t, 600, 50, nil)
		const slot = 6
		n := len(b.slotAccounts(slot))
		b.spec.BatchSize = n
		ev := b.run(ctx, t, slot, 1)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		require.Equal(t, ledgerRow{JobID: ev.Job.ID, Accounts: int64(n), RangeAccounts: int64(n), Inserted: int64(n), Batches: 1, Finished: true}, b.ledgerRow(ctx, t, slot))
	})

	t.Run("SlotOfAnotherJobIsCancelled", func(t *testing.T) {
		t.Parallel()
		// The ledger says slot 2 of the cycle belongs to another job (one
		// River deleted, say): this one is a duplicate and inserts nothing.
		ctx, b := setup(t, 600, 50, nil)
		_, err := b.pool.Exec(ctx, "INSERT INTO "+b.table("riverslot_ledger")+" (task, cycle_start, plan, slot, job_id) VALUES ($1, $2, $3, 2, 999999)",
			b.spec.Name, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), b.spec.PlanID)
		require.NoError(t, err)
		ev := b.run(ctx, t, 2, 3)
		require.Equal(t, river.EventKindJobCancelled, ev.Kind)
		require.Contains(t, ev.Job.Errors[0].Error, ErrDuplicate.Error())
		require.Empty(t, b.syncJobs(ctx, t))
		require.Equal(t, ledgerRow{JobID: 999999}, b.ledgerRow(ctx, t, 2))
	})

	t.Run("StalledKeysetInsertsNothingMore", func(t *testing.T) {
		t.Parallel()
		// A next-page query that ignores the cursor (what a filter such as
		// "true) OR (true" did before filters were checked) returns the
		// first page again. The guard must fail the attempt instead of
		// enqueuing the same accounts batch after batch.
		ctx, b := setup(t, 2000, 50, func(s *taskspec.Spec) {
			s.SQL.NextPage = strings.Replace(s.SQL.FirstPage, " ORDER BY", " AND ($4::int, $5::uuid) IS NOT NULL ORDER BY", 1)
		})
		ev := b.run(ctx, t, 0, 1)
		require.Equal(t, river.EventKindJobFailed, ev.Kind)
		require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, ErrKeysetStalled.Error())

		got := b.syncJobs(ctx, t)
		require.Len(t, got, 50, "only the first batch committed")
		for id, n := range got {
			require.Equal(t, 1, n, "account %s enqueued %d times", id, n)
		}
	})

	t.Run("SupersededAttemptInsertsNothing", func(t *testing.T) {
		t.Parallel()
		// Before batch 3 the job's attempt moves on, as when River rescues a
		// job whose attempt is still alive and starts another. The old
		// attempt must find it lost the job and commit nothing more.
		ctx, b := setup(t, 2000, 50, nil)
		b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
			if batch == 3 {
				_, err := b.pool.Exec(ctx, "UPDATE "+b.table("river_job")+" SET attempt = attempt + 1 WHERE id = $1", job.ID)
				return err
			}
			return nil
		}
		ev := b.run(ctx, t, 0, 1)
		require.Equal(t, river.EventKindJobFailed, ev.Kind)
		require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, ErrLostOwnership.Error())
		require.Len(t, b.syncJobs(ctx, t), 2*50, "batches 1 and 2 only")
	})

	t.Run("LateAccountsFollowTheCyclesRecordedPolicy", func(t *testing.T) {
		t.Parallel()
		// A cycle that started 50 s ago (slots of 15 s, LateGrace a
		// slot): every account of slot 1 is late. Its bootstrap recorded
		// a late policy; this node has since been deployed with the
		// other one. The fan-out places by the cycle's, and the ledger's
		// late counts say so.
		for _, c := range []struct {
			recorded, node taskspec.LatePolicy
		}{{taskspec.LatePolicySkip, taskspec.LatePolicySpread}, {taskspec.LatePolicySpread, taskspec.LatePolicySkip}} {
			ctx, b := setup(t, 2000, 50, func(s *taskspec.Spec) { s.LatePolicy = c.node })
			const slot = 1
			start := time.Now().Add(-50 * time.Second).Truncate(time.Second).UTC()
			led := b.table("riverslot_ledger")
			_, err := b.pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, late_policy, late_grace_us) VALUES ($1, $2, $3, -1, $4, $5)",
				b.spec.Name, start, b.spec.PlanID, string(c.recorded), b.spec.Plan.SlotDuration.Microseconds())
			require.NoError(t, err)
			res, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: 1})
			require.NoError(t, err)
			select {
			case ev := <-b.events:
				require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
				require.Equal(t, res.Job.ID, ev.Job.ID)
			case <-time.After(60 * time.Second):
				t.Fatal("the per-slot job did not finish within 60 s")
			}
			n := int64(len(b.slotAccounts(slot)))
			require.Greater(t, n, int64(100))
			var spread, skipped int64
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT late_spread, late_skipped FROM "+led+" WHERE cycle_start = $1 AND slot = $2", start, slot).Scan(&spread, &skipped))
			synced := int64(len(b.syncJobs(ctx, t)))
			if c.recorded == taskspec.LatePolicySkip {
				require.Equal(t, [3]int64{0, n, 0}, [3]int64{spread, skipped, synced}, "recorded skip, node %s: every late account skipped", c.node)
			} else {
				require.Equal(t, [3]int64{n, 0, n}, [3]int64{spread, skipped, synced}, "recorded spread, node %s: every late account spread", c.node)
			}
		}
	})

	t.Run("RetryResumesFromCursor", func(t *testing.T) {
		t.Parallel()
		// The first attempt fails at batch 4 (a lost connection, say); the
		// retry resumes after batch 3: every account of the slot once.
		ctx, b := setup(t, 2000, 20, nil)
		b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
			if batch == 4 && job.Attempt == 1 {
				return errors.New("connection lost")
			}
			return nil
		}
		logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
		b.worker.logger = logger
		ev := b.run(ctx, t, 1, 3)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		require.Equal(t, 2, ev.Job.Attempt)

		// The failed attempt was logged at warn with what an operator needs.
		warned := records.Find("riverslot: per-slot fan-out failed; River retries it from its last committed batch")
		require.Len(t, warned, 1)
		require.Equal(t, "WARN", warned[0]["level"].String())
		require.Equal(t, "transactions", warned[0]["task"].String())
		require.EqualValues(t, 1, warned[0]["slot"].Int64())
		require.EqualValues(t, 1, warned[0]["attempt"].Int64())
		require.Equal(t, "2030-01-01T00:00:00Z", warned[0]["cycle_start"].Time().Format(time.RFC3339))
		require.Contains(t, warned[0]["error"].String(), "connection lost")
		want := map[uuid.UUID]int{}
		for id := range b.slotAccounts(1) {
			want[id] = 1
		}
		require.Equal(t, want, b.syncJobs(ctx, t))
	})
}

func TestCheckKeyset(t *testing.T) {
	t.Parallel()

	id := func(last byte, first byte) uuid.UUID {
		var u uuid.UUID
		u[0], u[15] = first, last
		return u
	}
	page := []account{{ID: id(10, 1), Bucket: 10}, {ID: id(10, 2), Bucket: 10}, {ID: id(11, 0), Bucket: 11}}
	cursor := fanOutCursor{Started: true, Bucket: 10, AfterID: id(10, 0).String()}

	require.NoError(t, checkKeyset(page, 8, 15, fanOutCursor{}, 3))
	require.NoError(t, checkKeyset(page, 8, 15, cursor, 3))
	for name, tt := range map[string]struct {
		page   []account
		cursor fanOutCursor
		lo, hi int
	}{
		"NotPastCursor":  {page, fanOutCursor{Started: true, Bucket: 10, AfterID: id(10, 1).String()}, 8, 15},
		"OutOfRange":     {page, fanOutCursor{}, 11, 15},
		"NotIncreasing":  {[]account{{ID: id(10, 2), Bucket: 10}, {ID: id(10, 1), Bucket: 10}}, fanOutCursor{}, 8, 15},
		"RepeatedRow":    {[]account{{ID: id(10, 2), Bucket: 10}, {ID: id(10, 2), Bucket: 10}}, fanOutCursor{}, 8, 15},
		"BucketBackward": {[]account{{ID: id(11, 0), Bucket: 11}, {ID: id(10, 9), Bucket: 10}}, fanOutCursor{}, 8, 15},
	} {
		err := checkKeyset(tt.page, tt.lo, tt.hi, tt.cursor, 3)
		require.ErrorIs(t, err, ErrKeysetStalled, name)
	}
	require.ErrorIs(t, checkKeyset(page, 8, 15, fanOutCursor{}, 2), ErrKeysetStalled, "more rows than the limit")
}

type ledgerRow struct {
	JobID                   int64
	Accounts, RangeAccounts int64
	Inserted, Skipped       int64
	Batches                 int
	Finished                bool
}

// ledgerRow returns the ledger's row of slot in the cycle b.run makes.
func (b *testBundle) ledgerRow(ctx context.Context, t *testing.T, slot int) ledgerRow {
	t.Helper()
	var r ledgerRow
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT coalesce(job_id, 0), coalesce(accounts, 0), coalesce(range_accounts, 0), coalesce(inserted, 0), coalesce(skipped, 0), coalesce(batches, 0), finished_at IS NOT NULL FROM "+
		b.table("riverslot_ledger")+" WHERE task = $1 AND cycle_start = $2 AND plan = $3 AND slot = $4",
		b.spec.Name, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), b.spec.PlanID, slot).Scan(&r.JobID, &r.Accounts, &r.RangeAccounts, &r.Inserted, &r.Skipped, &r.Batches, &r.Finished))
	return r
}

// TestFanOutAccountsDatabaseUnreachable: with the accounts database down
// (a pool to a port nothing listens on), a per-slot job waits for it,
// snoozed without using an attempt, while its slot's late window lasts;
// once the window ends it fails as any other error (MaxAttempts 1:
// discarded) and the ledger records the slot as failed, with why, for
// readers that come after River deletes the job.
func TestFanOutAccountsDatabaseUnreachable(t *testing.T) {
	t.Parallel()

	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(down.Close)
	ctx, b := setup(t, 50, 20, func(s *taskspec.Spec) { s.AccountsPool = down })

	// Slot 0 of a cycle that started 50 s ago: its late window (half the
	// 2 min cycle after its start) ends 10 s from now.
	start := time.Now().Add(-50 * time.Second).Truncate(time.Millisecond).UTC()
	deadline := start.Add(b.spec.Plan.Cycle / 2)
	led := b.table("riverslot_ledger")
	_, err = b.pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot) VALUES ($1, $2, $3, -1), ($1, $2, $3, 0)", b.spec.Name, start, b.spec.PlanID)
	require.NoError(t, err)
	res, err := b.client.Insert(ctx, NewArgs(b.spec, start, 0), &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE "+led+" SET job_id = $1 WHERE slot = 0", res.Job.ID)
	require.NoError(t, err)

	// While it waits, the ledger says why (Status shows it).
	riverslottest.WaitFor(t, 30*time.Second, "the slot's wait recorded", func() bool {
		return riverslottest.Count(ctx, t, b.pool, "SELECT count(*) FROM "+led+" WHERE slot = 0 AND failed_at IS NULL AND error LIKE 'waiting for the accounts database (unreachable)%'") == 1
	})
	var ev *river.Event
	select {
	case ev = <-b.events:
	case <-time.After(60 * time.Second):
		t.Fatal("the per-slot job did not finish within 60 s")
	}
	require.Equal(t, res.Job.ID, ev.Job.ID)
	require.Equal(t, river.EventKindJobFailed, ev.Kind)
	require.False(t, ev.Job.FinalizedAt.Before(deadline), "it waited for the database until its late window ended (finalized %s, window end %s)", ev.Job.FinalizedAt, deadline)
	require.Len(t, ev.Job.Errors, 1, "one error: the wait used no attempt")
	var md struct {
		Snoozes int `json:"snoozes"`
	}
	require.NoError(t, json.Unmarshal(ev.Job.Metadata, &md))
	require.Positive(t, md.Snoozes)

	var (
		failed bool
		reason string
	)
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT failed_at IS NOT NULL, coalesce(error, '') FROM "+led+" WHERE slot = 0").Scan(&failed, &reason))
	require.True(t, failed, "the ledger records the slot's failure")
	require.Contains(t, reason, "failed to connect")
	require.Empty(t, b.syncJobs(ctx, t))
}

// TestFanOutLogsAtDebug: a slot's fan-out logs its line at debug, so a
// node at info (or warn) does not print one line per slot.
func TestFanOutLogsAtDebug(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, 200, 50, nil)
	logger, records := riverslottest.RecordingLogger(slog.LevelDebug)
	b.worker.logger = logger
	ev := b.run(ctx, t, 0, 1)
	require.Equal(t, rivertype.JobStateCompleted, ev.Job.State)
	var levels []string
	for _, attrs := range records.Find("riverslot: slot fanned out") {
		levels = append(levels, attrs["level"].String())
	}
	require.Equal(t, []string{slog.LevelDebug.String()}, levels, "one fan-out line, at debug")
}

// TestFanOutTwoJobsOfOneSlot: two per-slot jobs of one slot whose ledger
// row names no job (made before the ledger recorded per-slot jobs, or
// pruned) pass the check at their start. The first to commit a batch
// claims the slot; the other, started while the first is between its
// batches, is cancelled and inserts nothing: every account once. (Before,
// each fanned the slot out, and the second's RecordSlot refusal was
// ignored.)
func TestFanOutTwoJobsOfOneSlot(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, 2000, 20, nil)
	const slot = 3
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Finished jobs' events: the first job's, and the others'.
	var firstID atomic.Int64
	firstDone, finished := make(chan *river.Event, 1), make(chan *river.Event, 4)
	go func() {
		for ev := range b.events {
			switch {
			case ev.Job.FinalizedAt == nil:
			case ev.Job.ID == firstID.Load():
				firstDone <- ev
			default:
				finished <- ev
			}
		}
	}()
	var second *river.Event
	b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
		if batch != 2 || job.ID != firstID.Load() {
			return nil
		}
		// The first job committed its first batch: a second job of the
		// slot starts and runs to its end meanwhile.
		res, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: 1})
		if err != nil {
			return err
		}
		select {
		case second = <-finished:
		case <-time.After(60 * time.Second):
			return errors.New("the second per-slot job did not finish within 60 s")
		}
		if second.Job.ID != res.Job.ID {
			return errors.New("another job than the second finished")
		}
		return nil
	}
	first, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	firstID.Store(first.Job.ID) // long before it finishes: it waits for the second
	var ev *river.Event
	select {
	case ev = <-firstDone:
	case <-time.After(90 * time.Second):
		t.Fatal("the first per-slot job did not finish within 90 s")
	}
	require.Equal(t, first.Job.ID, ev.Job.ID)
	require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
	require.NotNil(t, second)
	require.Equal(t, river.EventKindJobCancelled, second.Kind, "%+v", second.Job.Errors)
	require.Contains(t, second.Job.Errors[0].Error, ErrDuplicate.Error())

	want := map[uuid.UUID]int{}
	for id := range b.slotAccounts(slot) {
		want[id] = 1
	}
	require.Greater(t, len(want), 40)
	require.Equal(t, want, b.syncJobs(ctx, t), "every account of the slot once")
	n := int64(len(want))
	require.Equal(t, ledgerRow{JobID: first.Job.ID, Accounts: n, RangeAccounts: n, Inserted: n, Batches: int((n + 19) / 20), Finished: true}, b.ledgerRow(ctx, t, slot))
}

// TestOverlapStoppedFanOut: a plan change's overlap rule reads how far a
// stopped fan-out got from the ledger. The older plan's fan-out of a slot
// commits two batches (40 accounts), then its last attempt fails and River
// deletes the job. The newer plan's cycle, at the same time, leaves those
// 40 accounts to it and syncs the others: every account of the slot once.
// (Before, a slot not finished whose job was gone or failed counted as
// having synced nothing, and the 40 were synced twice, seconds apart.)
func TestOverlapStoppedFanOut(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t, 2000, 20, nil)
	const slot = 4
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	led := b.table("riverslot_ledger")
	newer, err := b.spec.ForPlan(taskspec.KeyOf(b.spec.Plan, b.spec.Seed+1, 0), start)
	require.NoError(t, err)
	require.NotEqual(t, b.spec.PlanID, newer.PlanID)

	// The older plan's cycle, recorded first; its fan-out fails for good
	// before batch 3.
	older, err := b.client.Insert(ctx, NewArgs(b.spec, start, slot), &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	b.worker.beforeBatch = func(ctx context.Context, job *river.Job[Args], batch int) error {
		if job.ID == older.Job.ID && batch == 3 {
			return errors.New("connection lost")
		}
		return nil
	}
	_, err = b.pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, job_id, recorded_at) VALUES ($1, $2, $3, -1, NULL, now() - interval '1 minute'), ($1, $2, $3, $4, $5, NULL)",
		b.spec.Name, start, b.spec.PlanID, slot, older.Job.ID)
	require.NoError(t, err)
	select {
	case ev := <-b.events:
		require.Equal(t, older.Job.ID, ev.Job.ID)
		require.Equal(t, river.EventKindJobFailed, ev.Kind)
	case <-time.After(60 * time.Second):
		t.Fatal("the older per-slot job did not finish within 60 s")
	}
	first := b.syncJobs(ctx, t)
	require.Len(t, first, 40, "two batches committed")
	_, err = b.pool.Exec(ctx, "DELETE FROM "+b.table("river_job")+" WHERE id = $1", older.Job.ID)
	require.NoError(t, err)

	// The newer plan's cycle at the same start, recorded after.
	_, err = b.pool.Exec(ctx, "INSERT INTO "+led+" (task, cycle_start, plan, slot, recorded_at) VALUES ($1, $2, $3, -1, now())", b.spec.Name, start, newer.PlanID)
	require.NoError(t, err)
	res, err := b.client.Insert(ctx, NewArgs(newer, start, slot), &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	select {
	case ev := <-b.events:
		require.Equal(t, res.Job.ID, ev.Job.ID)
		require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
	case <-time.After(60 * time.Second):
		t.Fatal("the newer per-slot job did not finish within 60 s")
	}

	want := map[uuid.UUID]int{}
	for id := range b.slotAccounts(slot) {
		want[id] = 1
	}
	require.Greater(t, len(want), 60)
	require.Equal(t, want, b.syncJobs(ctx, t), "every account of the slot once: the 40 the stopped fan-out placed by it, the rest by the newer plan")
	var inserted, skipped int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT inserted, skipped FROM "+led+" WHERE plan = $1 AND slot = $2", newer.PlanID, slot).Scan(&inserted, &skipped))
	require.Equal(t, [2]int64{int64(len(want)) - 40, 40}, [2]int64{inserted, skipped})
}
