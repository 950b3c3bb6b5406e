package demo

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
	"github.com/riverslot/riverslot/slotplan"
)

// Config is a run of the demo: the values of riverslot demo's flags, which
// the command validates as it parses them, and the pools it connected.
type Config struct {
	// Pool is River's database (--database-url); Monitor a separate pool of
	// one connection on it for the progress reads, so that a read is not
	// queued behind the workers. Both are required without ShardPools.
	Pool, Monitor *pgxpool.Pool
	// AccountsPool holds the accounts table (--accounts-database-url).
	// Defaults to Pool.
	AccountsPool *pgxpool.Pool
	// ShardPools are the databases of a sharded run (--shards), shard i
	// named ShardName(i); nil runs over Pool alone.
	ShardPools []*pgxpool.Pool

	// Accounts is how many random UUIDv4 accounts to seed.
	Accounts int
	// Cycle is the tasks' cycle and Cycles how many of them to run.
	Cycle  time.Duration
	Cycles int
	// Workers is River's MaxWorkers for the demo's queue.
	Workers int
	// JSON says the report is printed as JSON: Run then does not read the
	// last cycle's status for the text (Report.Status stays nil).
	JSON bool
	// CycleStart is the first cycle's start. Defaults to a trigger lead
	// from now (or, with Keep, the unfinished cycle the ledger records).
	CycleStart time.Time
	// Keep reuses the demo's schema and accounts instead of dropping and
	// reseeding them.
	Keep bool
	// Schema is the schema the demo creates and owns; Task the task name.
	Schema string
	Task   string
	// Reciprocal runs a second task, <Task>_opposite, opposite the first.
	Reciprocal bool
	// Weights is "" or "pareto": seed a weight column and run weighted.
	Weights string
	// LogLevel is the level of River's logger.
	LogLevel slog.Level
	// CompletedRetention is River's CompletedJobRetentionPeriod. Defaults
	// to River's, 24 h.
	CompletedRetention time.Duration
	// FanOutBaseline times River's raw insert of a mean slot's sync jobs
	// after the run and reports the live fan-out against it.
	FanOutBaseline bool
	// Upstreams spreads the accounts over fake upstreams the demo serves
	// and its syncs call (Count 0: none).
	Upstreams sim.Upstreams
}

// validate checks what the flags do not say: that the pools are there.
func (c *Config) validate() error {
	if c.ShardPools == nil && (c.Pool == nil || c.Monitor == nil) {
		return errors.New("demo: Config.Pool and Config.Monitor are required without ShardPools")
	}
	if _, err := slotplan.New(c.Cycle); err != nil {
		return fmt.Errorf("demo: Config.Cycle: %w", err)
	}
	return nil
}

// tasks are the names of the demo's tasks: Task, and with Reciprocal
// <Task>_opposite, opposite it (riverslot.Task.OppositeOf).
func (c *Config) tasks() []string {
	if c.Reciprocal {
		return []string{c.Task, c.Task + "_opposite"}
	}
	return []string{c.Task}
}

// ShardName is the name of shard i of a sharded run: s1, s2, ...; its
// schema is Schema_<name>.
func ShardName(i int) string { return fmt.Sprintf("s%d", i+1) }
