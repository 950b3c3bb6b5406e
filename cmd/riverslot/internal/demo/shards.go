package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shutdown"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// demoShard is one shard of demo --shards: its own database (or schema),
// River client and accounts.
type demoShard struct {
	name     string
	d        *demo // its schema, pool and accounts
	accounts []uuid.UUID
	sched    *riverslot.Scheduler
	client   *river.Client[pgx.Tx]
	ranges   string
}

// ShardReport is one shard's figures, or all shards' ("all").
type ShardReport struct {
	Shard    string `json:"shard"`
	Schema   string `json:"schema,omitempty"`
	Ranges   string `json:"ranges,omitempty"`
	Slots    int    `json:"slots"`
	Accounts int64  `json:"accounts"`
	// SyncedOnce, Missed and Duplicated count account-cycles over the
	// run's cycles: an account synced exactly once in a cycle, not at
	// all, more than once.
	SyncedOnce int64 `json:"synced_once"`
	Missed     int64 `json:"missed"`
	Duplicated int64 `json:"duplicated"`
	// Skipped counts account-cycles skipped by a rule, each a reason the
	// ledger recorded: by the fan-out as too late, or by the sync worker
	// as stale or without room at its upstream. On a machine that keeps up it is 0; on a loaded one, every
	// missed account-cycle is one of these, never lost without a trace.
	Skipped int64 `json:"skipped"`
	// RiverJobRows is the rows in the shard's river_job at the end;
	// FanOutMeanSeconds the mean time of its slots' fan-outs, from its
	// ledger; SyncsPerSecond the Sync calls it delivered over its cycles.
	RiverJobRows      int64   `json:"river_job_rows"`
	FanOutMeanSeconds float64 `json:"fan_out_mean_seconds"`
	SyncsPerSecond    float64 `json:"syncs_per_second"`
	// LatenessP50Seconds and LatenessP99Seconds are percentiles of each
	// Sync call's start after its scheduled time over the run's cycles:
	// what tells a server that keeps up from one that does not. For
	// "all", the worst shard's.
	LatenessP50Seconds float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
}

// ShardsSummary is demo --shards' JSON report.
type ShardsSummary struct {
	Task   string        `json:"task"`
	Cycle  string        `json:"cycle"`
	Cycles int           `json:"cycles"`
	Map    string        `json:"map"`
	Shards []ShardReport `json:"shards"`
	All    ShardReport   `json:"all"`
}

