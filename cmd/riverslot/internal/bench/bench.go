// Package bench measures slot scheduling against its baselines on a real
// PostgreSQL: fan-out against raw River inserts, the indexed selection
// against the text predicate, River's scheduler and fetch on a deep queue,
// queue depth over a compressed cycle for three strategies, memory, and
// weighted placement against hash-only placement. The
// riverslot bench command runs it; every comparison prints a markdown table
// row with both figures and their ratio.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/sqlbucket"
)

// Config says which sizes to run.
type Config struct {
	Pool *pgxpool.Pool
	// Out receives the markdown table; Log receives progress.
	Out, Log io.Writer

	FanOutSizes      []int
	SelectionSizes   []int
	TextSlotsSampled int
	DeepQueue        int
	DepthAccounts    int
	DepthCycle       time.Duration
	DepthWork        time.Duration
	BatchSize        int
	// Reps is how many times each fan-out comparison runs; medians are
	// reported.
	Reps int
	// OutDir receives queue_depth.csv; ChartPath the SVG chart.
	OutDir    string
	ChartPath string
	// WeightsAccounts is the size of the weights benchmark; WeightsChartPath
	// receives its per-slot weight chart (SVG; empty: none).
	WeightsAccounts  int
	WeightsChartPath string
	// ScaleAccounts is the fleet the scale benchmark seeds; ScaleRunAccounts,
	// ScaleRunCycle and ScaleRunRetention shape its compressed run (accounts,
	// cycle, River's CompletedJobRetentionPeriod).
	ScaleAccounts     int
	ScaleRunAccounts  int
	ScaleRunCycle     time.Duration
	ScaleRunRetention time.Duration
	// SyncTierJobs and SyncTierWorkers size the sync-tier benchmark: jobs
	// per side and the queue's MaxWorkers.
	SyncTierJobs    int
	SyncTierWorkers int
	// ServeSchedules sizes the serve benchmark's API run (schedules of
	// 1h); ServeRunSchedules its compressed run (schedules of 16 s).
	ServeSchedules    int
	ServeRunSchedules int
	// Only, if non-empty, runs just these benchmarks (fanout, selection,
	// deepqueue, depth, weights, synctier, scale). The synctier and scale
	// benchmarks run only when named here.
	Only map[string]bool
}

// MaxConns is the size of the pool the benchmarks work on: Run opens one of
// this size (a copy of Config.Pool's configuration) when Pool allows more.
// Each River client of the queue-depth round holds one more connection, for
// LISTEN, outside the pool, so a whole bench stays within 20 connections of
// a PostgreSQL that other work shares.
const MaxConns = 16

// Runner runs the benchmarks.
type Runner struct {
	cfg  Config
	rows []string
	seq  int
	// scaleRows are the scale benchmark's, printed as a table of their own.
	scaleRows []ScaleStep
}

// New returns a Runner.
func New(cfg Config) *Runner { return &Runner{cfg: cfg} }

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "bench: "+format+"\n", args...)
}

// row prints and keeps one markdown table row.
func (r *Runner) row(cells ...string) {
	line := "| " + strings.Join(cells, " | ") + " |"
	r.rows = append(r.rows, line)
	fmt.Fprintln(r.cfg.Log, line)
}

const tableHeader = "| benchmark | size | riverslot | baseline | ratio |\n|---|---|---|---|---|"

