package integration

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestMonthlyAcrossDST runs a calendar-month task in Europe/London through
// February, March and April 2027 with a real River client: two month
// boundaries and the 23-hour 28 March (the clocks spring forward). The
// months are a year ahead, so the test compresses time itself: it moves
// each per-slot job to now once its cycle has scheduled it, then March's
// sync jobs, as the clock reaching them would. Every expectation is
// worked out here from the calendar and the definition (an account's place
// is its two-byte bucket / 65,536 of the month, refined by its hash), not
// from the code under test:
//
//   - each month's bootstrap makes one per-slot job per calendar day,
//     scheduled Lead before local midnight (28, 31 and 30 of them);
//   - every account is synced exactly once a month, on the local day its
//     sync is scheduled in, at the same fraction of every month, within
//     1/65,536 of its bucket's place;
//   - the days' loads follow their lengths (chi-square over March, whose
//     28th has 23 hours);
//   - accounts added mid-March are synced in March when their place comes
//     after the days already fanned out, else first in April;
//   - the ledger counts each month's syncs, Status lays March out as 31
//     days, and the synced table holds each call once.
func TestMonthlyAcrossDST(t *testing.T) {
	parallel(t)

	const (
		random   = 1000
		boundary = 6 // accounts in each bucket that spans a March midnight
	)
	ctx, b := setup(t, random)
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, b.pool, b.schema, "accounts", "id", slotplan.BucketsTwoByte))
	london, err := time.LoadLocation("Europe/London")
	require.NoError(t, err)
	// The bucket holding each March midnight (its place, as a fraction of
	// the month's 743 hours, times 65,536) gets accounts of its own: their
	// places fall on either side of midnight, and each must be synced
	// once, by one of the two days.
	var edge []uuid.UUID
	for d := 2; d <= 31; d++ {
		midnight := time.Date(2027, 3, d, 0, 0, 0, 0, london).Sub(time.Date(2027, 3, 1, 0, 0, 0, 0, london))
		bucket := int(float64(midnight) / float64(743*time.Hour) * 65536)
		for range boundary {
			id := uuid.New()
			id[15], id[14] = byte(bucket>>8), byte(bucket)
			edge = append(edge, id)
		}
	}
	_, err = b.pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{b.schema, "accounts"}.Sanitize()+" (id) SELECT unnest($1::uuid[])", edge)
	require.NoError(t, err)
	b.ids = append(b.ids, edge...)
	accounts := len(b.ids)
	scheduler := newScheduler(t, b, riverslot.Task{
		Name: "bills", Monthly: true, Location: london, Schema: b.schema, Table: "accounts", Filter: "active",
		BatchSize: 300, Sync: b.recordSync(),
	})
	info := taskInfo(t, scheduler, "bills")
	require.NotNil(t, info.Month)
	client := startClient(ctx, t, b, scheduler, false, river.QueueDefault)

	jobs := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	months := []time.Time{
		time.Date(2027, 2, 1, 0, 0, 0, 0, london),
		time.Date(2027, 3, 1, 0, 0, 0, 0, london),
		time.Date(2027, 4, 1, 0, 0, 0, 0, london),
	}
	days := map[time.Month]int{time.February: 28, time.March: 31, time.April: 30}
	for _, m := range months {
		_, err := scheduler.EnqueueCycle(ctx, client, "bills", m)
		require.NoError(t, err)
		waitFor(t, 30*time.Second, "the month's per-slot jobs", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2", perslot.Kind, m) == int64(days[m.Month()])
		})
		// One per-slot job per local day, Lead before its midnight.
		rows, err := b.pool.Query(ctx, "SELECT (args->>'slot')::int, scheduled_at FROM "+jobs+" WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2",
			perslot.Kind, m)
		require.NoError(t, err)
		var (
			slot int
			at   time.Time
		)
		seen := map[int]bool{}
		_, err = pgx.ForEachRow(rows, []any{&slot, &at}, func() error {
			want := time.Date(2027, m.Month(), slot+1, 0, 0, 0, 0, london).Add(-info.Lead)
			require.True(t, want.Equal(at), "%s slot %d scheduled %s, want %s", m.Month(), slot, at, want)
			seen[slot] = true
			return nil
		})
		require.NoError(t, err)
		require.Len(t, seen, days[m.Month()])
	}
	require.EqualValues(t, 3, b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1", bootstrap.Kind))

	// The clock reaches each day: its per-slot job runs now.
	runDays := func(m time.Time, from, to int) {
		t.Helper()
		_, err := b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND (args->>'cycle_start')::timestamptz = $2"+
			" AND (args->>'slot')::int BETWEEN $3 AND $4", perslot.Kind, m, from, to)
		require.NoError(t, err)
		waitFor(t, 60*time.Second, "the days' fan-outs", func() bool {
			return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed' AND (args->>'cycle_start')::timestamptz = $2"+
				" AND (args->>'slot')::int BETWEEN $3 AND $4", perslot.Kind, m, from, to) == int64(to-from+1)
		})
	}
	runDays(months[0], 0, 27)
	runDays(months[1], 0, 13) // up to 14 March
	added := riverslottest.InsertAccounts(ctx, t, b.pool, b.schema, "accounts", 150)
	runDays(months[1], 14, 30)
	runDays(months[2], 0, 29)

	// Every sync job, as the fan-outs scheduled it.
	type sync struct {
		slot int
		at   time.Time
	}
	planned := map[time.Time]map[uuid.UUID][]sync{}
	rows, err := b.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, (args->>'cycle_start')::timestamptz, (args->>'slot')::int, scheduled_at FROM "+jobs+
		" WHERE kind = $1", syncjob.Kind)
	require.NoError(t, err)
	var (
		id    uuid.UUID
		start time.Time
		slot  int
		at    time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &start, &slot, &at}, func() error {
		if planned[start.UTC()] == nil {
			planned[start.UTC()] = map[uuid.UUID][]sync{}
		}
		planned[start.UTC()][id] = append(planned[start.UTC()][id], sync{slot, at})
		return nil
	})
	require.NoError(t, err)
	require.Len(t, planned, 3)

	place := func(m time.Time, at time.Time) float64 { // fraction of the month
		next := time.Date(m.Year(), m.Month()+1, 1, 0, 0, 0, 0, london)
		return float64(at.Sub(m)) / float64(next.Sub(m))
	}
	isAdded := map[uuid.UUID]bool{}
	for _, id := range added {
		isAdded[id] = true
	}
	all := append(append([]uuid.UUID{}, b.ids...), added...)
	for _, m := range months {
		syncs := planned[m.UTC()]
		for id, ss := range syncs {
			require.Len(t, ss, 1, "account %s has one sync in %s", id, m.Month())
			s := ss[0]
			local := s.at.In(london)
			require.Equal(t, m.Month(), local.Month(), "account %s due in its month", id)
			require.Equal(t, local.Day()-1, s.slot, "account %s: its sync's slot is the local day it is due on", id)
			bucket := float64(int(id[15])*256 + int(id[14]))
			f := place(m, s.at)
			require.True(t, f >= bucket/65536-1e-9 && f < (bucket+1)/65536+1e-9, "account %s at %.8f of %s, its bucket %v", id, f, m.Month(), bucket)
		}
	}
	// The same place every month: February's and April's fractions agree
	// (to the microsecond a target is truncated to).
	for _, id := range all {
		feb, apr := planned[months[0].UTC()][id], planned[months[2].UTC()][id]
		require.Len(t, apr, 1, "account %s synced in April", id)
		if isAdded[id] {
			require.Empty(t, feb, "an account added in March is not in February")
			// Its March sync exists exactly when its place comes on or
			// after 15 March, the first day not yet fanned out when it
			// was added.
			due := time.Date(2027, 3, 1, 0, 0, 0, 0, london).Add(time.Duration(place(months[2], apr[0].at) * float64(743*time.Hour)))
			if mar := planned[months[1].UTC()][id]; due.In(london).Day() >= 15 {
				require.Len(t, mar, 1, "account %s added on 14 March, due on %s, is synced in March", id, due.In(london))
			} else {
				require.Empty(t, mar, "account %s added on 14 March, due on %s, waits for April", id, due.In(london))
			}
			continue
		}
		require.Len(t, feb, 1, "account %s synced in February", id)
		require.InDelta(t, place(months[0], feb[0].at), place(months[2], apr[0].at), 2e-12)
	}
	require.Len(t, planned[months[0].UTC()], accounts)
	require.Len(t, planned[months[2].UTC()], accounts+len(added))

	// March's days carry load in proportion to their lengths (the 28th:
	// 23 of 743 hours). Chi-square over the random accounts, 30 degrees
	// of freedom: mean 30, standard deviation 7.7; 80 is 6.5 deviations
	// out, while putting a day's accounts on its neighbour fails by far.
	counts := make([]float64, 31)
	for _, id := range b.ids[:random] {
		counts[planned[months[1].UTC()][id][0].slot]++
	}
	var chi2 float64
	for d := range 31 {
		length := time.Date(2027, 3, d+2, 0, 0, 0, 0, london).Sub(time.Date(2027, 3, d+1, 0, 0, 0, 0, london))
		want := float64(random) * float64(length) / float64(743*time.Hour)
		chi2 += (counts[d] - want) * (counts[d] - want) / want
	}
	// The edge accounts went to both sides of their midnights.
	sides := map[int]int{}
	for _, id := range edge {
		sides[planned[months[1].UTC()][id][0].slot]++
	}
	t.Logf("March: chi-square %.1f over 31 days, 28 March (23 h) %v accounts; %d edge accounts over %d days", chi2, counts[27], len(edge), len(sides))
	require.Greater(t, len(sides), 30, "edge accounts on both sides of some midnight")
	require.Less(t, chi2, 80.0, "days' counts %v", counts)

	// The clock reaches March's syncs: each runs now, and calls Sync once.
	total := len(planned[months[1].UTC()])
	_, err = b.pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now(), state = 'available' WHERE kind = $1 AND state = 'scheduled' AND (args->>'cycle_start')::timestamptz = $2",
		syncjob.Kind, months[1])
	require.NoError(t, err)
	waitFor(t, 120*time.Second, "every sync", func() bool {
		return b.count(ctx, t, "SELECT count(*) FROM "+jobs+" WHERE kind = $1 AND state = 'completed'", syncjob.Kind) == int64(total)
	})
	synced := pgx.Identifier{b.schema, "synced"}.Sanitize()
	require.EqualValues(t, total, b.count(ctx, t, "SELECT count(*) FROM "+synced))
	require.EqualValues(t, total, b.count(ctx, t, "SELECT count(DISTINCT (account_id, cycle_start)) FROM "+synced))

	// The ledger's count of March's syncs, and March laid out as 31 days.
	waitFor(t, 30*time.Second, "the ledger to count March's syncs", func() bool {
		st, err := scheduler.StatusAt(ctx, "bills", months[1])
		return err == nil && st.Current.Synced == int64(len(planned[months[1].UTC()]))
	})
	st, err := scheduler.StatusAt(ctx, "bills", months[1])
	require.NoError(t, err)
	c := st.Current
	require.Equal(t, 31, c.Slots)
	require.Len(t, c.PerSlot, 31)
	require.True(t, c.PerSlot[27].Start.Equal(time.Date(2027, 3, 28, 0, 0, 0, 0, london)))
	require.Equal(t, 23*time.Hour, c.PerSlot[28].Start.Sub(c.PerSlot[27].Start), "the 28th has 23 hours")
	require.Equal(t, info.PlanID, c.Plan)
	for _, p := range c.PerSlot {
		require.Equal(t, riverslot.SlotDone, p.State, "day %d", p.Slot)
	}
	require.Equal(t, int64(len(planned[months[1].UTC()])), c.Enqueued)
	// April's days, fanned out after every account was there, each
	// selected the accounts Status expects of it from the table.
	st, err = scheduler.StatusAt(ctx, "bills", months[2])
	require.NoError(t, err)
	require.Equal(t, 30, st.Current.Slots)
	require.Zero(t, st.Current.OffSlots, st.Current.Verdict)
	require.Equal(t, int64(accounts+len(added)), st.Current.AccountsExpected)

	// The account page of one account: its next calls at its place in
	// each month.
	a, err := scheduler.Account(context.Background(), "bills", b.ids[0])
	require.NoError(t, err)
	require.Len(t, a.NextSyncs, 3)
	f := place(months[2], planned[months[2].UTC()][b.ids[0]][0].at)
	for _, next := range a.NextSyncs {
		ms := time.Date(next.In(london).Year(), next.In(london).Month(), 1, 0, 0, 0, 0, london)
		require.InDelta(t, f, place(ms, next), 2e-12, "next sync %s at the account's place", next)
	}
	require.False(t, math.IsNaN(f))
}