// runShards runs the demo's task over the databases of --shards, one
// shard each (schema <--schema>_<shard>, so shards may share a database):
// the accounts spread by the shard map, which gives each shard an equal
// share of the cycle's slots; one River client per shard; the figures
// per shard and in all, from each shard's own record of its Sync calls.
func runShards(ctx context.Context, cfg *Config, stderr io.Writer, tty bool) (*ShardsSummary, error) {
	plan := mustPlan(cfg.Cycle)
	n := len(cfg.ShardPools)
	// Shard i gets slots [i*slots/n, (i+1)*slots/n): ranges on the slots.
	width := slotplan.BucketsTwoByte / plan.Slots
	var m slotplan.ShardMap
	shards := make([]*demoShard, n)
	for i, pool := range cfg.ShardPools {
		name := ShardName(i)
		lo, hi := i*plan.Slots/n*width, (i+1)*plan.Slots/n*width-1
		m.Ranges = append(m.Ranges, slotplan.ShardRange{Shard: name, Lo: lo, Hi: hi})
		so := *cfg
		so.Schema = cfg.Schema + "_" + name
		shards[i] = &demoShard{name: name, ranges: fmt.Sprintf("%d-%d", lo, hi),
			d: &demo{cfg: &so, pool: pool, accounts: pool, plan: plan, stderr: stderr, tty: tty}}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	for _, s := range shards {
		if err := s.d.checkSchema(ctx); err != nil {
			return nil, err
		}
	}
	// The accounts, each in its shard's database.
	for range cfg.Accounts {
		id := uuid.New()
		for _, s := range shards {
			if m.OwnerOf(id) == s.name {
				s.accounts = append(s.accounts, id)
			}
		}
	}
	refs := make([]riverslot.Shard, n)
	for i, s := range shards {
		if err := s.prepare(ctx); err != nil {
			return nil, fmt.Errorf("shard %s: %w", s.name, err)
		}
		refs[i] = riverslot.Shard{Name: s.name, Pool: s.d.pool, Schema: s.d.cfg.Schema}
	}
	if err := riverslot.SetShardMap(ctx, refs, cfg.Task, m, time.Time{}); err != nil {
		return nil, err
	}
	stored, _, err := riverslot.ShardMapOf(ctx, refs[0], cfg.Task)
	if err != nil {
		return nil, err
	}
	m = stored.ShardMap
	logf := shards[0].d.logf
	logf("shard map %s over %d databases", m.String(), n)

	// The task, one scheduler and River client per shard.
	var (
		first time.Time
		info  riverslot.TaskInfo
	)
	for i, s := range shards {
		// The clients start ahead of the first cycle: the current one,
		// which started before them, is left alone (FirstCycleNext), and
		// the periodic trigger makes the first. Punctual: short slots start
		// on time on each shard, not at its leader's 5 s scheduler tick.
		task := riverslot.Task{Name: cfg.Task, Cycle: cfg.Cycle, Schema: s.d.cfg.Schema, Table: "accounts", Filter: "active",
			FirstCycle: riverslot.FirstCycleNext, Punctual: true}
		synced := s.d.synced()
		pool := s.d.pool
		task.Sync = func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
			// Not cut by the sync's timeout (as the demo's own Sync).
			rctx, cancel := measure.RecordContext(ctx)
			defer cancel()
			_, err := pool.Exec(rctx, "INSERT INTO "+synced+" (task, account_id, cycle_start, scheduled_at, job_id) VALUES ($1, $2, $3, $4, $5)", job.Args.Task, accountID, job.Args.CycleStart, job.ScheduledAt, job.ID)
			return err
		}
		if i == 0 {
			probe, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{task}})
			if err != nil {
				return nil, err
			}
			if info, err = probe.Task(cfg.Task); err != nil {
				return nil, err
			}
			// Every client has started and leads its shard before the
			// first cycle's trigger fires.
			first = time.Now().Add(info.TriggerLead + 10*time.Second).Truncate(time.Second).UTC()
			if !cfg.CycleStart.IsZero() {
				first = cfg.CycleStart.UTC()
			}
		}
		task.TriggerOffset = slotplan.GridOffset(first, cfg.Cycle)
		sched, err := riverslot.New(pool, &riverslot.Config{Shard: s.name, Tasks: []riverslot.Task{task},
			Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return nil, err
		}
		config := &river.Config{
			Logger:                      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})),
			Queues:                      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
			Schema:                      s.d.cfg.Schema,
			FetchPollInterval:           250 * time.Millisecond,
			CompletedJobRetentionPeriod: cfg.CompletedRetention,
		}
		if err := sched.Configure(config); err != nil {
			return nil, err
		}
		// Its warnings (River's row budget, a sync queue too small for
		// the cycle's rate) as the app's Check gives them.
		if err := exceptUpstreamBudget(sched.Check(ctx), logf); err != nil {
			return nil, fmt.Errorf("shard %s: %w", s.name, err)
		}
		client, err := river.NewClient(riverpgxv5.New(pool), config)
		if err != nil {
			return nil, err
		}
		s.sched, s.client = sched, client
	}
	starts := make([]time.Time, cfg.Cycles)
	for i := range starts {
		starts[i] = first.Add(time.Duration(i) * cfg.Cycle)
	}
	for _, s := range shards {
		if err := s.client.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
		defer func() {
			if _, err := shutdown.StopThenFlush(s.client.Stop, s.sched.FlushOutcomes); err != nil {
				logf("warning: shard %s: %v", s.name, err)
			}
		}()
	}
	logf("%d cycle(s) from %s: %d slots of %s over %d accounts on %d shards", len(starts), first.Format(time.RFC3339), plan.Slots, plan.SlotDuration, cfg.Accounts, n)

	// Each cycle: done once every shard has fanned out its slots and run
	// its syncs. Once the last cycle has started, the triggers go: no
	// later cycle is made.
	cleared := false
	for i, start := range starts {
		for {
			if !cleared && time.Now().After(starts[len(starts)-1]) {
				for _, s := range shards {
					s.client.PeriodicJobs().Clear()
				}
				cleared = true
			}
			if time.Now().After(start.Add(cfg.Cycle)) {
				var behind []string
				for _, s := range shards {
					ok, err := s.cycleDone(ctx, start)
					if err != nil {
						return nil, err
					}
					if !ok {
						behind = append(behind, s.name)
					}
				}
				if len(behind) == 0 {
					break
				}
				if deadline := start.Add(cfg.Cycle + max(time.Minute, 2*cfg.Cycle)); time.Now().After(deadline) {
					return nil, fmt.Errorf("cycle %s is not done on shard(s) %v by %s (its slots not all fanned out, or sync jobs left): see riverslot shards show",
						start.Format(time.RFC3339), behind, deadline.Format(time.RFC3339))
				}
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		logf("cycle %d/%d (%s) done on every shard", i+1, len(starts), start.Format(time.RFC3339))
	}

	// The report, from each shard's own record.
	sum := ShardsSummary{Task: cfg.Task, Cycle: cfg.Cycle.String(), Cycles: cfg.Cycles, Map: m.String()}
	all := ShardReport{Shard: "all", Slots: plan.Slots}
	var fanOutSum float64
	for _, s := range shards {
		r, err := s.report(ctx, starts, m.SlotsOf(plan, 0, s.name))
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", s.name, err)
		}
		sum.Shards = append(sum.Shards, r)
		all.Accounts += r.Accounts
		all.SyncedOnce += r.SyncedOnce
		all.Missed += r.Missed
		all.Duplicated += r.Duplicated
		all.Skipped += r.Skipped
		all.RiverJobRows += r.RiverJobRows
		all.SyncsPerSecond += r.SyncsPerSecond
		all.LatenessP50Seconds = max(all.LatenessP50Seconds, r.LatenessP50Seconds)
		all.LatenessP99Seconds = max(all.LatenessP99Seconds, r.LatenessP99Seconds)
		fanOutSum += r.FanOutMeanSeconds * float64(r.Slots)
	}
	all.FanOutMeanSeconds = fanOutSum / float64(plan.Slots)
	sum.All = all
	return &sum, nil
}

