package sim

import (
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite"
)

// Files are the names WriteOutputs writes into its directory.
var Files = []string{
	"metrics.csv", "lateness.csv", "simulate.sqlite",
	"queue_depth.svg", "queue_depth.png", "starts.svg", "starts.png", "lateness.svg", "lateness.png",
}

// metricColumns are metrics.csv's and the metrics table's columns.
var metricColumns = []string{
	"strategy", "t_seconds", "scheduled", "available", "running", "retryable", "pending",
	"starts", "completions", "starts_per_second", "lateness_p50_seconds", "lateness_p99_seconds",
	"busy_workers", "sync_gap_mean_seconds", "sync_gap_max_seconds", "failed_attempts",
}

func f64(v float64) string { return strconv.FormatFloat(v, 'g', 10, 64) }
func i64(v int64) string   { return strconv.FormatInt(v, 10) }

func (r Row) record(s Strategy) []string {
	return []string{
		string(s), f64(r.T), i64(r.Scheduled), i64(r.Available), i64(r.Running), i64(r.Retryable), i64(r.Pending),
		i64(r.Starts), i64(r.Completions), f64(r.StartsPerSecond), f64(r.LatenessP50), f64(r.LatenessP99),
		f64(r.BusyWorkers), f64(r.GapMean), f64(r.GapMax), i64(r.Failed),
	}
}

// WriteOutputs writes the per-interval metrics and the lateness
// distribution of every result as CSV and into one SQLite file, and draws
// the charts, into dir (created if missing). The same results give
// byte-identical files.
func WriteOutputs(ctx context.Context, dir string, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	var metricRows, lateRows [][]string
	for _, r := range results {
		for _, row := range r.Rows {
			metricRows = append(metricRows, row.record(r.Strategy))
		}
		for _, h := range r.Lateness {
			lateRows = append(lateRows, []string{string(r.Strategy), f64(h.UpTo), strconv.FormatUint(h.Count, 10)})
		}
	}
	lateColumns := []string{"strategy", "lateness_seconds", "starts"}
	if err := writeCSV(filepath.Join(dir, "metrics.csv"), metricColumns, metricRows); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, "lateness.csv"), lateColumns, lateRows); err != nil {
		return err
	}
	if err := writeSQLite(ctx, filepath.Join(dir, "simulate.sqlite"), results, metricRows, lateRows, lateColumns); err != nil {
		return err
	}
	return writeCharts(dir, results)
}

func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows) // flushes
	return errors.Join(w.Error(), f.Close())
}

// resultColumns are the results table's columns, in Result's JSON names.
var resultColumns = []string{
	"strategy", "accounts", "cycle_seconds", "slots", "workers", "simulated_seconds", "jobs_completed",
	"jobs_failed", "jobs_discarded", "accounts_skipped", "peak_queue_depth", "mean_queue_depth",
	"lateness_p50_seconds", "lateness_p99_seconds", "lateness_max_seconds", "max_starts_per_second",
	"mean_starts_per_second", "worker_utilization", "sync_gap_p50_seconds", "sync_gap_p99_seconds", "sync_gap_max_seconds",
}

func (r *Result) record() []any {
	return []any{
		string(r.Strategy), r.Accounts, r.CycleSeconds, r.Slots, r.Workers, r.SimulatedSeconds, r.JobsCompleted,
		r.JobsFailed, r.JobsDiscarded, r.AccountsSkipped, r.PeakQueueDepth, r.MeanQueueDepth,
		r.LatenessP50Seconds, r.LatenessP99Seconds, r.LatenessMaxSeconds, r.MaxStartsPerSecond,
		r.MeanStartsPerSecond, r.WorkerUtilization, r.GapP50Seconds, r.GapP99Seconds, r.GapMaxSeconds,
	}
}

