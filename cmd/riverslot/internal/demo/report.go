package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/bench"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/measure"
)

// Summary is a run's figures, the --json output. Every figure is read
// from the database.
type Summary struct {
	Schema              string      `json:"schema"`
	AccountsTable       string      `json:"accounts_table"`
	IDColumn            string      `json:"id_column"`
	SyncKind            string      `json:"sync_kind"`
	Buckets             int64       `json:"buckets"`
	Slots               int64       `json:"slots"`
	SlotDurationSeconds float64     `json:"slot_duration_seconds"`
	CycleSeconds        float64     `json:"cycle_seconds"`
	CycleStarts         []string    `json:"cycle_starts"`
	Cycles              int         `json:"cycles"`
	Accounts            int64       `json:"accounts"`
	AccountsPerSlot     int64       `json:"accounts_per_slot"`
	Synced              int64       `json:"synced"`
	Missed              int64       `json:"missed"`
	MissedSkipped       int64       `json:"missed_skipped"`
	Duplicates          int64       `json:"duplicates"`
	SkippedSyncs        int64       `json:"skipped_syncs"`
	PeakQueueDepth      int64       `json:"peak_queue_depth"`
	LatenessP50Seconds  float64     `json:"lateness_p50_seconds"`
	LatenessP99Seconds  float64     `json:"lateness_p99_seconds"`
	PerCycle            []*CycleRow `json:"per_cycle"`
	// Upstreams are --upstreams' banks: what each server received and
	// what the limiter did (omitted without --upstreams).
	Upstreams []Upstream `json:"upstreams,omitempty"`
	// MaxRiverJobRows is the most rows river_job held at once, sampled at
	// each progress read (every 0.5 s); CompletedRetentionSeconds is River's
	// CompletedJobRetentionPeriod (--completed-retention; 0: River's 24 h).
	// Synced, missed and duplicated count the demo's own record of its
	// Sync calls (the synced table): what Sync did, which holds after
	// River deletes completed jobs; a job that did not call Sync syncs
	// nobody.
	MaxRiverJobRows           int64   `json:"max_river_job_rows"`
	CompletedRetentionSeconds float64 `json:"completed_retention_seconds"`

	// FanOutAccountsPerSecond is the live fan-out's rate: the sync jobs the
	// first task's per-slot jobs inserted in the run's cycles over the time
	// their fan-outs took (each slot's ledger row, started to finished),
	// over FanOutSlots slots. With --fanout-baseline, FanOutRawPerSecond is
	// River's own InsertManyFastTx of as many jobs as a mean slot's, with
	// the four fields a sync carries, into the same river_job right after
	// the run (median of three), and FanOutVsRaw the ratio of the two.
	FanOutAccountsPerSecond float64  `json:"fanout_accounts_per_second"`
	FanOutSlots             int64    `json:"fanout_slots"`
	FanOutRawPerSecond      *float64 `json:"fanout_raw_insert_per_second,omitempty"`
	FanOutVsRaw             *float64 `json:"fanout_vs_raw_insert,omitempty"`

	// Tasks names every task of the run; the figures above are the first
	// task's, PerTask has each one's.
	Tasks   []string   `json:"tasks"`
	PerTask []*TaskRow `json:"per_task"`
	// With --reciprocal: the closest an account's two tasks' syncs came on
	// the cycle circle, and the least the library promises (half a cycle
	// minus one slot).
	ReciprocalMinDistanceSeconds *float64 `json:"reciprocal_min_distance_seconds,omitempty"`
	ReciprocalMinPromisedSeconds *float64 `json:"reciprocal_min_promised_seconds,omitempty"`
	// ReciprocalLateSyncs counts late catch-up syncs (scheduled after their
	// slot), which the distance leaves out: the promise does not cover them.
	ReciprocalLateSyncs *int64 `json:"reciprocal_late_syncs_excluded,omitempty"`

	// With --weights: the distribution, and for the first task's last
	// cycle the heaviest slot's total weight over the mean slot weight as
	// enqueued (balanced) and as hash placement alone puts it, the heaviest
	// single account over the mean slot weight, and how many accounts were
	// pinned.
	Weights                     string   `json:"weights,omitempty"`
	SlotWeightMaxOverMean       *float64 `json:"slot_weight_max_over_mean,omitempty"`
	HashSlotWeightMaxOverMean   *float64 `json:"hash_slot_weight_max_over_mean,omitempty"`
	HeaviestAccountOverMeanSlot *float64 `json:"heaviest_account_over_mean_slot,omitempty"`
	Pinned                      *int64   `json:"pinned,omitempty"`
}

