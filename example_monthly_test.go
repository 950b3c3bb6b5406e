package riverslot_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example_monthly syncs every account once a calendar month, in London.
// An account's place is a fixed fraction of the month: its bucket (the
// last two bytes of its UUID, the last one high) over 65,536, refined
// within that 1/65,536 (under 41 s) by a hash. The four accounts here sit
// at 0, 1/4, 1/2 and 3/4 of every month. February 2099 has 28 days of
// 24 h, so they are due on the 1st, 8th, 15th and 22nd at midnight; March
// has 31 days and 743 h (on the 29th the clocks go forward), so they are
// due on the 1st, then 185 h 45 min, 371 h 30 min and 557 h 15 min later.
// Each month's slots are its local days: one per-slot job a day, each
// selecting the accounts due that day. (The months are far ahead so that
// the example's clock never reaches them.)
func Example_monthly() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.EmptySchema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	accounts := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := dbPool.Exec(ctx, "CREATE TABLE "+accounts+" (id uuid PRIMARY KEY)"); err != nil {
		panic(err)
	}
	var ids []uuid.UUID
	for _, high := range []byte{0x00, 0x40, 0x80, 0xc0} { // buckets 0, 16384, 32768, 49152
		id := uuid.New()
		id[15], id[14] = high, 0
		if _, err := dbPool.Exec(ctx, "INSERT INTO "+accounts+" (id) VALUES ($1)", id); err != nil {
			panic(err)
		}
		ids = append(ids, id)
	}

	london, err := time.LoadLocation("Europe/London")
	if err != nil {
		panic(err)
	}
	if err := riverslot.Migrate(ctx, dbPool, schema); err != nil {
		panic(err)
	}
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		Logger: slog.New(slog.DiscardHandler),
		Tasks: []riverslot.Task{{
			Name:     "invoices",
			Monthly:  true, // no Cycle: the calendar month
			Location: london,
			Schema:   schema,
			Table:    "accounts",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := scheduler.CreateIndexes(ctx); err != nil { // the two-byte bucket index
		panic(err)
	}
	task, err := scheduler.Task("invoices")
	if err != nil {
		panic(err)
	}
	february := time.Date(2099, time.February, 1, 0, 0, 0, 0, london)
	march := time.Date(2099, time.March, 1, 0, 0, 0, 0, london)
	prepareCycles(ctx, dbPool, scheduler, schema, "invoices", february, march)

	for _, month := range []time.Time{february, march} {
		status, err := scheduler.StatusAt(ctx, "invoices", month)
		if err != nil {
			panic(err)
		}
		var jobs int
		var dst string
		var days, due []string
		for _, s := range status.Current.PerSlot { // one per day
			if s.State == riverslot.SlotScheduled { // its per-slot job waits in River
				jobs++
			}
			if length := task.Month.DayStart(month, s.Slot+1).Sub(s.Start); length != 24*time.Hour {
				dst = fmt.Sprintf(", day %d lasts %s", s.Slot+1, length)
			}
			if s.Expected > 0 {
				days = append(days, fmt.Sprint(s.Slot+1))
			}
		}
		for _, id := range ids {
			due = append(due, task.Due(month, id).In(london).Format("Jan 2 15:04"))
		}
		fmt.Printf("%s: %d days, %d per-slot jobs%s\n", month.Format("January 2006"), status.Current.Slots, jobs, dst)
		fmt.Println("  due", strings.Join(due, ", "))
		fmt.Println("  accounts expected on days", strings.Join(days, ", "))
	}

	// Output:
	// February 2099: 28 days, 28 per-slot jobs
	//   due Feb 1 00:00, Feb 8 00:00, Feb 15 00:00, Feb 22 00:00
	//   accounts expected on days 1, 8, 15, 22
	// March 2099: 31 days, 31 per-slot jobs, day 29 lasts 23h0m0s
	//   due Mar 1 00:00, Mar 8 17:45, Mar 16 11:30, Mar 24 05:15
	//   accounts expected on days 1, 8, 16, 24
}
