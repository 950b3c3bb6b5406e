// Command riverslot shows slot scheduling at work and answers operators'
// questions about it.
//
//	riverslot demo    run compressed live cycles against Postgres and report them
//	riverslot plan    print a cycle's slots and an account's sync times (no database)
//	riverslot worker  run one River node for a task over an existing schema
//	riverslot status  show where a task's cycle stands
//	riverslot web     serve the operator's page and its JSON API
//	riverslot bench   run the benchmarks against Postgres
//	riverslot simulate  predict queue depth and lateness of a fleet (no database)
//	riverslot upstream  list a task's upstreams or set one's limits at run time
//	riverslot serve   periodic HTTP calls as a service
//	riverslot shards  show or change how a task's buckets spread over databases
//	riverslot migrate prepare a database: River's and riverslot's tables, the bucket index
//
// Every command that needs a database takes --database-url, else
// $DATABASE_URL, else the local database its make target prepares.
//
// Exit codes: 0 success, 1 the run failed, 2 bad flags or an unreachable
// database (refused before anything ran), 130 interrupted by SIGINT or
// SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // --tz works on machines without a zoneinfo database

	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

const usage = `usage: riverslot <command> [flags]

commands:
  demo    run compressed live cycles against Postgres and report them
  plan    print a cycle's slots and an account's next sync times (no database)
  worker  run one River node for a task over an existing schema
          (with the periodic trigger; --periodic=false to only work jobs)
  status  show where a task's cycle stands (exit 1 when behind or failed)
  web     serve the operator's page and JSON API for the tasks in a schema
  bench   run the benchmarks against Postgres
  simulate  predict a fleet's queue depth, lateness and throughput over days
          in seconds, for riverslot and its alternatives (no database)
  upstream  list a task's upstreams (limits, breaker, counters) or set one's
          limits at run time
  serve   periodic HTTP calls as a service: an HTTP API of schedules, each
          called once per period at a fixed, evenly spread place
  shards  show a task's shards (databases, each with its own River) and
          their cycles, set its shard map, or move buckets between shards
  migrate prepare a database: River's and riverslot's tables, and an
          accounts table's bucket index (--table)

Database: --database-url, else $DATABASE_URL, else the local database the
command's make target prepares (riverslot_demo for demo and worker,
riverslot_bench for bench).

Exit codes: 0 success, 1 the run failed, 2 bad input or an unreachable
database (refused before anything ran), 130 interrupted.

Run 'riverslot <command> -h' for a command's flags.
`

// exitError carries an exit code and a one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, args...)}
}

// inputErr gives an *inspect.InputError (bad input found in the database or
// refused by the library) exit code 2; other errors pass unchanged.
func inputErr(err error) error {
	var ie *inspect.InputError
	if errors.As(err, &ie) {
		return usageErr("%v", ie)
	}
	return err
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first SIGINT/SIGTERM, a second one gets Go's default
		// behaviour (exit at once) while the command shuts down in order.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = runDemo(ctx, args[1:], stdout, stderr)
	case "plan":
		err = runPlan(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "worker":
		err = runWorker(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "web":
		err = runWeb(ctx, args[1:], stdout, stderr)
	case "simulate":
		err = runSimulate(ctx, args[1:], stdout, stderr)
	case "upstream":
		err = runUpstream(ctx, args[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "shards":
		err = runShards(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = runMigrate(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "riverslot: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "riverslot "+args[0]+": "+inspect.OneLine(ee.msg))
		}
		return ee.code
	}
	if ctx.Err() != nil {
		// A SIGINT/SIGTERM cut an operation short.
		fmt.Fprintln(stderr, "riverslot "+args[0]+": interrupted: "+inspect.OneLine(err.Error()))
		return 130
	}
	fmt.Fprintln(stderr, "riverslot "+args[0]+": "+inspect.OneLine(err.Error()))
	return 1
}

// isTerminal reports whether w is a terminal, for a live progress line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