// TaskRow is one task's figures over the run's cycles.
type TaskRow struct {
	Task   string `json:"task"`
	Synced int64  `json:"synced"`
	// Synced, Missed and Duplicates count account-cycles by the demo's
	// record of its Sync calls; MissedSkipped of the Missed had their sync
	// job skipped with a reason (stale, an upstream throttled or down) or
	// were skipped by their fan-out (too late, e.g. in a cycle resumed
	// with --keep: counted in the ledger).
	Missed             int64   `json:"missed"`
	MissedSkipped      int64   `json:"missed_skipped"`
	Duplicates         int64   `json:"duplicates"`
	SkippedSyncs       int64   `json:"skipped_syncs"`
	PeakQueueDepth     int64   `json:"peak_queue_depth"`
	LatenessP50Seconds float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
}

// CycleRow is one cycle's figures (the first task's).
type CycleRow struct {
	CycleStart  string `json:"cycle_start"`
	Accounts    int64  `json:"accounts"`
	Synced      int64  `json:"synced"`
	Missed      int64  `json:"missed"`
	Duplicates  int64  `json:"duplicates"`
	PeakPending int64  `json:"peak_queue_depth"`
}

func (d *demo) summarize(ctx context.Context, starts []time.Time) (*Summary, error) {
	jobs := riverjob.QualifiedTable(d.cfg.Schema)

	// The run's cycle starts, as riverslot's ledger records their
	// bootstraps (River may have deleted the jobs), and sync kind.
	rows, err := d.pool.Query(ctx, "SELECT DISTINCT cycle_start FROM "+pgx.Identifier{d.cfg.Schema, ledger.Table}.Sanitize()+
		" WHERE slot = $1 AND task = $2 AND cycle_start = ANY($3) ORDER BY 1", ledger.BootstrapSlot, d.cfg.Task, starts)
	if err != nil {
		return nil, err
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, err
	}
	if len(recorded) != len(starts) {
		return nil, fmt.Errorf("found %d bootstrapped cycles in the ledger for %d cycles", len(recorded), len(starts))
	}
	for i := range recorded {
		recorded[i] = recorded[i].UTC()
	}
	var syncKind string
	if err := d.pool.QueryRow(ctx, "SELECT coalesce(min(kind), $4) FROM "+jobs+" WHERE args->>'task' = $1 AND kind NOT IN ($2, $3, $5)",
		d.cfg.Task, bootstrap.Kind, perslot.Kind, syncjob.Kind, bootstrap.CensusKind).Scan(&syncKind); err != nil {
		return nil, err
	}

	run, err := measure.MeasureRun(ctx, d.pool, measure.Target{
		RiverSchema: d.cfg.Schema, AccountsTable: d.measuredTable(), IDColumn: "id", Filter: "active",
		SyncKind: syncKind, Task: d.cfg.Task, SyncedTable: d.synced(),
	}, perslot.Kind, recorded)
	if err != nil {
		return nil, err
	}
	if run.Slots == 0 {
		// River deleted the first cycle's per-slot jobs: the plan says.
		run.Slots, run.SlotDuration = int64(d.plan.Slots), d.plan.SlotDuration
	}

	s := &Summary{
		Schema:              d.cfg.Schema,
		AccountsTable:       d.cfg.Schema + ".accounts",
		IDColumn:            "id",
		SyncKind:            syncKind,
		Buckets:             run.Buckets,
		Slots:               run.Slots,
		SlotDurationSeconds: run.SlotDuration.Seconds(),
		CycleSeconds:        (time.Duration(run.Slots) * run.SlotDuration).Seconds(),
		Cycles:              len(recorded),
		PeakQueueDepth:      run.PeakPending,
		LatenessP50Seconds:  run.LatenessP50.Seconds(),
		LatenessP99Seconds:  run.LatenessP99.Seconds(),
		MaxRiverJobRows:     d.maxRiverJobRows,

		CompletedRetentionSeconds: d.cfg.CompletedRetention.Seconds(),
	}
	if err := d.measureFanOut(ctx, s, recorded); err != nil {
		return nil, err
	}
	for _, c := range run.Cycles {
		s.CycleStarts = append(s.CycleStarts, c.CycleStart.Format(time.RFC3339))
		s.Accounts = c.Accounts
		s.Synced += c.SyncedOnce
		s.Missed += c.Missed
		s.MissedSkipped += c.MissedSkipped
		s.Duplicates += c.Duplicated
		s.SkippedSyncs += c.Skipped
		s.PerCycle = append(s.PerCycle, &CycleRow{
			CycleStart: c.CycleStart.Format(time.RFC3339), Accounts: c.Accounts,
			Synced: c.SyncedOnce, Missed: c.Missed, Duplicates: c.Duplicated, PeakPending: c.PeakPending,
		})
	}
	if s.Slots > 0 {
		s.AccountsPerSlot = s.Accounts / s.Slots
	}
	for _, name := range d.cfg.tasks() {
		r := run
		if name != d.cfg.Task {
			if r, err = measure.MeasureRun(ctx, d.pool, measure.Target{
				RiverSchema: d.cfg.Schema, AccountsTable: d.measuredTable(), IDColumn: "id", Filter: "active",
				SyncKind: syncKind, Task: name, SyncedTable: d.synced(),
			}, perslot.Kind, recorded); err != nil {
				return nil, err
			}
		}
		row := &TaskRow{Task: name, PeakQueueDepth: r.PeakPending,
			LatenessP50Seconds: r.LatenessP50.Seconds(), LatenessP99Seconds: r.LatenessP99.Seconds()}
		for _, c := range r.Cycles {
			row.Synced += c.SyncedOnce
			row.Missed += c.Missed
			row.MissedSkipped += c.MissedSkipped
			row.Duplicates += c.Duplicated
			row.SkippedSyncs += c.Skipped
		}
		s.Tasks = append(s.Tasks, name)
		s.PerTask = append(s.PerTask, row)
	}
	if d.cfg.Reciprocal {
		// The promise covers syncs at their regular times, inside their
		// slot. A late catch-up (a fan-out that ran more than LateGrace
		// late, say on a loaded machine) is spread after its slot and left
		// out, and counted.
		var closest float64
		var late int64
		if err := d.pool.QueryRow(ctx, `WITH s AS (
				SELECT args->>'task' AS task, args->>'account_id' AS account, args->>'cycle_start' AS cycle, scheduled_at,
					scheduled_at >= (args->>'cycle_start')::timestamptz + ((args->>'slot')::int + 1) * make_interval(secs => $6) AS late
				FROM `+jobs+` WHERE kind = $5 AND args->>'task' IN ($1, $2) AND (args->>'cycle_start')::timestamptz = ANY($3))
			SELECT
				(SELECT coalesce(min(least(m, $4 - m)), -1)::float8 FROM (
					SELECT mod(mod(extract(epoch FROM b.scheduled_at - a.scheduled_at), $4) + $4, $4) AS m
					FROM s a JOIN s b ON b.account = a.account AND b.cycle = a.cycle
					WHERE a.task = $1 AND b.task = $2 AND NOT a.late AND NOT b.late) d),
				(SELECT count(*) FROM s WHERE late)`,
			d.cfg.Task, d.cfg.tasks()[1], recorded, s.CycleSeconds, syncKind, s.SlotDurationSeconds).Scan(&closest, &late); err != nil {
			return nil, fmt.Errorf("error measuring the distance between the two tasks: %w", err)
		}
		promised := s.CycleSeconds/2 - s.SlotDurationSeconds
		s.ReciprocalMinDistanceSeconds, s.ReciprocalMinPromisedSeconds, s.ReciprocalLateSyncs = &closest, &promised, &late
	}
	if d.cfg.Weights != "" {
		if err := d.measureWeights(ctx, s, recorded[len(recorded)-1], syncKind); err != nil {
			return nil, fmt.Errorf("error measuring per-slot weights: %w", err)
		}
	}
	return s, nil
}

