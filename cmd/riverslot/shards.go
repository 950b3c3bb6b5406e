package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shardscmd"
	"github.com/riverslot/riverslot/slotplan"
)

const shardsAbout = `Shows and changes how a task's buckets are spread over several
PostgreSQL databases (shards), each running its own River (docs/shards.md).
Every shard holds a copy of the task's shard maps; a cycle follows the map
in force at its start.

  riverslot shards show   --task T --shard NAME=URL ... [--json]
  riverslot shards set    --task T --shard NAME=URL ... --ranges NAME:LO-HI[,LO-HI][/NAME:LO-HI...]
                          [--at TIME] [--cycle D --buckets N]
  riverslot shards move   --task T --shard NAME=URL ... --range LO-HI --to NAME --at TIME
                          [--cycle D --buckets N]
  riverslot shards add    --task T --shard NAME=URL ... --at TIME [--range LO-HI]
                          [--cycle D --buckets N]
  riverslot shards repair --task T --shard NAME=URL ... [--ranges ...] [--at TIME]
                          [--cycle D --buckets N]
  riverslot shards copy-accounts --task T --shard NAME=URL ... --range LO-HI --from NAME --to NAME
                          --table T [--accounts-schema S] [--batch N]
  riverslot shards rebalance --task T --shard NAME=URL ... --to-even [--weights NAME=W,...]
                          (--at TIME | --dry-run) [--cycle D --buckets N]

--shard names each shard and its database (repeat it for every shard):
NAME=URL, with River's schema --schema, or NAME@SCHEMA=URL for a shard
whose River schema differs. set, add and repair create the shard-map
table (and riverslot's ledger) where missing, as riverslot.MigrateLedger
does. Buckets are the 65,536 two-byte
buckets (the last two bytes of an account's UUID, byte 15 high), LO-HI
inclusive. --at is when the change takes effect: the cycles starting at or
after it follow it (RFC 3339, at least 30 s ahead, after every shard's
last cycle); set without --at makes the fleet's first map, for every
cycle, before any shard has made one. Every range must fall on the task's
slots, by the plan of its latest cycle in the shards' ledgers, or by
--cycle (and --buckets) when given (give them when the plan changes): a
range that does not is refused, naming the nearest bounds.

set and move write the next version to every shard; a shard holding no map
of the task (a new one) joins at that version. add joins the new shards
(those holding no map) to the fleet's latest map from --at, nothing moved
or, with --range, those buckets given to the new shard. repair brings every
shard to one map after a change written on some shards only (show exits 1
naming them), whatever versions they hold: the ranges of the highest
version any shard holds (or --ranges), from its start (or --at, at least
30 s ahead); it refuses only a map that would change the shards of a cycle
a shard has already made, and writes nothing when the shards agree.

copy-accounts copies the accounts of buckets LO-HI (every column the two
tables share by name) from shard --from's accounts table to --to's, where
each shard holds its own accounts: in (bucket, id) order, --batch rows
(default 1000) per transaction on --to, with ON CONFLICT (id) DO NOTHING.
A rerun (after a kill, say) reads the range again from its start and skips
the rows already there; rows present are never changed. Progress goes to
stderr, the summary (rows copied, rows already present) to stdout.

rebalance --to-even proposes moves on the task's slot bounds so that each
shard owns buckets in proportion to its weight (--weights NAME=W,...; a
shard not named weighs 1, 0 empties it), moving the fewest buckets and
keeping ranges whole where it can; it prints each move and every shard's
buckets before and after. --dry-run stops there; otherwise the new map is
written from --at, as set and move write theirs.

show prints each shard's latest map and its latest cycle (the map version
it followed, its slots, its syncs as the ledger counts them) and the total
over the shards for the latest cycle start; then the ranges the latest
changes moved away from a shard, and from when that shard's copies may be
deleted (once the new map's first cycle has started on every shard and the
old map's last cycle there can no longer sync them), with the SQL
predicate of the range.

Exit codes: 0 success, 1 a database failed or the shards disagree, 2 bad input.
`

type shardFlag []string

func (s *shardFlag) String() string     { return strings.Join(*s, " ") }
func (s *shardFlag) Set(v string) error { *s = append(*s, v); return nil }