// WriteText prints the summary as a table, a row a shard and one for all.
func (sum *ShardsSummary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "task %s, %d cycle(s) of %s, shard map %s\n", sum.Task, sum.Cycles, sum.Cycle, sum.Map)
	fmt.Fprintln(tw, "SHARD\tBUCKETS\tSLOTS\tACCOUNTS\tSYNCED ONCE\tMISSED\tDUPLICATED\tRIVER_JOB ROWS\tFAN-OUT MEAN\tSYNCS/S\tLATENESS P50\tP99")
	fmt.Fprintln(tw, "\t\t\t\t(account-cycles)\t\t\t\t\t\t\t")
	for _, r := range append(sum.Shards, sum.All) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.3fs\t%.1f\t%.3fs\t%.3fs\n", r.Shard, r.Ranges, r.Slots, r.Accounts, r.SyncedOnce, r.Missed, r.Duplicated,
			r.RiverJobRows, r.FanOutMeanSeconds, r.SyncsPerSecond, r.LatenessP50Seconds, r.LatenessP99Seconds)
	}
	return tw.Flush()
}

// prepare creates the shard's schema, River's tables and riverslot's, its
// accounts (those of its buckets) and their bucket index, and the table
// its syncs are recorded in.
func (s *demoShard) prepare(ctx context.Context) error {
	d := s.d
	if err := d.resetSchema(ctx, d.pool); err != nil {
		return err
	}
	if err := riverslot.Migrate(ctx, d.pool, d.cfg.Schema); err != nil {
		return err
	}
	for _, q := range []string{
		"CREATE TABLE " + d.table() + " (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)",
		"CREATE TABLE " + d.synced() + " " + measure.SyncedTableDDL,
	} {
		if _, err := d.pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	rows := make([][]any, len(s.accounts))
	for i, id := range s.accounts {
		rows[i] = []any{id}
	}
	if _, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.cfg.Schema, "accounts"}, []string{"id"}, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("error seeding accounts: %w", err)
	}
	if err := sqlbucket.CreateIndex(ctx, d.pool, d.cfg.Schema, "accounts", "id"); err != nil {
		return err
	}
	_, err := d.pool.Exec(ctx, "ANALYZE "+d.table())
	return err
}