// measureWeights fills the summary's weight figures for the first task's
// cycle starting at start, from the sync jobs enqueued and the accounts.
func (d *demo) measureWeights(ctx context.Context, s *Summary, start time.Time, syncKind string) error {
	jobs := riverjob.QualifiedTable(d.cfg.Schema)
	var balanced, hash, heaviest float64
	var pinned int64
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(max(w) / nullif(sum(w) / $4, 0), 0) FROM (
			SELECT (j.args->>'slot')::int, sum(a.weight) AS w FROM `+jobs+` j JOIN `+d.measuredTable()+` a ON a.id = (j.args->>'account_id')::uuid
			WHERE j.kind = $1 AND j.args->>'task' = $2 AND (j.args->>'cycle_start')::timestamptz = $3 GROUP BY 1) x`,
		syncKind, d.cfg.Task, start, s.Slots).Scan(&balanced); err != nil {
		return err
	}
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(max(w) / nullif(sum(w) / $1, 0), 0), coalesce(max(h) / nullif(sum(w) / $1, 0), 0) FROM (
			SELECT get_byte(uuid_send(id), 15) / (256 / $1) AS slot, sum(weight) AS w, max(weight) AS h FROM `+d.measuredTable()+` WHERE active GROUP BY 1) x`,
		s.Slots).Scan(&hash, &heaviest); err != nil {
		return err
	}
	if err := d.accounts.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{d.cfg.Schema, "riverslot_pins"}.Sanitize()+" WHERE task = $1 AND cycle_start = $2",
		d.cfg.Task, start).Scan(&pinned); err != nil {
		return err
	}
	s.Weights = d.cfg.Weights
	s.SlotWeightMaxOverMean, s.HashSlotWeightMaxOverMean, s.HeaviestAccountOverMeanSlot, s.Pinned = &balanced, &hash, &heaviest, &pinned
	return nil
}

