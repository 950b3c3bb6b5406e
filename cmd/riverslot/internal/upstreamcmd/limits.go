package upstreamcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/internal/upstream"
)

// ListConfig is riverslot upstream list: the values of its flags, which the
// command validates as it parses them, and the pool it connected.
type ListConfig struct {
	// Pool is the database of River's tables, in Schema (--schema).
	Pool   *pgxpool.Pool
	Schema string
	// Task is the task whose upstreams to list (--task). Defaults to every
	// task.
	Task string
	// After lists the keys after this one (--after), within Task.
	After string
	// Limit is the most keys listed (--limit).
	Limit int
	// JSON prints a JSON array instead of the table (--json).
	JSON bool
}

// List prints the upstreams the limiter holds to w (their limits in force:
// an override, else "task default", the app's Task.Limits, which the
// command cannot see; the breaker, when a 429's pause ends, in flight,
// waiting and counters), and how to get the next page when there may be
// more. Missing tables are an *inspect.InputError.
func List(ctx context.Context, c *ListConfig, w io.Writer) error {
	list, err := upstream.New(c.Schema).List(ctx, c.Pool, c.Task, c.After, c.Limit)
	if err != nil {
		return limiterErr(err)
	}
	if c.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		// UpstreamState's own JSON form: the overrides (null: the
		// task's), the breaker, paused_until, in flight, waiting and
		// the counters.
		return enc.Encode(list)
	}
	return writeList(w, list, c.Limit, time.Now())
}

// taskDefault stands for a limit without an override: the task's, which
// the app sets (Task.Limits) and the command cannot see.
const taskDefault = "task default"

// writeList prints list as a table: each upstream's limits in force (its
// overrides, else taskDefault) and, while its pause (a 429) lasts at now,
// when it ends; then how to get the next page when list is a full page of
// limit.
func writeList(w io.Writer, list []upstream.State, limit int, now time.Time) error {
	defaults := false
	rate := func(v *float64) string {
		switch {
		case v == nil:
			defaults = true
			return taskDefault
		case *v == 0:
			return "none" // 0 lifts the limit
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	// count prints an override, zero for 0 (as the limiter takes it).
	count := func(v *int, zero string) string {
		switch {
		case v == nil:
			defaults = true
			return taskDefault
		case *v == 0:
			return zero
		}
		return strconv.Itoa(*v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKEY\tRATE/S\tBURST\tCONCURRENCY\tBREAKER\tPAUSED UNTIL\tIN FLIGHT\tWAITING\tCALLS\tFAILED\tTHROTTLED\tDEFERRED\tSKIPPED\tPROBES")
	for _, s := range list {
		paused := "-"
		if s.PausedUntil != nil && s.PausedUntil.After(now) {
			paused = s.PausedUntil.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%q\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Task, s.Key,
			rate(s.Rate), count(s.Burst, "1"), count(s.Concurrency, "none"), s.Breaker, paused,
			s.InFlight, s.Waiting, s.Calls, s.Failed, s.Throttled, s.Deferred, s.Skipped, s.Probes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if defaults {
		fmt.Fprintf(w, "%s: the key has no override; the task's Limits apply, as the app sets them (not known here; riverslot upstream set overrides them)\n", taskDefault)
	}
	if len(list) == limit {
		fmt.Fprintf(w, "(more: --after %q)\n", list[len(list)-1].Key)
	}
	return nil
}

// Set stores override as the limits of upstream key of task, in River's
// tables in schema, and says so on w: every node applies them on its next
// decision. Missing tables are an *inspect.InputError.
func Set(ctx context.Context, pool *pgxpool.Pool, schema, task, key string, override upstream.Override, w io.Writer) error {
	if err := upstream.New(schema).Set(ctx, pool, task, key, override); err != nil {
		return limiterErr(err)
	}
	fmt.Fprintf(w, "upstream %q of task %q: limits set; every node applies them on its next decision\n", key, task)
	return nil
}

// limiterErr makes missing tables bad input, with the fix.
func limiterErr(err error) error {
	if errors.Is(err, upstream.ErrMissing) {
		return &inspect.InputError{Err: err}
	}
	return err
}