func runShards(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"show", "set", "move", "add", "repair", "copy-accounts", "rebalance"}, args[0]) {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, shardsAbout)
			return nil
		}
		return usageErr("shards needs a subcommand: show, set, move, add, repair, copy-accounts or rebalance (riverslot shards -h)")
	}
	sub := args[0]
	fs := newFlagSet("shards "+sub, shardsAbout, stderr)
	var specs shardFlag
	fs.Var(&specs, "shard", "NAME=URL (or NAME@SCHEMA=URL) of one shard's database (repeat for every shard)")
	schema := fs.String("schema", "", "schema of River's tables in each shard's database (river.Config.Schema)")
	task := fs.String("task", "", "the task's name (required)")
	var (
		ranges, rng, to, at *string
		cycle               *time.Duration
		buckets             *int
		asJSON              *bool
	)
	var (
		fromShard, table, accountsSchema, weights *string
		idColumn                                  *string
		batch                                     *int
		toEven, dryRun                            *bool
	)
	switch sub {
	case "show":
		asJSON = fs.Bool("json", false, "print JSON")
	case "copy-accounts":
		rng = fs.String("range", "", "the buckets whose accounts to copy, LO-HI (of 0-65535)")
		fromShard = fs.String("from", "", "the shard to copy from")
		to = fs.String("to", "", "the shard to copy to")
		table = fs.String("table", "", "the accounts table, alike on both shards, with a uuid column --id-column")
		idColumn = fs.String("id-column", "id", "the accounts table's uuid column (the task's IDColumn)")
		accountsSchema = fs.String("accounts-schema", "public", "the accounts table's schema on both shards")
		batch = fs.Int("batch", shardscmd.CopyBatchDefault, "rows per transaction on --to")
	default:
		at = fs.String("at", "", "when the change takes effect (RFC 3339): the cycles starting at or after it follow it")
		cycle = durationFlag(fs, "cycle", 0, "the task's Cycle, to check the ranges fall on its slots (0: not checked)")
		buckets = fs.Int("buckets", slotplan.Buckets, "the task's Buckets (256 or 65536), with --cycle")
	}
	switch sub {
	case "set":
		ranges = fs.String("ranges", "", "the map: NAME:LO-HI[,LO-HI] for each shard, separated by '/'")
	case "repair":
		ranges = fs.String("ranges", "", "the map to bring every shard to: NAME:LO-HI[,LO-HI] for each shard, separated by '/' (default: the highest version's ranges)")
	case "move":
		rng = fs.String("range", "", "the buckets to move, LO-HI")
		to = fs.String("to", "", "the shard that gets them")
	case "add":
		rng = fs.String("range", "", "the buckets the new shard takes from --at, LO-HI (default: none, nothing moves)")
	case "rebalance":
		toEven = fs.Bool("to-even", false, "give each shard buckets in proportion to its weight (required)")
		weights = fs.String("weights", "", "NAME=W,... each shard's weight (default 1 each; 0 empties a shard)")
		dryRun = fs.Bool("dry-run", false, "print the moves, write nothing")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := checkTaskName(*task); err != nil {
		return err
	}
	if len(specs) == 0 {
		return usageErr("--shard NAME=URL is required, once for every shard")
	}
	var from time.Time
	if at != nil && *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return usageErr("--at %q must be a time in RFC 3339, e.g. 2026-12-01T00:00:00Z", *at)
		}
		from = t
	}
	var plan *slotplan.Plan
	if cycle != nil && *cycle != 0 {
		p, err := slotplan.NewBuckets(*cycle, *buckets)
		if err != nil {
			return usageErr("--cycle/--buckets: %v", err)
		}
		plan = &p
	}
	// Parse everything before connecting.
	var next slotplan.ShardMap
	var repairMap *slotplan.ShardMap
	switch sub {
	case "set", "repair":
		if sub == "repair" && *ranges == "" {
			break
		}
		m, err := parseShardRanges(*ranges)
		if err != nil {
			return usageErr("--ranges: %v", err)
		}
		if plan != nil {
			if err := m.Aligned(*plan); err != nil {
				return usageErr("%v", err)
			}
		}
		next, repairMap = m, &m
	case "add":
		if from.IsZero() {
			return usageErr("add needs --at: the first cycle start the new shard is in the map (RFC 3339, at least 30 s ahead)")
		}
	case "move":
		if *rng == "" || *to == "" {
			return usageErr("move needs --range LO-HI and --to NAME")
		}
		if from.IsZero() {
			return usageErr("move needs --at: the first cycle start the move applies to (RFC 3339)")
		}
	case "rebalance":
		if !*toEven {
			return usageErr("rebalance needs --to-even: each shard gets buckets in proportion to its weight (--weights)")
		}
		if from.IsZero() && !*dryRun {
			return usageErr("rebalance needs --at (the first cycle start the new map applies to, RFC 3339, at least 30 s ahead), or --dry-run to only print the moves")
		}
	}
	parsed, err := parseShardSpecs(specs, *schema, "--schema is required (River's schema in each shard's database), or give each shard's as --shard NAME@SCHEMA=URL")
	if err != nil {
		return err
	}
	given := func(flag, name string) error {
		if !slices.ContainsFunc(parsed, func(sp shardSpec) bool { return sp.name == name }) {
			names := make([]string, len(parsed))
			for i, sp := range parsed {
				names[i] = sp.name
			}
			return usageErr("%s %q is not among --shard (%s); name one of them, or give its --shard NAME=URL", flag, name, strings.Join(names, ", "))
		}
		return nil
	}
	var copyConfig *shardscmd.CopyConfig
	if sub == "copy-accounts" {
		if copyConfig, err = parseCopy(*rng, *fromShard, *to, *table, *accountsSchema, *batch, given); err != nil {
			return err
		}
		if err := checkSchemaName("--id-column", *idColumn); err != nil {
			return err
		}
		copyConfig.IDColumn = *idColumn
	}
	var weightMap map[string]float64
	if sub == "rebalance" && *weights != "" {
		if weightMap, err = parseWeights(*weights, given); err != nil {
			return err
		}
	}
	var move *shardscmd.Move
	if sub == "move" || (sub == "add" && *rng != "") {
		lo, hi, err := parseBucketRange(*rng)
		if err != nil {
			return usageErr("--range: %v", err)
		}
		move = &shardscmd.Move{Lo: lo, Hi: hi}
		if to != nil {
			move.To = *to
		}
	}
	shards := make([]riverslot.Shard, 0, len(parsed))
	for _, sp := range parsed {
		pool, err := connectFlag(ctx, "--shard "+sp.name, sp.url, 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		shards = append(shards, riverslot.Shard{Name: sp.name, Pool: pool, Schema: sp.schema})
	}
	switch sub {
	case "show":
		return shardscmd.Show(ctx, stdout, shards, *task, *asJSON)
	case "copy-accounts":
		copyConfig.Shards, copyConfig.Task, copyConfig.Progress = shards, *task, stderr
		_, err := shardscmd.CopyAccounts(ctx, copyConfig, stdout)
		return inputErr(err)
	case "rebalance":
		return inputErr(shardscmd.Rebalance(ctx, &shardscmd.RebalanceConfig{Shards: shards, Task: *task, Weights: weightMap, From: from, Plan: plan, DryRun: *dryRun}, stdout))
	case "add":
		return inputErr(shardscmd.Add(ctx, &shardscmd.AddConfig{Shards: shards, Task: *task, From: from, Range: move, Plan: plan}, stdout))
	case "repair":
		var at *time.Time
		if !from.IsZero() {
			at = &from
		}
		return inputErr(shardscmd.Repair(ctx, &shardscmd.RepairConfig{Shards: shards, Task: *task, Map: repairMap, From: at, Plan: plan}, stdout))
	}
	return inputErr(shardscmd.Set(ctx, &shardscmd.SetConfig{Shards: shards, Task: *task, Map: next, Move: move, From: from, Plan: plan}, stdout))
}

