package upstreamcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

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

// List prints the upstreams the limiter holds (their overrides, breaker, in
// flight, waiting and counters) to w, and how to get the next page when
// there may be more. Missing tables are an *inspect.InputError.
func List(ctx context.Context, c *ListConfig, w io.Writer) error {
	list, err := upstream.New(c.Schema).List(ctx, c.Pool, c.Task, c.After, c.Limit)
	if err != nil {
		return limiterErr(err)
	}
	if c.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		// UpstreamState's own JSON form: the overrides, the breaker,
		// in flight, waiting and the counters.
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tKEY\tRATE\tBURST\tCONC\tBREAKER\tIN FLIGHT\tWAITING\tCALLS\tFAILED\tTHROTTLED\tDEFERRED\tSKIPPED\tPROBES")
	opt := func(p *int) string {
		if p == nil {
			return "task"
		}
		return strconv.Itoa(*p)
	}
	for _, s := range list {
		r := "task"
		if s.Rate != nil {
			r = strconv.FormatFloat(*s.Rate, 'g', -1, 64)
		}
		fmt.Fprintf(tw, "%s\t%q\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Task, s.Key, r, opt(s.Burst), opt(s.Concurrency), s.Breaker,
			s.InFlight, s.Waiting, s.Calls, s.Failed, s.Throttled, s.Deferred, s.Skipped, s.Probes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list) == c.Limit {
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