// cycleDone reports whether the shard has fanned out every slot of the
// cycle it serves and has no sync job of it left to run.
func (s *demoShard) cycleDone(ctx context.Context, start time.Time) (bool, error) {
	d := s.d
	var unfinished int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+ledger.New(d.cfg.Schema).QualifiedTable()+" WHERE task = $1 AND cycle_start = $2 AND slot >= 0 AND finished_at IS NULL",
		d.cfg.Task, start).Scan(&unfinished); err != nil {
		return false, err
	}
	syncs, err := syncjob.CountUnfinished(ctx, d.pool, d.cfg.Schema, d.cfg.Task, start, 0)
	if err != nil {
		return false, err
	}
	var made bool
	if err := d.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+ledger.New(d.cfg.Schema).QualifiedTable()+" WHERE task = $1 AND cycle_start = $2 AND slot = -1)",
		d.cfg.Task, start).Scan(&made); err != nil {
		return false, err
	}
	return made && unfinished == 0 && syncs.Total() == 0, nil
}

// report measures the shard over the cycles from its synced table (each
// Sync call the app recorded) and its ledger.
func (s *demoShard) report(ctx context.Context, starts []time.Time, slots []int) (ShardReport, error) {
	d := s.d
	r := ShardReport{Shard: s.name, Schema: d.cfg.Schema, Ranges: s.ranges, Slots: len(slots)}
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.table()+" WHERE active").Scan(&r.Accounts); err != nil {
		return r, err
	}
	var calls int64
	for _, start := range starts {
		var once, missed, twice int64
		err := d.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n = 0), count(*) FILTER (WHERE n > 1)
FROM (SELECT a.id, count(s.account_id) n FROM `+d.table()+` a LEFT JOIN `+d.synced()+` s ON s.account_id = a.id AND s.cycle_start = $1
	WHERE a.active GROUP BY a.id) x`, start).Scan(&once, &missed, &twice)
		if err != nil {
			return r, err
		}
		r.SyncedOnce += once
		r.Missed += missed
		r.Duplicated += twice
	}
	// From riverslot's ledger, not River's job table (River may have
	// deleted the finished jobs): the fan-outs' too-late skips on the slot
	// rows, the sync outcomes stale and upstream-skipped on the cycle rows
	// (flushed first: the tally writes them in batches).
	if err := s.sched.FlushOutcomes(ctx); err != nil {
		return r, err
	}
	var lateSkipped, staleSkipped int64
	if err := d.pool.QueryRow(ctx, "SELECT coalesce(sum(skipped) FILTER (WHERE slot >= 0), 0)::bigint, coalesce(sum(coalesce(stale, 0) + coalesce(upstream_skipped, 0)) FILTER (WHERE slot = -1), 0)::bigint FROM "+
		ledger.New(d.cfg.Schema).QualifiedTable()+" WHERE task = $1 AND cycle_start = ANY($2)", d.cfg.Task, starts).Scan(&lateSkipped, &staleSkipped); err != nil {
		return r, err
	}
	r.Skipped = lateSkipped + staleSkipped
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+d.synced()).Scan(&calls); err != nil {
		return r, err
	}
	r.SyncsPerSecond = float64(calls) / (float64(len(starts)) * d.cfg.Cycle.Seconds())
	var p50, p99 *float64
	if err := d.pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l)
FROM (SELECT extract(epoch FROM synced_at - scheduled_at)::float8 l FROM `+d.synced()+` WHERE scheduled_at IS NOT NULL AND cycle_start = ANY($1)) x`, starts).Scan(&p50, &p99); err != nil {
		return r, err
	}
	if p50 != nil && p99 != nil {
		r.LatenessP50Seconds, r.LatenessP99Seconds = *p50, *p99
	}
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+riverjob.QualifiedTable(d.cfg.Schema)).Scan(&r.RiverJobRows); err != nil {
		return r, err
	}
	var mean *float64
	if err := d.pool.QueryRow(ctx, "SELECT avg(extract(epoch FROM finished_at - started_at))::float8 FROM "+ledger.New(d.cfg.Schema).QualifiedTable()+
		" WHERE task = $1 AND slot >= 0 AND finished_at IS NOT NULL AND started_at IS NOT NULL", d.cfg.Task).Scan(&mean); err != nil {
		return r, err
	}
	if mean != nil {
		r.FanOutMeanSeconds = *mean
	}
	return r, nil
}
