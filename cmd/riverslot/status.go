package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

const statusAbout = `Shows where a task's cycle stands, read from riverslot's ledger (and
River's job table for what is still queued or running): each slot's
fan-out (scheduled, running, done, failed), how the sync jobs ended
(synced, gone, stale, no room upstream, failed, cancelled), lateness,
accounts expected against enqueued under the cycle's placement (hash, or the
pins its per-slot jobs follow), and one verdict: on track, behind by N
slots, failed slot K with River's error, or slot K selected N accounts, M
expected. --task and the database are enough: the latest cycle, its plan
(cycle length, seed, phase), placement and pins are read from the task's
jobs, so a phased task, a task OppositeOf another or a weighted task needs
no flag for it. --cycle and --trigger-offset matter only for a cycle that
has no job yet; --cycle-start shows an earlier cycle. Give --table and
--filter as the app configures them (accounts expected per slot).

For a task spread over several databases (docs/shards.md), give every
shard's as --shard NAME=URL (NAME@SCHEMA=URL when its River schema is not
--schema) instead of --database-url: status shows the latest cycle any
shard has made over all of them (the totals, each shard's verdict, slots,
syncs and lateness, and which shard serves each slot). A shard whose
database does not answer is shown as such; the others as usual.

For StartingGrace (30s) after River elects a leader (a restart), slots that
wait for their fan-out make the verdict "starting", not "behind".

Exit codes: 0 on track or starting, 1 behind or failed (with --shard: a
shard not on track or not answering, the shards' maps disagreeing, or no
shard with a cycle), 2 bad input.
`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	tf := addTaskFlags(fs)
	schema, task := tf.schema, tf.task
	cycleStart := fs.String("cycle-start", "", "RFC 3339 start of the cycle to show (default: the latest cycle the ledger records)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the view")
	watch := fs.Duration("watch", 0, "redraw every interval until interrupted (e.g. 2s)")
	svg := fs.String("svg", "", "also draw the cycle (slots by state, accounts enqueued against expected, lateness) into this .svg file, rewritten on every --watch redraw")
	var shardSpecs shardFlag
	fs.Var(&shardSpecs, "shard", "NAME=URL (or NAME@SCHEMA=URL) of one shard's database, for a task spread over several (docs/shards.md): repeat it for every shard to see the task over all of them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	accountsSchemaGiven := *tf.accountsSchema != ""
	if err := tf.check(); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return usageErr("--watch must be at least 100ms, got %s", *watch)
	}
	if len(shardSpecs) > 0 {
		switch {
		case *svg != "":
			return usageErr("--svg draws one database's cycle: leave it out with --shard, or give one shard's --database-url instead")
		case *cycleStart != "":
			return usageErr("--cycle-start reads one database's cycle: leave it out with --shard (the latest cycle over all shards), or give one shard's --database-url instead")
		}
		parsed, err := parseShardSpecs(shardSpecs, *schema, "--schema must name River's schema in each shard's database, or give each shard's as --shard NAME@SCHEMA=URL")
		if err != nil {
			return err
		}
		return runStatusShards(ctx, tf, accountsSchemaGiven, parsed, *asJSON, *watch, stdout, stderr)
	}
	if *svg != "" {
		if err := checkSVGPath(*svg); err != nil {
			return err
		}
	}
	var at time.Time
	if *cycleStart != "" {
		t, err := time.Parse(time.RFC3339, *cycleStart)
		if err != nil {
			return usageErr("--cycle-start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", *cycleStart)
		}
		at = t
	}
	// status only reads, so checking the task after connecting changes
	// nothing.
	pool, err := connect(ctx, databaseURL(), 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := inspect.CheckRiverSchema(ctx, pool, *schema); err != nil {
		return inputErr(err)
	}
	scheduler, err := inspect.Scheduler(pool, "", *schema, tf.riverTask())
	if err != nil {
		return inputErr(err)
	}

	for {
		var st *riverslot.TaskStatus
		if at.IsZero() {
			st, err = scheduler.Status(ctx, *task)
		} else {
			st, err = scheduler.StatusAt(ctx, *task, at)
		}
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
			}
			if !at.IsZero() && errors.Is(err, riverslot.ErrNoCycle) {
				return usageErr("--cycle-start: %v", err)
			}
			return err
		}
		if *svg != "" {
			if err := inspect.WriteStatusSVG(*svg, st); err != nil {
				return fmt.Errorf("error writing --svg %s: %w", *svg, err)
			}
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return err
			}
		} else {
			if *watch > 0 {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			inspect.WriteStatus(stdout, st)
		}
		if *watch == 0 {
			if !st.Current.OnTrack && !st.Current.Starting {
				return &exitError{code: 1}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 130, msg: "interrupted"}
		case <-time.After(*watch):
		}
	}
}
