package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/riverslotweb"
)

const webAbout = `Serves the operator's page and its JSON API (package riverslotweb)
for the riverslot tasks whose cycles the ledger of --schema records: each
task's current cycle (per-slot bars, slot circle, verdict, next slot), the
coverage and lateness of its last cycles, failures with their last error, and
an account search. The page refreshes itself and needs no network access
beyond this server.

  GET /                      the page (?task=NAME, &account=UUID)
  GET /api/status?task=NAME[&cycle_start=RFC3339]   as riverslot status --json
  GET /api/cycles?task=NAME[&limit=N]                recent cycles
  GET /api/accounts/{id}?task=NAME                   one account

It only reads: its database sessions are read-only. It binds 127.0.0.1
unless --addr says otherwise and has no authentication of its own; to open
it to others, mount riverslotweb.New in the app behind its own auth.
--table and --filter name the accounts table as the app configures it (the
page never counts it; an account's pin is read from the pins tables).
With --database-url it serves no /metrics: it runs no jobs.

For tasks spread over several databases (docs/shards.md), give every
shard's as --shard NAME=URL (NAME@SCHEMA=URL when its River schema is not
--schema) instead of --database-url: / is then the page over all shards
(riverslotweb.NewShards: the fleet's verdict and totals, each shard's
slots, syncs and lateness, the shard serving each slot, an account's
shard), /api/status its JSON (as riverslot status --shard --json),
/shards/NAME/ each shard's own page and API, and /metrics the fleet's
metrics in Prometheus's text format (docs/web.md): per task and shard,
whether its database answered (riverslot_shard_up), the map version it
follows, its slots and syncs from its ledger (riverslot_cycle_*), and their
sums over the shards (riverslot_fleet_cycle_*), one status read per
scrape. A shard whose database does not answer is shown as such (up 0),
at start too; the tasks are read from the first shard that answers and
has made a cycle. riverslot worker --web-addr serves
this page and the worker's metrics on one port, as an app does by passing
its Prometheus exporter's handler as riverslotweb.Config.Metrics.

Exit codes: 0 after SIGINT/SIGTERM, 2 bad input (no task found, address in
use, unreachable database; with --shard, when no shard answers).
`