// report measures the run. It returns the summary, and an error when an
// account was missed or duplicated or two reciprocal tasks came too close;
// no summary when the measuring failed.
func (d *demo) report(ctx context.Context, starts []time.Time) (*Summary, error) {
	d.defaultAccounts()
	if d.accounts != d.pool {
		drop, err := d.snapshotAccounts(ctx)
		if err != nil {
			return nil, err
		}
		defer drop()
	}
	s, err := d.summarize(ctx, starts)
	if err != nil {
		return nil, fmt.Errorf("error measuring the run: %w", err)
	}
	if d.banks != nil {
		accounts := map[string]int64{}
		rows, err := d.accounts.Query(ctx, "SELECT bank, count(*) FROM "+d.table()+" WHERE active GROUP BY bank")
		if err != nil {
			return nil, fmt.Errorf("error counting the accounts per upstream: %w", err)
		}
		var (
			key string
			n   int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { accounts[key] = n; return nil }); err != nil {
			return nil, fmt.Errorf("error counting the accounts per upstream: %w", err)
		}
		skipped, err := d.skippedPerBank(ctx)
		if err != nil {
			return nil, fmt.Errorf("error counting the skipped syncs per upstream: %w", err)
		}
		if s.Upstreams, err = d.banks.report(ctx, d.scheduler, d.cfg.Task, d.cfg.Upstreams, d.cfg.Cycle, accounts, skipped); err != nil {
			return nil, fmt.Errorf("error reading the upstreams: %w", err)
		}
	}
	for _, t := range s.PerTask {
		if t.Missed > t.MissedSkipped || t.Duplicates > 0 {
			return s, fmt.Errorf("task %s: %d account-cycles missed with no skip reason recorded and %d synced twice", t.Task, t.Missed-t.MissedSkipped, t.Duplicates)
		}
	}
	if s.ReciprocalMinDistanceSeconds != nil && *s.ReciprocalMinDistanceSeconds < *s.ReciprocalMinPromisedSeconds {
		return s, fmt.Errorf("an account's two tasks came %.3fs apart, less than half a cycle minus one slot (%.0fs)",
			*s.ReciprocalMinDistanceSeconds, *s.ReciprocalMinPromisedSeconds)
	}
	return s, nil
}