// shardSpec is one --shard NAME=URL or NAME@SCHEMA=URL.
type shardSpec struct {
	name, schema, url string
	custom            bool // the schema was given in the spec
}

// parseShardSpecs reads the --shard flags, each shard's schema defaulting
// to schema (noSchema is the error when that is empty and needed).
func parseShardSpecs(specs []string, schema, noSchema string) ([]shardSpec, error) {
	out := make([]shardSpec, 0, len(specs))
	seen := map[string]bool{}
	for _, s := range specs {
		name, url, ok := strings.Cut(s, "=")
		name, shardSchema, custom := strings.Cut(name, "@")
		if !ok || !slotplan.ValidShardName(name) || url == "" {
			return nil, usageErr("--shard %q must be NAME=URL or NAME@SCHEMA=URL, NAME 1-64 letters, digits, '_', '-' or '.'", s)
		}
		if !custom {
			if schema == "" {
				return nil, usageErr("%s", noSchema)
			}
			shardSchema = schema
		}
		if err := checkSchemaName("--shard "+name+" schema", shardSchema); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, usageErr("--shard %q is given twice; give each shard once", name)
		}
		seen[name] = true
		out = append(out, shardSpec{name: name, schema: shardSchema, url: url, custom: custom})
	}
	return out, nil
}