func runWeb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("web", webAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "demo")
	schema := fs.String("schema", "riverslot_demo", "schema of River's tables (and of the accounts table unless --accounts-schema is set)")
	accountsSchema := fs.String("accounts-schema", "", "schema of the accounts table (default: --schema)")
	table := fs.String("table", "accounts", "accounts table, with a uuid column id")
	filter := fs.String("filter", "active", "the tasks' Filter: SQL boolean expression over the accounts table (empty: every row)")
	only := fs.String("task", "", "serve only these tasks (comma-separated; default: every task found)")
	addr := fs.String("addr", "127.0.0.1:8080", "host:port to listen on; 127.0.0.1 keeps it on this machine")
	refresh := fs.Duration("refresh", riverslotweb.RefreshDefault, "how often the page reloads itself")
	var shardSpecs shardFlag
	fs.Var(&shardSpecs, "shard", "NAME=URL (or NAME@SCHEMA=URL) of one shard's database, for tasks spread over several (docs/shards.md): repeat it for every shard to serve the page over all of them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	accountsSchemaGiven := *accountsSchema != ""
	if err := checkSchemaName("--schema", *schema); err != nil {
		return err
	}
	if *accountsSchema == "" {
		*accountsSchema = *schema
	} else if err := checkSchemaName("--accounts-schema", *accountsSchema); err != nil {
		return err
	}
	if *refresh < riverslotweb.RefreshMin {
		return usageErr("--refresh must be at least %s, got %s", riverslotweb.RefreshMin, *refresh)
	}
	var wanted []string
	for name := range strings.SplitSeq(*only, ",") {
		if name = strings.TrimSpace(name); name != "" {
			if err := checkTaskName(name); err != nil {
				return err
			}
			wanted = append(wanted, name)
		}
	}

	config := &riverslotweb.Config{Refresh: *refresh, Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	var (
		handler http.Handler
		tasks   []riverslot.Task
		where   string
	)
	if len(shardSpecs) > 0 {
		specs, err := parseShardSpecs(shardSpecs, *schema, "--schema must name River's schema in each shard's database, or give each shard's as --shard NAME@SCHEMA=URL")
		if err != nil {
			return err
		}
		var schedulers []*riverslot.Scheduler
		pools := make([]*pgxpool.Pool, len(specs))
		var downs, noTasks []error
		for i, sp := range specs {
			pool, down, err := openShard(ctx, sp, 4, true)
			if err != nil {
				return err
			}
			defer pool.Close()
			pools[i] = pool
			if down != nil {
				fmt.Fprintf(stderr, "warning: %v; the page shows it as not answering\n", down)
				downs = append(downs, down)
				continue
			}
			// A shard that answers must hold River's tables in its
			// schema: a wrong NAME@SCHEMA is bad input, not an outage.
			if err := inspect.CheckRiverSchema(ctx, pool, sp.schema); err != nil {
				return shardErr(sp.name, inputErr(err))
			}
			if tasks == nil {
				// The tasks of the first shard that has made a cycle (a
				// shard just added may have none yet).
				found, err := inspect.WantedTasks(ctx, pool, sp.schema, wanted)
				var ie *inspect.InputError
				switch {
				case errors.As(err, &ie): // no cycle there (yet)
					noTasks = append(noTasks, fmt.Errorf("shard %q: %w", sp.name, err))
					continue
				case err != nil: // its database failed: down
					fmt.Fprintf(stderr, "warning: shard %q: %v; the page shows it as not answering\n", sp.name, err)
					downs = append(downs, fmt.Errorf("shard %q: %w", sp.name, err))
					continue
				}
				tasks = found
			}
		}
		if tasks == nil {
			if len(noTasks) > 0 {
				return usageErr("%v", errors.Join(append(noTasks, downs...)...))
			}
			return usageErr("no shard's database answered: %v", errors.Join(downs...))
		}
		for i, sp := range specs {
			shardTasks := slices.Clone(tasks)
			for j := range shardTasks {
				shardTasks[j].Schema, shardTasks[j].Table, shardTasks[j].Filter = sp.schema, *table, *filter
				if accountsSchemaGiven {
					shardTasks[j].Schema = *accountsSchema
				}
			}
			s, err := inspect.Scheduler(pools[i], sp.name, sp.schema, shardTasks...)
			if err != nil {
				return inputErr(err)
			}
			schedulers = append(schedulers, s)
		}
		if handler, err = riverslotweb.NewShards(config, schedulers...); err != nil {
			return usageErr("%v", err)
		}
		where = fmt.Sprintf("%d shards", len(specs))
	} else {
		pool, err := connectReadOnly(ctx, databaseURL(), 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		if tasks, err = inspect.WantedTasks(ctx, pool, *schema, wanted); err != nil {
			return inputErr(err)
		}
		for i := range tasks {
			tasks[i].Schema, tasks[i].Table, tasks[i].Filter = *accountsSchema, *table, *filter
		}
		scheduler, err := inspect.Scheduler(pool, "", *schema, tasks...)
		if err != nil {
			return inputErr(err)
		}
		if handler, err = riverslotweb.New(scheduler, config); err != nil {
			return usageErr("%v", err)
		}
		where = "schema " + *schema
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return usageErr("--addr %q: %v; give host:port, e.g. 127.0.0.1:8080 or 127.0.0.1:0", *addr, err)
	}
	fmt.Fprint(stderr, openWarning("--addr", ln.Addr()))
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	fmt.Fprintf(stdout, "serving http://%s/ for %s (%s); Ctrl-C stops\n", ln.Addr(), inspect.TaskList(tasks), where)

	select {
	case err := <-served:
		return fmt.Errorf("error serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("error stopping the server: %w", err)
	}
	return nil
}