// measureFanOut fills s's fan-out figures from the ledger's slot rows of the
// run's cycles and, with --fanout-baseline, times River's raw insert of a
// mean slot's jobs into the same river_job.
func (d *demo) measureFanOut(ctx context.Context, s *Summary, starts []time.Time) error {
	var inserted, seconds float64
	if err := d.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(inserted), 0)::float8, coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)::float8 FROM "+
		pgx.Identifier{d.cfg.Schema, ledger.Table}.Sanitize()+
		" WHERE task = $1 AND cycle_start = ANY($2) AND slot >= 0 AND inserted > 0 AND started_at IS NOT NULL AND finished_at > started_at",
		d.cfg.Task, starts).Scan(&s.FanOutSlots, &inserted, &seconds); err != nil {
		return fmt.Errorf("error reading the fan-outs' times in the ledger: %w", err)
	}
	if seconds > 0 {
		s.FanOutAccountsPerSecond = inserted / seconds
	}
	if !d.cfg.FanOutBaseline || s.FanOutSlots == 0 {
		return nil
	}
	n := int(inserted / float64(s.FanOutSlots))
	var runs []time.Duration
	for range 3 {
		took, err := bench.RawInsert(ctx, d.pool, d.cfg.Schema, n, riverslot.BatchSizeDefault)
		if err != nil {
			return err
		}
		runs = append(runs, took)
	}
	slices.Sort(runs)
	raw := float64(n) / runs[1].Seconds()
	ratio := s.FanOutAccountsPerSecond / raw
	s.FanOutRawPerSecond, s.FanOutVsRaw = &raw, &ratio
	return nil
}

// WriteText prints the summary as tables.
func (s *Summary) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "\nriverslot demo: %d cycle(s) of %gs over %d accounts (schema %s)\n\n", s.Cycles, s.CycleSeconds, s.Accounts, s.Schema)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "accounts\t%d\n", s.Accounts)
	fmt.Fprintf(tw, "slots\t%d (buckets %d, %d buckets per slot)\n", s.Slots, s.Buckets, 256/max(s.Slots, 1))
	fmt.Fprintf(tw, "slot duration\t%gs\n", s.SlotDurationSeconds)
	fmt.Fprintf(tw, "sync start lateness\tp50 %.2fs   p99 %.2fs   (River promotes scheduled jobs every 5s)\n", s.LatenessP50Seconds, s.LatenessP99Seconds)
	fmt.Fprintf(tw, "peak pending sync jobs\t%d\n", s.PeakQueueDepth)
	fmt.Fprintf(tw, "  accounts/slots\t%d\n", s.AccountsPerSlot)
	fmt.Fprintf(tw, "  accounts (enqueue all at once)\t%d\n", s.Accounts)
	fmt.Fprintf(tw, "most rows in river_job\t%d (sampled every 0.5s)\n", s.MaxRiverJobRows)
	if s.FanOutSlots > 0 {
		fmt.Fprintf(tw, "fan-out\t%.0f accounts/s over %d slots (the ledger: each slot's start to finish)", s.FanOutAccountsPerSecond, s.FanOutSlots)
		if s.FanOutVsRaw != nil {
			fmt.Fprintf(tw, "; River's raw insert of a slot's jobs after the run %.0f/s: %.2f of it", *s.FanOutRawPerSecond, *s.FanOutVsRaw)
		}
		fmt.Fprintln(tw)
	}
	if len(s.PerTask) > 1 {
		for _, t := range s.PerTask {
			fmt.Fprintf(tw, "task %s\tsynced %d  missed %d  duplicated %d  peak pending %d  lateness p99 %.2fs\n",
				t.Task, t.Synced, t.Missed, t.Duplicates, t.PeakQueueDepth, t.LatenessP99Seconds)
		}
	}
	if s.ReciprocalMinDistanceSeconds != nil {
		fmt.Fprintf(tw, "closest two tasks on an account\t%.3fs on the cycle circle (at least half a cycle minus a slot: %.0fs; %d late catch-up syncs left out)\n",
			*s.ReciprocalMinDistanceSeconds, *s.ReciprocalMinPromisedSeconds, *s.ReciprocalLateSyncs)
	}
	if s.SlotWeightMaxOverMean != nil {
		fmt.Fprintf(tw, "per-slot weight max/mean	%.3f balanced (%d accounts pinned), %.3f hash-only; heaviest account %.3f of a mean slot (weights %s)\n",
			*s.SlotWeightMaxOverMean, *s.Pinned, *s.HashSlotWeightMaxOverMean, *s.HeaviestAccountOverMeanSlot, s.Weights)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cycle\tstart\taccounts\tsynced once\tmissed\tduplicated\tpeak pending\t")
	for i, c := range s.PerCycle {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n", i+1, c.CycleStart, c.Accounts, c.Synced, c.Missed, c.Duplicates, c.PeakPending)
	}
	_ = tw.Flush()
	return writeUpstreams(w, s.Upstreams)
}