// shardErr prefixes err with the shard's flag, keeping its exit code.
func shardErr(name string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.code, msg: "--shard " + name + ": " + ee.msg}
	}
	return fmt.Errorf("--shard %s: %w", name, err)
}

// openShard opens a pool on a shard's database for a view over all
// shards: when the database does not answer, the pool is still returned
// (it connects on use) with down saying why, so the view shows the shard
// as down and the others as usual.
func openShard(ctx context.Context, sp shardSpec, maxConns int32, readOnly bool) (pool *pgxpool.Pool, down, err error) {
	config, err := pgxpool.ParseConfig(sp.url)
	if err != nil {
		return nil, nil, usageErr("--shard %s is not a valid PostgreSQL URL: %v", sp.name, err)
	}
	if readOnly {
		config.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	config.MaxConns = maxConns
	if config.ConnConfig.ConnectTimeout == 0 {
		config.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err = pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, nil, usageErr("--shard %s: %v", sp.name, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		return pool, fmt.Errorf("shard %q: cannot reach its database at %s: %w", sp.name, redact(config), err), nil
	}
	return pool, nil, nil
}

// parseShardRanges reads "a:0-32767/b:32768-65535,..." into a validated
// map.
func parseShardRanges(s string) (slotplan.ShardMap, error) {
	var m slotplan.ShardMap
	for _, part := range strings.Split(s, "/") {
		name, list, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return m, fmt.Errorf("%q must be NAME:LO-HI[,LO-HI]", part)
		}
		for _, r := range strings.Split(list, ",") {
			lo, hi, err := parseBucketRange(r)
			if err != nil {
				return m, err
			}
			m.Ranges = append(m.Ranges, slotplan.ShardRange{Shard: name, Lo: lo, Hi: hi})
		}
	}
	return m, m.Validate()
}

// parseCopy checks copy-accounts' flags (given checks a shard name is
// among --shard) before anything connects.
func parseCopy(rng, from, to, table, accountsSchema string, batch int, given func(flag, name string) error) (*shardscmd.CopyConfig, error) {
	if rng == "" || from == "" || to == "" || table == "" {
		return nil, usageErr("copy-accounts needs --range LO-HI, --from NAME, --to NAME and --table T")
	}
	lo, hi, err := parseBucketRange(rng)
	if err != nil {
		return nil, usageErr("--range: %v", err)
	}
	if lo < 0 || hi >= slotplan.BucketsTwoByte || lo > hi {
		return nil, usageErr("--range %d-%d must be within the buckets 0-%d, low to high", lo, hi, slotplan.BucketsTwoByte-1)
	}
	if from == to {
		return nil, usageErr("--from and --to are both %q: copy from one shard to another", from)
	}
	if err := given("--from", from); err != nil {
		return nil, err
	}
	if err := given("--to", to); err != nil {
		return nil, err
	}
	if err := checkSchemaName("--table", table); err != nil {
		return nil, err
	}
	if err := checkSchemaName("--accounts-schema", accountsSchema); err != nil {
		return nil, err
	}
	if batch < 1 || batch > shardscmd.CopyBatchMax {
		return nil, usageErr("--batch must be 1-%d, got %d", shardscmd.CopyBatchMax, batch)
	}
	return &shardscmd.CopyConfig{From: from, To: to, Lo: lo, Hi: hi, Schema: accountsSchema, Table: table, Batch: batch}, nil
}

// parseWeights reads --weights "a=2,b=1.5".
func parseWeights(s string, given func(flag, name string) error) (map[string]float64, error) {
	out := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		w, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return nil, usageErr("--weights: %q must be NAME=W, W a number of 0 or more", part)
		}
		if err := given("--weights", name); err != nil {
			return nil, err
		}
		out[name] = w
	}
	return out, nil
}

func parseBucketRange(s string) (int, int, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q must be LO-HI, two buckets of 0-65535", s)
	}
	return lo, hi, nil
}