// Run runs the selected benchmarks and prints the table.
func (r *Runner) Run(ctx context.Context) error {
	if config := r.cfg.Pool.Config(); config.MaxConns > MaxConns {
		config.MaxConns = MaxConns
		pool, err := pgxpool.NewWithConfig(ctx, config)
		if err != nil {
			return fmt.Errorf("error opening a pool of %d connections: %w", MaxConns, err)
		}
		defer pool.Close()
		r.cfg.Pool = pool
	}
	if len(r.cfg.Only) != 1 || !r.cfg.Only["scale"] {
		fmt.Fprintln(r.cfg.Log, tableHeader)
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"fanout", r.fanOut},
		{"selection", r.selection},
		{"deepqueue", r.deepQueue},
		{"depth", r.queueDepth},
		{"weights", r.weights},
		{"synctier", r.syncTier},
		{"scale", r.scale},
		{"serve", r.serveBench},
	}
	for _, s := range steps {
		if len(r.cfg.Only) > 0 && !r.cfg.Only[s.name] || len(r.cfg.Only) == 0 && (s.name == "scale" || s.name == "synctier" || s.name == "serve") {
			continue
		}
		begun := time.Now()
		if err := s.run(ctx); err != nil {
			if len(r.scaleRows) > 0 {
				fmt.Fprint(r.cfg.Log, ScaleTable(r.scaleRows))
			}
			return fmt.Errorf("%s: %w", s.name, err)
		}
		r.logf("%s done in %s", s.name, time.Since(begun).Round(time.Second))
	}
	if len(r.rows) > 0 {
		fmt.Fprintln(r.cfg.Out, tableHeader)
		for _, row := range r.rows {
			fmt.Fprintln(r.cfg.Out, row)
		}
	}
	if len(r.scaleRows) > 0 {
		if len(r.rows) > 0 {
			fmt.Fprintln(r.cfg.Out)
		}
		fmt.Fprint(r.cfg.Out, ScaleTable(r.scaleRows))
	}
	return nil
}

// ScaleRows returns the scale benchmark's rows after Run.
func (r *Runner) ScaleRows() []ScaleStep { return r.scaleRows }

// schema creates a fresh schema with River's tables; drop removes it. Names
// are never reused within a run: pooled connections cache prepared
// statements, and a statement against a dropped and recreated table of the
// same name fails with "cached plan must not change result type".
func (r *Runner) schema(ctx context.Context, name string) (string, func(), error) {
	r.seq++
	schema := fmt.Sprintf("riverslot_bench_%s_%d", name, r.seq)
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := r.cfg.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+id+" CASCADE"); err != nil {
		return "", nil, err
	}
	if _, err := r.cfg.Pool.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
		return "", nil, err
	}
	if err := riverslot.Migrate(ctx, r.cfg.Pool, schema); err != nil {
		return "", nil, err
	}
	drop := func() {
		_, _ = r.cfg.Pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+id+" CASCADE")
	}
	return schema, drop, nil
}

// bucketIndex is the name of the bucket index seedAccounts creates, the one
// sqlbucket.IndexDDL would create.
var bucketIndex = sqlbucket.IndexName("accounts", "id")

// seedAccounts creates schema.accounts with n random UUIDv4 accounts whose
// last byte is at most maxBucket (255: any), generated in the server, then
// its primary key and the bucket index.
func (r *Runner) seedAccounts(ctx context.Context, schema string, n, maxBucket int) error {
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	if _, err := r.cfg.Pool.Exec(ctx, "CREATE TABLE "+table+" (id uuid NOT NULL, active boolean NOT NULL DEFAULT true)"); err != nil {
		return err
	}
	const chunk = 1_000_000
	for done := 0; done < n; done += chunk {
		m := min(chunk, n-done)
		// Overwrite byte 15 to confine accounts to buckets 0..maxBucket.
		_, err := r.cfg.Pool.Exec(ctx, "INSERT INTO "+table+` (id)
			SELECT CASE WHEN $2 = 255 THEN u
			            ELSE encode(overlay(uuid_send(u) PLACING set_byte('\x00'::bytea, 0, `+sqlbucket.Expr("u")+` % ($2 + 1)) FROM 16 FOR 1), 'hex')::uuid END
			FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, $1)) g`, m, maxBucket)
		if err != nil {
			return fmt.Errorf("error seeding accounts: %w", err)
		}
		r.logf("seeded %d/%d accounts in %s", done+m, n, schema)
	}
	for _, stmt := range []string{
		"ALTER TABLE " + table + " ADD PRIMARY KEY (id)",
		"CREATE INDEX " + pgx.Identifier{bucketIndex}.Sanitize() + " ON " + table + " ((" + sqlbucket.Expr("id") + "), id)",
		"VACUUM ANALYZE " + table,
	} {
		if _, err := r.cfg.Pool.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

func perSec(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func human(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// vmHWM returns the process's peak resident set size (VmHWM) in bytes, and
// resetPeakRSS resets it (Linux: write 5 to /proc/self/clear_refs).
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:")), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