// MeasuredTableName is the copy of the accounts that the report measures
// against in River's database when the accounts live in another
// (--accounts-database-url): its queries join them with River's jobs.
const MeasuredTableName = "accounts_measured"

// measuredTable is the accounts table the report's queries join with
// River's jobs.
func (d *demo) measuredTable() string {
	d.defaultAccounts()
	if d.accounts != d.pool {
		return pgx.Identifier{d.cfg.Schema, MeasuredTableName}.Sanitize()
	}
	return d.table()
}

// snapshotAccounts copies the accounts (id, active, and weight when
// weighted) into measuredTable, streaming, for the report's measurement,
// and returns the function that drops it: the run itself had nothing of
// the accounts in River's database.
func (d *demo) snapshotAccounts(ctx context.Context) (drop func(), err error) {
	table := d.measuredTable()
	columns := []string{"id", "active"}
	ddl := "CREATE UNLOGGED TABLE " + table + " (id uuid PRIMARY KEY, active boolean NOT NULL"
	if d.cfg.Weights != "" {
		columns = append(columns, "weight")
		ddl += ", weight double precision NOT NULL"
	}
	if _, err := d.pool.Exec(ctx, ddl+")"); err != nil {
		return nil, fmt.Errorf("error creating %s to measure the run: %w", table, err)
	}
	drop = func() {
		if _, err := d.pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table); err != nil {
			d.logf("error dropping %s: %v", table, err)
		}
	}
	rows, err := d.accounts.Query(ctx, "SELECT "+strings.Join(columns, ", ")+" FROM "+d.table())
	if err != nil {
		drop()
		return nil, fmt.Errorf("error reading the accounts to measure the run: %w", err)
	}
	defer rows.Close()
	if _, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.cfg.Schema, MeasuredTableName}, columns, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		return rows.Values()
	})); err != nil {
		drop()
		return nil, fmt.Errorf("error copying the accounts to measure the run: %w", err)
	}
	if _, err := d.pool.Exec(ctx, "ANALYZE "+table); err != nil {
		drop()
		return nil, err
	}
	return drop, nil
}

// skippedPerBank counts the task's sync jobs that completed without
// calling Sync, for any reason (stale at its start, or the limiter's
// deferral or throttle), per account's bank: the limiter counts only its
// own, and a sync stale before it reached the limiter was in no upstream's
// figure (an account neither synced nor reported).
func (d *demo) skippedPerBank(ctx context.Context) (map[string]int64, error) {
	rows, err := d.pool.Query(ctx, "SELECT (args->>'account_id')::uuid FROM "+riverjob.QualifiedTable(d.cfg.Schema)+
		" WHERE kind = $1 AND args->>'task' = $2 AND metadata->'output' ? $3", syncjob.Kind, d.cfg.Task, syncjob.OutputSkipped)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, err
	}
	bounds := sim.BankBounds(d.cfg.Upstreams.Count)
	out := map[string]int64{}
	for _, id := range ids {
		for k, hi := range bounds {
			if int(id[0]) < hi {
				out[sim.BankKey(k)]++
				break
			}
		}
	}
	return out, nil
}
