package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/slotplan"
)

// deepQueue measures River's own queries on two queues for the same
// accounts and 24h cycle: naive (every account's job enqueued at cycle start,
// scheduled over the whole day) and slot scheduling (one slot's accounts,
// about accounts/128). It times River's JobSchedule statement (what the
// leader runs every 5 s to promote due scheduled jobs) at a moment when the
// same number of jobs are due in both, and JobGetAvailable (a producer's
// fetch of 100 jobs), each in a transaction that is rolled back.
func (r *Runner) deepQueue(ctx context.Context) error {
	n := r.cfg.DeepQueue
	plan, _ := slotplan.New(24 * time.Hour)
	cycleStart := time.Now().Truncate(time.Minute).Add(time.Hour)
	seed := slotplan.SeedFromName("bench")

	type measured struct {
		jobs            int
		schedule, fetch time.Duration
		due             int
	}
	// The same accounts in both queues (a seeded generator), so both have
	// the same jobs due: slot 0's accounts whose targets have passed.
	ids := make([]uuid.UUID, n)
	rng := rand.New(rand.NewPCG(20261122, 1))
	for i := range ids {
		for j := range ids[i] {
			ids[i][j] = byte(rng.UintN(256))
		}
		ids[i][6] = ids[i][6]&0x0f | 0x40 // version 4
		ids[i][8] = ids[i][8]&0x3f | 0x80 // RFC 4122 variant
	}
	alreadyDue := make([]uuid.UUID, 1000)
	for i := range alreadyDue {
		alreadyDue[i] = uuid.New()
	}

	run := func(name string, onlySlot0 bool) (*measured, error) {
		schema, drop, err := r.schema(ctx, name)
		if err != nil {
			return nil, err
		}
		defer drop()
		client, err := river.NewClient(riverpgxv5.New(r.cfg.Pool), &river.Config{Schema: schema})
		if err != nil {
			return nil, err
		}

		// n accounts; the naive queue holds all of them, the slot queue the
		// ones in slot 0 (the slot being worked).
		params := make([]river.InsertManyParams, 0, 10_000)
		opts := make([]river.InsertOpts, 10_000)
		total := 0
		flush := func() error {
			if len(params) == 0 {
				return nil
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				return err
			}
			total += len(params)
			params = params[:0]
			return nil
		}
		for _, id := range ids {
			if onlySlot0 && plan.SlotOf(id) != 0 {
				continue
			}
			o := &opts[len(params)]
			*o = river.InsertOpts{ScheduledAt: plan.Target(cycleStart, seed, id)}
			params = append(params, river.InsertManyParams{Args: syncjob.NewArgs("bench", id, cycleStart, plan.SlotOf(id)), InsertOpts: o})
			if len(params) == cap(params) {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
		// 1,000 jobs already due, for the fetch.
		for _, id := range alreadyDue {
			o := &opts[len(params)]
			*o = river.InsertOpts{}
			params = append(params, river.InsertManyParams{Args: syncjob.NewArgs("bench", id, cycleStart, 0), InsertOpts: o})
		}
		if err := flush(); err != nil {
			return nil, err
		}
		if _, err := r.cfg.Pool.Exec(ctx, "VACUUM ANALYZE "+riverjob.QualifiedTable(schema)); err != nil {
			return nil, err
		}
		r.logf("%s queue: %d jobs", name, total)

		driver := riverpgxv5.New(r.cfg.Pool)
		// 30 s into the cycle: the same ~n/86400*30 jobs are due in both.
		scheduleAt := cycleStart.Add(30 * time.Second)
		fetchAt := time.Now()
		m := &measured{jobs: total}
		var schedule, fetch []time.Duration
		for i := range 31 {
			for _, op := range []string{"schedule", "fetch"} {
				tx, err := r.cfg.Pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				exec := driver.UnwrapExecutor(tx)
				begun := time.Now()
				if op == "schedule" {
					res, err := exec.JobSchedule(ctx, &riverdriver.JobScheduleParams{Max: 10_000, Now: &scheduleAt, Schema: schema})
					if err != nil {
						_ = tx.Rollback(ctx)
						return nil, err
					}
					m.due = len(res)
				} else {
					if _, err := exec.JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
						ClientID: "bench", MaxAttemptedBy: 100, MaxToLock: 100, Now: &fetchAt, Queue: river.QueueDefault, Schema: schema,
					}); err != nil {
						_ = tx.Rollback(ctx)
						return nil, err
					}
				}
				d := time.Since(begun)
				if err := tx.Rollback(ctx); err != nil {
					return nil, err
				}
				if i == 0 {
					continue // warm-up
				}
				if op == "schedule" {
					schedule = append(schedule, d)
				} else {
					fetch = append(fetch, d)
				}
			}
		}
		m.schedule, m.fetch = median(schedule), median(fetch)
		return m, nil
	}

	naive, err := run("naive", false)
	if err != nil {
		return err
	}
	slot, err := run("slot", true)
	if err != nil {
		return err
	}
	if slot.due != naive.due {
		return fmt.Errorf("deep queue: %d jobs due in the slot queue, %d in the naive one; both must have the same", slot.due, naive.due)
	}
	size := fmt.Sprintf("%s accounts, 24h cycle", human(n))
	r.row(fmt.Sprintf("River JobSchedule (promote due jobs; %d due), median of 30", slot.due), size,
		ms(slot.schedule)+fmt.Sprintf(" (%d queued)", slot.jobs), ms(naive.schedule)+fmt.Sprintf(" naive (%d queued, %d due)", naive.jobs, naive.due),
		fasterOrSlower(naive.schedule, slot.schedule))
	r.row("River JobGetAvailable (fetch 100), median of 30", size,
		ms(slot.fetch), ms(naive.fetch)+" naive",
		fasterOrSlower(naive.fetch, slot.fetch))
	return nil
}

// fasterOrSlower says how riverslot's time compares with a baseline's.
func fasterOrSlower(baseline, slot time.Duration) string {
	if baseline >= slot {
		return fmt.Sprintf("%.1fx faster", float64(baseline)/float64(slot))
	}
	return fmt.Sprintf("%.1fx slower", float64(slot)/float64(baseline))
}
