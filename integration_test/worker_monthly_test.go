package integration

import (
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestWorkerMonthly runs a calendar-month task through the command line, as
// an operator would: `riverslot worker --cycle monthly --location
// Europe/Berlin` works next month's cycle (enqueued here, the clock moved
// as TestMonthlyAcrossDST moves it: each job runs now once its cycle has
// scheduled it), and `riverslot status` with no plan flag shows it from
// the ledger. Expected from the calendar and the definition (an account's
// place is its two-byte bucket / 65,536 of the month), not from the code:
//   - the bootstrap makes one per-slot job per local day of the month;
//   - the first three days' fan-outs schedule every account whose place is
//     in those days, at a time inside its day and inside its bucket's
//     share of the month, and no account placed later;
//   - the worker calls Sync once for each of them;
//   - status names the monthly plan and lays the month out as its days.
func TestWorkerMonthly(t *testing.T) {
	parallel(t)

	const accounts = 600
	ctx, b := setup(t, accounts)
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, b.pool, b.schema, "accounts", "id", slotplan.BucketsTwoByte))
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	markSchemaAsDemos(ctx, t, b.pool, b.schema)
	w := startWorker(t, b.schema, "monthly", "--task", "invoices", "--cycle", "monthly", "--location", "Europe/Berlin", "--periodic=false")

	// Next month in Berlin, made ahead by an app's scheduler with the same task.
	now := time.Now().In(berlin)
	start := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, berlin)
	end := time.Date(now.Year(), now.Month()+2, 1, 0, 0, 0, 0, berlin)
	days := time.Date(now.Year(), now.Month()+2, 0, 0, 0, 0, 0, berlin).Day()
	scheduler := newScheduler(t, b, riverslot.Task{Name: "invoices", Monthly: true, Location: berlin, Schema: b.schema, Table: "accounts", Filter: "active", Sync: b.recordSync()})
	insertOnly, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Schema: b.schema})
	require.NoError(t, err)
	_, err = scheduler.EnqueueCycle(ctx, insertOnly, "invoices", start)
	require.NoError(t, err)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	waitFor(t, 60*time.Second, "the worker to bootstrap the month", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", perslot.Kind) == int64(days)
	})
	require.EqualValues(t, days, b.count(ctx, t, "SELECT count(DISTINCT (args->>'slot')::int) FROM "+jobs+" WHERE kind = $1 AND (args->>'slot')::int BETWEEN 0 AND $2",
		perslot.Kind, days-1), "one per-slot job per local day")

	// The clock reaches the first three days: their fan-outs run now.
	const fanned = 3
	dayStart := func(d int) time.Time { return time.Date(start.Year(), start.Month(), d+1, 0, 0, 0, 0, berlin) }
	_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND (args->>'slot')::int < $2", perslot.Kind, fanned)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the three days' fan-outs", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'slot')::int < $2", perslot.Kind, fanned) == fanned
	})

	// Each sync job as the fan-outs scheduled it.
	monthLen := end.Sub(start)
	placeOf := func(id uuid.UUID) (lo, hi time.Time) { // a millisecond's margin: float64 and timestamptz's microseconds
		bucket := float64(int(id[15])<<8 | int(id[14])) // the two-byte bucket: last byte high (sqlbucket)
		return start.Add(time.Duration(float64(monthLen)*bucket/65536) - time.Millisecond),
			start.Add(time.Duration(float64(monthLen)*(bucket+1)/65536) + time.Millisecond)
	}
	scheduled := map[uuid.UUID]time.Time{}
	rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, (args->>'slot')::int, scheduled_at FROM "+jobs+" WHERE kind = $1", syncjob.Kind)
	require.NoError(t, err)
	var (
		id   uuid.UUID
		slot int
		at   time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &slot, &at}, func() error {
		_, dup := scheduled[id]
		require.False(t, dup, "account %s has two sync jobs", id)
		scheduled[id] = at
		require.Less(t, slot, fanned)
		require.False(t, at.Before(dayStart(slot)) || !at.Before(dayStart(slot+1)), "account %s of day %d scheduled %s, outside the day", id, slot+1, at)
		lo, hi := placeOf(id)
		require.False(t, at.Before(lo) || !at.Before(hi), "account %s scheduled %s, outside its bucket's share of the month [%s, %s)", id, at, lo, hi)
		return nil
	})
	require.NoError(t, err)
	var want int
	for _, id := range b.ids {
		lo, hi := placeOf(id)
		switch {
		case !hi.After(dayStart(fanned)): // its whole bucket share is in the first three days
			want++
			require.Contains(t, scheduled, id, "account placed in the first three days")
		case !lo.Before(dayStart(fanned)):
			require.NotContains(t, scheduled, id, "account placed after the first three days")
		default: // its bucket straddles the third midnight: either side
			if _, ok := scheduled[id]; ok {
				want++
			}
		}
	}
	require.Positive(t, want)
	require.Len(t, scheduled, want)

	// The clock reaches their syncs: the worker calls Sync once for each.
	_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND state = 'scheduled'", syncjob.Kind)
	require.NoError(t, err)
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	waitFor(t, 60*time.Second, "the worker's Sync calls", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", syncjob.Kind) == int64(want)
	})
	require.EqualValues(t, want, b.count(ctx, t, "SELECT count(*) FROM "+synced+" WHERE task = 'invoices' AND cycle_start = $1", start), "Sync calls")
	require.EqualValues(t, want, b.count(ctx, t, "SELECT count(DISTINCT account_id) FROM "+synced+" WHERE task = 'invoices' AND cycle_start = $1", start), "accounts synced")

	// The jobs carry the plan they were made for, and a node runs them under
	// it whatever its own: the worker's flags made its plan the app's
	// monthly Berlin one only if it never said otherwise.
	require.NotContains(t, w.logs.String(), "made for another plan than this node's", "the worker's --cycle monthly --location Europe/Berlin is the app's plan")

	// status with no plan flag: the ledger's monthly plan, its days as slots.
	out, err := exec.Command(riverslotBinary(t), "status", "--database-url", riverslottest.DatabaseURL(), "--schema", b.schema, "--task", "invoices", "--json").Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	// Exit 1 is a verdict (the month's later days wait): the JSON is what matters.
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok && ee.ExitCode() == 1, "status: %v\n%s", err, stderr)
	}
	var st struct {
		CycleStart time.Time `json:"cycle_start"`
		Plan       string    `json:"plan"`
		Slots      int       `json:"slots"`
	}
	require.NoError(t, json.Unmarshal(out, &st), "%s\n%s", out, stderr)
	require.True(t, start.Equal(st.CycleStart), "cycle_start %s, want %s", st.CycleStart, start)
	require.Contains(t, st.Plan, "monthly/")
	require.Equal(t, days, st.Slots, "one slot per day of the month")
}