// writeSQLite writes tables results, metrics and lateness. Wall time is
// left out so the file is the same for the same flags.
func writeSQLite(ctx context.Context, path string, results []*Result, metricRows, lateRows [][]string, lateColumns []string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	resultRows := make([][]any, len(results))
	for i, r := range results {
		resultRows[i] = r.record()
	}
	toAny := func(rows [][]string) [][]any {
		out := make([][]any, len(rows))
		for i, row := range rows {
			out[i] = make([]any, len(row))
			for j, v := range row {
				out[i][j] = v
			}
		}
		return out
	}
	for _, t := range []struct {
		name    string
		columns []string
		rows    [][]any
	}{
		{"results", resultColumns, resultRows},
		{"metrics", metricColumns, toAny(metricRows)},
		{"lateness", lateColumns, toAny(lateRows)},
	} {
		// Every column but strategy is numeric: NUMERIC affinity stores the
		// CSV text as integers or reals.
		ddl := "CREATE TABLE " + t.name + " (strategy TEXT NOT NULL"
		insert := "INSERT INTO " + t.name + " VALUES (?"
		for _, c := range t.columns[1:] {
			ddl += ", " + c + " NUMERIC NOT NULL"
			insert += ", ?"
		}
		if _, err := tx.ExecContext(ctx, ddl+")"); err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		stmt, err := tx.PrepareContext(ctx, insert+")")
		if err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		for _, row := range t.rows {
			if _, err := stmt.ExecContext(ctx, row...); err != nil {
				return fmt.Errorf("sqlite: %w", err)
			}
		}
		if err := stmt.Close(); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// writeCharts draws queue depth and starts per second over time per
// strategy, and the distribution of start lateness, as SVG and PNG.
func writeCharts(dir string, results []*Result) error {
	series := func(y func(Row) float64) func(*Result) plotter.XYs {
		return func(r *Result) plotter.XYs {
			xy := make(plotter.XYs, len(r.Rows))
			for i, row := range r.Rows {
				xy[i] = plotter.XY{X: row.T / 3600, Y: y(row)}
			}
			return xy
		}
	}
	cdf := func(r *Result) plotter.XYs {
		var total, cum uint64
		for _, h := range r.Lateness {
			total += h.Count
		}
		xy := make(plotter.XYs, 0, len(r.Lateness))
		for _, h := range r.Lateness {
			cum += h.Count
			// Log x: the first buckets (under a millisecond) start at 1 ms.
			xy = append(xy, plotter.XY{X: max(h.UpTo, 1e-3), Y: float64(cum) / float64(total)})
		}
		return xy
	}
	charts := []struct {
		file, title, x, y string
		xy                func(*Result) plotter.XYs
		logX, logY        bool
	}{
		{"queue_depth", "Sync jobs waiting (scheduled, available, retryable), log scale", "hours from the first cycle start", "jobs",
			series(func(r Row) float64 { return max(float64(r.Pending), 1) }), false, true},
		{"starts", "Sync starts per second (mean per interval)", "hours from the first cycle start", "starts/s",
			series(func(r Row) float64 { return r.StartsPerSecond }), false, false},
		{"lateness", "Start lateness: fraction of starts at most x late", "seconds after the scheduled time (log scale)", "fraction of starts",
			cdf, true, false},
	}
	for _, c := range charts {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.title, c.x, c.y
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
			ticks := plot.DefaultTicks{}.Ticks(min, max)
			for i := range ticks {
				if ticks[i].Label != "" {
					ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
				}
			}
			return ticks
		})
		if c.logY {
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		}
		if c.logX {
			p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		}
		var args []any
		for _, r := range results {
			if xy := c.xy(r); len(xy) > 0 {
				args = append(args, string(r.Strategy), xy)
			}
		}
		if err := plotutil.AddLines(p, args...); err != nil {
			return err
		}
		for _, ext := range []string{".svg", ".png"} {
			if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, c.file+ext)); err != nil {
				return err
			}
		}
	}
	return nil
}
