package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// lockedWriter serializes writes from several goroutines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// progress is the demo's progress line: inserted (what the fan-outs
// recorded in the ledger) and completed (the ends the sync workers counted
// there) whatever River deleted; pending, running and unfinished from
// River's job table, which holds them until they finish.
type progress struct {
	inserted, pending, running, completed, unfinished int64
	// perSlotDone counts the last cycle's finished fan-outs, from
	// riverslot's ledger (River may have deleted their jobs).
	perSlotDone int64
	// riverJobRows is every row of river_job.
	riverJobRows int64
}

func (d *demo) progress(ctx context.Context, cycleStart time.Time, starts []time.Time) (progress, error) {
	var p progress
	err := d.monitor.QueryRow(ctx, `
		SELECT
			(SELECT coalesce(sum(inserted), 0) FROM `+pgx.Identifier{d.cfg.Schema, ledger.Table}.Sanitize()+`
				WHERE task = ANY($1) AND cycle_start = $2 AND slot >= 0),
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2 AND state IN ('scheduled', 'available', 'retryable', 'pending')),
			count(*) FILTER (WHERE kind = $3 AND (args->>'cycle_start')::timestamptz = $2 AND state = 'running'),
			(SELECT coalesce(sum(coalesce(synced, 0) + coalesce(gone, 0) + coalesce(stale, 0) + coalesce(upstream_skipped, 0)), 0)
				FROM `+pgx.Identifier{d.cfg.Schema, ledger.Table}.Sanitize()+` WHERE task = ANY($1) AND cycle_start = $2 AND slot = -1),
			count(*) FILTER (WHERE (args->>'cycle_start')::timestamptz = ANY($4) AND state NOT IN ('completed', 'cancelled', 'discarded')),
			(SELECT count(*) FROM `+pgx.Identifier{d.cfg.Schema, ledger.Table}.Sanitize()+`
				WHERE task = ANY($1) AND cycle_start = $5 AND slot >= 0 AND finished_at IS NOT NULL),
			(SELECT count(*) FROM `+riverjob.QualifiedTable(d.cfg.Schema)+`)
		FROM `+riverjob.QualifiedTable(d.cfg.Schema)+` WHERE args->>'task' = ANY($1)`,
		d.cfg.tasks(), cycleStart, syncjob.Kind, starts, starts[len(starts)-1]).Scan(
		&p.inserted, &p.pending, &p.running, &p.completed, &p.unfinished, &p.perSlotDone, &p.riverJobRows)
	d.maxRiverJobRows = max(d.maxRiverJobRows, p.riverJobRows)
	return p, err
}

// watch shows progress until every job of every cycle has finished.
func (d *demo) watch(ctx context.Context, starts []time.Time) error {
	var (
		tty      = d.tty
		last     = starts[len(starts)-1]
		deadline = last.Add(d.cfg.Cycle).Add(max(2*time.Minute, d.cfg.Cycle))
		ticker   = time.NewTicker(500 * time.Millisecond)
		lastKey  = ""
	)
	defer ticker.Stop()
	interrupted := func() error {
		if tty {
			fmt.Fprintln(d.stderr)
		}
		return ErrInterrupted
	}

	for {
		if ctx.Err() != nil {
			return interrupted()
		}
		now := time.Now()
		if !now.Before(last) && d.stopTriggers != nil {
			d.stopTriggers()
			d.stopTriggers = nil
		}
		idx := 0
		for i, s := range starts {
			if !now.Before(s) {
				idx = i
			}
		}
		cycleStart := starts[idx]
		p, err := d.progress(ctx, cycleStart, starts)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted()
			}
			return fmt.Errorf("error reading progress: %w", err)
		}

		elapsed := now.Sub(cycleStart)
		slot := int(elapsed / d.plan.SlotDuration)
		var status string
		switch {
		case elapsed < 0:
			status = fmt.Sprintf("cycle %d/%d starts in %s", idx+1, len(starts), (-elapsed).Round(time.Second))
			slot = -1
		case slot >= d.plan.Slots:
			status = fmt.Sprintf("cycle %d/%d: all %d slots past, draining", idx+1, len(starts), d.plan.Slots)
			slot = d.plan.Slots
		default:
			status = fmt.Sprintf("cycle %d/%d slot %d/%d", idx+1, len(starts), slot+1, d.plan.Slots)
		}
		line := fmt.Sprintf("%-28s %s  sync jobs inserted %d  pending %d  running %d  completed %d",
			status, bar(elapsed, d.cfg.Cycle, 20), p.inserted, p.pending, p.running, p.completed)

		done := !now.Before(last.Add(d.cfg.Cycle)) && p.unfinished == 0 && p.perSlotDone == int64(d.plan.Slots*len(d.cfg.tasks()))
		if tty {
			fmt.Fprintf(d.stderr, "\r\033[K%s", line)
			if done {
				fmt.Fprintln(d.stderr)
			}
		} else if key := fmt.Sprintf("%d/%d", idx, slot); key != lastKey || done {
			fmt.Fprintln(d.stderr, line)
			lastKey = key
		}
		if done {
			return nil
		}
		if now.After(deadline) {
			if tty {
				fmt.Fprintln(d.stderr)
			}
			need := float64(d.cfg.Accounts*len(d.cfg.tasks())) / d.cfg.Cycle.Seconds()
			return fmt.Errorf("timed out: %d jobs still unfinished %s after the last cycle ended: a worker is stuck, or the cycle asks for more syncs "+
				"than --workers %d complete on this machine (%d accounts x %d task(s) in %s: %.0f syncs/s); use fewer --accounts, a longer --cycle or more --workers",
				p.unfinished, max(2*time.Minute, d.cfg.Cycle), d.cfg.Workers, d.cfg.Accounts, len(d.cfg.tasks()), d.cfg.Cycle, need)
		}

		select {
		case <-ctx.Done():
			return interrupted()
		case <-ticker.C:
		}
	}
}

func bar(elapsed, total time.Duration, width int) string {
	frac := float64(elapsed) / float64(total)
	frac = min(max(frac, 0), 1)
	n := int(frac * float64(width))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + fmt.Sprintf("] %3.0f%%", frac*100)
}
