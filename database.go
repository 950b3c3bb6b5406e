package riverslot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/riverjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// riverSchemaMax is the longest schema name River accepts: its longest
// notification topic (river_leadership) must fit after it in a 63-byte
// identifier.
const riverSchemaMax = 63 - 1 - len("river_leadership")

var riverSchemaRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validateRiverSchema checks schema as River's client does, so that
// Migrate refuses a name River would refuse before it creates anything.
func validateRiverSchema(schema string) error {
	switch {
	case schema == "":
		return nil
	case len(schema) > riverSchemaMax:
		return fmt.Errorf("schema %q is %d characters long: River accepts at most %d (its notification topics follow it in a 63-byte name); choose a shorter schema", schema, len(schema), riverSchemaMax)
	case !riverSchemaRE.MatchString(schema):
		return fmt.Errorf("schema %q is not a name River accepts: use letters, digits and underscores, starting with a letter or underscore (River's river.Config.Schema rule)", schema)
	}
	return nil
}

// Migrate brings River's tables in schema ("" for search_path) up to the
// version this River release needs (rivermigrate's Migrate up, for apps
// that do not run River's CLI), creating schema first when it does not
// exist, and creates riverslot's ledger table there (riverslot_ledger, see
// docs/scale.md). Run it as a role that may create tables in schema (and
// the schema, when it is missing). It is idempotent: run it on every
// deploy; an existing deployment gets the ledger on its next run. Apps that
// migrate River with its own CLI run Migrate too, or MigrateLedger.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := validateRiverSchema(schema); err != nil {
		return err
	}
	if schema != "" {
		// Checked first: CREATE SCHEMA IF NOT EXISTS needs CREATE on the
		// database even when the schema exists.
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
			return fmt.Errorf("error looking up schema %q: %w", schema, err)
		}
		if !exists {
			if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
				return fmt.Errorf("error creating schema %q for River's tables (create it as its owner, or grant CREATE on the database to this role): %w", schema, err)
			}
		}
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("error creating River migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("error migrating River tables in schema %q: %w", schema, err)
	}
	return MigrateLedger(ctx, pool, schema)
}

// MigrateLedger creates riverslot's ledger table in River's schema ("" for
// search_path) if it does not exist. Migrate calls it.
//
// Upgrading from a version without the ledger (or whose ledger did not
// record each cycle's decisions), it records the cycles River's job table
// still holds: completed bootstraps, every per-slot job (finished when
// completed) and each cycle's placement, so that no cycle River still
// knows is bootstrapped twice once River deletes its jobs. Cycles River
// already deleted cannot be recovered; docs/scale.md says what to do.
func MigrateLedger(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if err := validateRiverSchema(schema); err != nil {
		return err
	}
	// The DDL only when something is missing: ALTER TABLE takes the
	// ledger's exclusive lock even when its columns exist, and would queue
	// every bootstrap and fan-out of a running fleet behind it on each
	// deploy. When it must run, it gives up after lock_timeout rather
	// than stall them.
	current, err := ledger.New(schema).Current(ctx, pool)
	if err != nil {
		return fmt.Errorf("schema %q: %w", schema, err)
	}
	if !current {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("error starting the ledger's migration in schema %q: %w", schema, err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return fmt.Errorf("error starting the ledger's migration in schema %q: %w", schema, err)
		}
		for _, ddl := range ledger.DDL(schema) {
			if _, err := tx.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("error creating riverslot's ledger table in schema %q (a lock_timeout means bootstraps or fan-outs held it: run Migrate again): %w", schema, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("error committing the ledger's migration in schema %q: %w", schema, err)
		}
	}
	if err := migrateUpstream(ctx, pool, schema); err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error starting the ledger's backfill in schema %q: %w", schema, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if _, _, err := backfillLedger(ctx, tx, schema); err != nil {
		return fmt.Errorf("schema %q: %w", schema, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing the ledger's backfill in schema %q: %w", schema, err)
	}
	return nil
}

// migrateUpstream creates the upstream limiter's tables (Task.Limits) in
// schema when they are missing.
func migrateUpstream(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	// Every table and column this version reads: a table made by an
	// earlier version gets its new columns (the DDL is idempotent).
	current, err := upstream.Current(ctx, pool, schema)
	if err != nil {
		return fmt.Errorf("error looking up the upstream tables in schema %q: %w", schema, err)
	}
	if current {
		return nil
	}
	for _, ddl := range upstream.DDL(schema) {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("error creating riverslot's upstream tables in schema %q: %w", schema, err)
		}
	}
	return nil
}

// Check verifies every task against the database holding its accounts
// (Task.AccountsPool, else River's) before the client starts:
// the table exists and is readable, the id column exists and is uuid, and
// the exact queries the per-slot and sync tiers run (with the filter spliced
// in) are valid; for a weighted task, that Weight is numeric. It never
// writes: the queries are planned with EXPLAIN, and the first-page query
// is run with LIMIT 0 (no rows) to check SELECT permission, all inside a
// read-only transaction that is rolled back. The returned error names the
// task, the field and the fix, for every task at once.
//
// Warnings, not errors, go to Config.Logger (else slog.Default, as Check
// runs before Configure): a missing bucket index or pins tables (run
// CreateIndexes before Check), a Cycle with fewer than 8 slots, whose
// slots each queue a large share of the accounts at once (the warning
// suggests a cycle whose seconds have more factors of 2), slots and
// LateGrace both shorter than River's 5 s scheduler tick (most accounts
// would be enqueued late: raise LateGrace or Cycle; not for a Punctual
// task, whose jobs do not wait for the tick), and a task that
// would keep more than RowBudgetWarn rows in River's job table (RowBudget,
// from the table's pg_class.reltuples estimate and River's
// CompletedJobRetentionPeriod as Configure found it, River's 24 h default
// before Configure). After Configure, Check fails when riverslot's ledger
// table is missing from River's schema (Migrate creates it), and, for a
// task with a rate limit (Limits.Rate or an operator's override), with an
// *UpstreamBudgetError when an upstream's accounts cannot be synced in a
// cycle at its rate (counted per upstream, on a sample of about 2 million
// rows of a larger table, which fails only beyond 25% over the rate and
// warns closer; a table never analyzed is not counted but warned about;
// an upstream whose busiest slot alone needs more is a warning: its syncs
// wait in line).
func (s *Scheduler) Check(ctx context.Context) error {
	var errs []error
	for _, spec := range s.specs {
		s.warnFewSlots(ctx, spec)
		s.warnShortSlots(ctx, spec)
		if err := s.checkTask(ctx, spec); err != nil {
			errs = append(errs, fmt.Errorf("task %q: %w", spec.Name, err))
			continue
		}
		if err := s.checkRowBudget(ctx, spec); err != nil {
			errs = append(errs, fmt.Errorf("task %q: %w", spec.Name, err))
		}
		if err := s.checkUpstreamBudget(ctx, spec); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.checkLedger(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkTable returns an error naming the field and the fix unless the
// task's Table exists and its IDColumn is a uuid column. Check and
// CreateIndexes both run it first.
func checkTable(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, spec *taskspec.Spec) error {
	table := spec.QualifiedTable
	var typ *string
	var found bool
	err := q.QueryRow(ctx, `
		SELECT to_regclass($1) IS NOT NULL,
		       (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		         WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped)`,
		table, spec.IDColumn).Scan(&found, &typ)
	if err != nil {
		return fmt.Errorf("error looking up Table %s: %w", table, err)
	}
	if !found {
		return fmt.Errorf("Table %s does not exist or is not visible to this role; create it, fix Table/Schema, or grant USAGE on its schema", table)
	}
	if typ == nil {
		return fmt.Errorf("IDColumn %q does not exist in Table %s; set IDColumn to the account's uuid column", spec.IDColumn, table)
	}
	if *typ != "uuid" {
		return fmt.Errorf("IDColumn %q of Table %s has type %s; it must be uuid (riverslot buckets accounts by the UUID's last byte)", spec.IDColumn, table, *typ)
	}
	return nil
}

func (s *Scheduler) checkTask(ctx context.Context, spec *taskspec.Spec) error {
	table := spec.QualifiedTable

	tx, err := spec.AccountsDB(s.pool).BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("error starting check transaction on the accounts database: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only, always rolled back

	if err := checkTable(ctx, tx, spec); err != nil {
		return err
	}

	// The exact queries the tiers run, prepared (extended protocol, so a
	// second statement cannot ride along) and planned, not executed.
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"per-slot first page", spec.SQL.FirstPage, []any{0, 1, 1}},
		{"per-slot next page", spec.SQL.NextPage, []any{0, 1, 1, 0, uuid.Nil}},
		{"sync existence check", spec.SQL.Exists, []any{uuid.Nil}},
	} {
		if _, err := tx.Exec(ctx, "EXPLAIN "+q.sql, q.args...); err != nil {
			if spec.Filter != "" {
				return fmt.Errorf("Filter %q is not a valid boolean condition on Table %s (checked in the %s query): %w", spec.Filter, table, q.name, err)
			}
			return fmt.Errorf("error planning the %s query on Table %s: %w", q.name, table, err)
		}
	}
	if spec.Weighted() {
		if err := s.checkWeight(ctx, tx, spec); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, spec.SQL.FirstPage, 0, 255, 0); err != nil {
		return fmt.Errorf("cannot select from Table %s; grant SELECT on it to this role: %w", table, err)
	}

	valid, exists, err := sqlbucket.IndexValid(ctx, tx, spec.Schema, spec.Table, spec.IndexName())
	if err != nil {
		return err
	}
	switch {
	case !exists:
		s.log().WarnContext(ctx, "riverslot: bucket index missing; per-slot selection will scan the whole table. Create it with Scheduler.CreateIndexes or sqlbucket.IndexDDL",
			slog.String("task", spec.Name), slog.Int("buckets", spec.Plan.Buckets), slog.String("ddl", spec.IndexDDL()))
	case !valid:
		s.log().WarnContext(ctx, "riverslot: bucket index is INVALID (a CREATE INDEX CONCURRENTLY failed or was interrupted): PostgreSQL does not use it and per-slot selection will scan the whole table. Scheduler.CreateIndexes drops and rebuilds it",
			slog.String("task", spec.Name), slog.String("index", spec.IndexName()), slog.String("ddl", spec.IndexDDL()))
	}
	return nil
}

// fewSlots is the slot count below which Check warns: a cycle of 4 slots
// queues a quarter of the accounts at once.
const fewSlots = 8

// warnFewSlots warns when spec's cycle has fewer than fewSlots slots, and
// suggests the nearest multiple of 64 s (64 slots or more).
func (s *Scheduler) warnFewSlots(ctx context.Context, spec *taskspec.Spec) {
	if spec.Plan.Slots >= fewSlots {
		return
	}
	suggested := max(64*time.Second, (spec.Plan.Cycle+32*time.Second)/(64*time.Second)*(64*time.Second))
	attrs := []any{slog.String("task", spec.Name), slog.Duration("cycle", spec.Plan.Cycle), slog.Int("slots", spec.Plan.Slots)}
	if plan, err := slotplan.New(suggested); err == nil {
		attrs = append(attrs, slog.Duration("suggested_cycle", suggested), slog.Int("suggested_slots", plan.Slots))
	}
	s.log().WarnContext(ctx, "riverslot: few slots; each slot's accounts are queued at once, a large share of the table. Use a Cycle whose seconds have more factors of 2", attrs...)
}

// riverSchedulerTick is how often River moves scheduled jobs to available
// (River's JobSchedulerInterval default).
const riverSchedulerTick = 5 * time.Second

// warnShortSlots warns when spec's slots are shorter than River's scheduler
// tick and LateGrace is too: a sync job may become available up to a tick
// after its scheduled time, so most accounts would be counted late.
func (s *Scheduler) warnShortSlots(ctx context.Context, spec *taskspec.Spec) {
	if spec.Plan.SlotDuration >= riverSchedulerTick || spec.LateGrace >= riverSchedulerTick || s.punctual[spec.Name] {
		return // a Punctual task's jobs do not wait for the tick
	}
	s.log().WarnContext(ctx, "riverslot: slots are shorter than River's 5 s scheduler tick and LateGrace is too, so most accounts would be enqueued late; set LateGrace to at least 5s or use a longer Cycle",
		slog.String("task", spec.Name), slog.Duration("cycle", spec.Plan.Cycle), slog.Duration("slot", spec.Plan.SlotDuration), slog.Duration("late_grace", spec.LateGrace))
}

// numericTypes are the OIDs of the types a Weight may have: int2, int4,
// int8, float4, float8 and numeric.
var numericTypes = map[uint32]bool{21: true, 23: true, 20: true, 700: true, 701: true, 1700: true}

// checkWeight checks a weighted task's Weight is a numeric expression of
// Table and plans the queries the weighted placement runs; those on the
// pins tables only when the tables exist (CreateIndexes creates them).
func (s *Scheduler) checkWeight(ctx context.Context, tx pgx.Tx, spec *taskspec.Spec) error {
	table := spec.QualifiedTable
	if spec.SeparateAccounts() {
		var replica bool
		if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&replica); err != nil {
			return fmt.Errorf("error asking whether AccountsPool is a replica: %w", err)
		}
		if replica {
			return errors.New("Weight is set but AccountsPool reaches a read replica: a weighted task writes its pins next to the accounts each cycle; give the task the primary's pool as AccountsPool, or remove Weight")
		}
	}
	sd, err := tx.Prepare(ctx, "", "SELECT ("+spec.Weight+") FROM "+table+" WHERE false")
	if err != nil {
		return fmt.Errorf("Weight %q is not a valid expression on Table %s: %w", spec.Weight, table, err)
	}
	if len(sd.Fields) != 1 || !numericTypes[sd.Fields[0].DataTypeOID] {
		return fmt.Errorf("Weight %q on Table %s is not numeric; use a column or expression of type integer, bigint, real, double precision or numeric", spec.Weight, table)
	}
	queries := []struct {
		name string
		sql  string
		args []any
	}{
		{"per-slot weights", spec.Pins.SlotWeights, nil},
		{"heaviest accounts", spec.Pins.Candidates, []any{1}},
		{"accounts of a slot kept for a giant", spec.Pins.RangeAccounts, []any{0, 1}},
	}
	var pinsExist bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
		sqlbucket.QualifiedTable(spec.Schema, taskspec.PinsTable), sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCyclesTable)).Scan(&pinsExist); err != nil {
		return fmt.Errorf("error looking up the pins tables: %w", err)
	}
	if pinsExist {
		if _, err := tx.Exec(ctx, "EXPLAIN "+spec.Pins.Decision, spec.Name, spec.PlanID, time.Time{}); err != nil {
			return fmt.Errorf("the pins table %s lacks this version's columns (fallback, follows); run Scheduler.CreateIndexes to add them: %w",
				sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCyclesTable), err)
		}
		var census bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL", sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCensusTable),
			sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCensusCandidatesTable)).Scan(&census); err != nil {
			return fmt.Errorf("error looking up the weight census table: %w", err)
		}
		if !census {
			return fmt.Errorf("the weight census tables %s and %s are missing (above PinsDirectMax accounts this version computes pins from a census taken ahead of the cycle, and every weighted task prunes it); run Scheduler.CreateIndexes to create them",
				sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCensusTable), sqlbucket.QualifiedTable(spec.Schema, taskspec.PinCensusCandidatesTable))
		}
		pin := []any{spec.Name, spec.PlanID, time.Time{}}
		read := spec.PinRead(spec.Schema)
		queries = append(queries, []struct {
			name string
			sql  string
			args []any
		}{
			{"previous pins", spec.Pins.Previous, pin},
			{"pins of a page", read.PageRange, append(pin, 0, uuid.Nil, 1, uuid.Nil)},
			{"pinned first page", read.PinnedFirstPage, append(pin, 0, 1)},
			{"pinned next page", read.PinnedNextPage, append(pin, 0, 1, uuid.Nil)},
			{"pins of accounts", read.Slots, append(pin, []uuid.UUID{})},
			{"fleet count", spec.Pins.CountUpTo, []any{int64(1)}},
			{"finished weight census", spec.Pins.CensusFinished, pin},
			{"weight census", spec.Pins.CensusLock, pin},
			{"latest weight census", spec.Pins.CensusLatest, pin},
			{"weight census sums", spec.Pins.CensusSums, []any{0, 1}},
			{"weight census step", spec.Pins.CensusSave, append(pin, 0, int64(0), []float64{}, 0.0, 0.0, 0, false)},
			{"weight census candidates", spec.Pins.CensusAdd, append(pin, 0, 1, 0.0, 1)},
			{"weight census fold", spec.Pins.CensusFold, append(pin, 1)},
			{"weight census candidates' current weights", spec.Pins.CensusCurrent, []any{[]uuid.UUID{}, []int32{}}},
			{"weight census read", spec.Pins.CensusRead, pin},
		}...)
	} else {
		s.log().WarnContext(ctx, "riverslot: pins tables missing; the bootstrap of a weighted task fails until Scheduler.CreateIndexes creates them",
			slog.String("task", spec.Name), slog.String("table", sqlbucket.QualifiedTable(spec.Schema, taskspec.PinsTable)))
	}
	for _, q := range queries {
		if _, err := tx.Exec(ctx, "EXPLAIN "+q.sql, q.args...); err != nil {
			return fmt.Errorf("Weight %q or Filter %q is not valid on Table %s (checked in the %s query): %w", spec.Weight, spec.Filter, table, q.name, err)
		}
	}
	return nil
}

// CreateIndexes creates, in the database holding each task's accounts
// (Task.AccountsPool, else River's), the bucket expression index of its
// table (CREATE INDEX CONCURRENTLY IF NOT EXISTS), once per distinct table
// and bucket count (a 65,536-bucket task has its own index), and for
// weighted tasks the pins tables in the task's Schema (see
// Task.Weight), once per schema.
func (s *Scheduler) CreateIndexes(ctx context.Context) error {
	// The tables first: a missing table or a text id column is said with
	// its field and fix, as Check says it, before any DDL runs.
	var errs []error
	for _, spec := range s.specs {
		if err := checkTable(ctx, spec.AccountsDB(s.pool), spec); err != nil {
			errs = append(errs, fmt.Errorf("task %q: %w", spec.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	done := make(map[string]bool)
	for _, spec := range s.specs {
		pool := spec.AccountsDB(s.pool)
		key := fmt.Sprintf("pins:%p:%s", pool, spec.Schema)
		if !spec.Weighted() || done[key] {
			continue
		}
		done[key] = true
		for _, ddl := range taskspec.PinsDDL(spec.Schema) {
			if _, err := pool.Exec(ctx, ddl); err != nil {
				return fmt.Errorf("error creating the pins tables in schema %q: %w", spec.Schema, err)
			}
		}
	}
	for _, spec := range s.specs {
		pool := spec.AccountsDB(s.pool)
		key := fmt.Sprintf("%p:%s.%s/%d", pool, spec.QualifiedTable, spec.QuotedID, spec.Plan.Buckets)
		if done[key] {
			continue
		}
		done[key] = true
		if err := sqlbucket.CreateIndexFor(ctx, pool, spec.Schema, spec.Table, spec.IDColumn, spec.Plan.Buckets); err != nil {
			return err
		}
	}
	return nil
}

// backfillLedger records in the ledger the cycles River's job table still holds
// that the ledger does not (made by a version without the ledger, or
// before it recorded each cycle's decisions), in one transaction:
//   - a completed bootstrap job with per-slot jobs is a bootstrapped cycle
//     (a bootstrap not yet run is left to run: it claims its cycle itself;
//     one that made no per-slot job made no cycle);
//   - every per-slot job is its slot, claimed by it; a completed one
//     finished its fan-out at finalized_at, with the figures of its output;
//   - a cycle row without its decisions gets them from its per-slot jobs'
//     args (placement, pins, cycle end).
//
// It returns the rows added and the cycles completed. What River already
// deleted cannot be recovered: docs/scale.md says what to do then.
func backfillLedger(ctx context.Context, tx pgx.Tx, schema string) (added, completed int64, err error) {
	l := struct{ table, jobs string }{ledger.New(schema).QualifiedTable(), riverjob.QualifiedTable(schema)}
	bootstrapKind, perSlotKind := bootstrap.Kind, perslot.Kind
	tag, err := tx.Exec(ctx, "INSERT INTO "+l.table+" (task, cycle_start, plan, slot, job_id, created_at)"+
		" SELECT DISTINCT ON (1, 2, 3) b.args->>'task', (b.args->>'cycle_start')::timestamptz, b.args->>'plan', $2::int, b.id, b.created_at FROM "+l.jobs+" b"+
		" WHERE b.kind = $1 AND b.state = 'completed' AND coalesce(b.args->>'plan', '') <> '' AND coalesce(b.args->>'task', '') <> ''"+
		// A bootstrap that made its cycle made per-slot jobs; one that
		// completed without (FirstCycleNext, a cycle the ledger already
		// had) made none and is not a cycle.
		" AND EXISTS (SELECT 1 FROM "+l.jobs+" p WHERE p.args @> jsonb_build_object('task', b.args->'task', 'cycle_start', b.args->'cycle_start', 'plan', b.args->'plan') AND p.kind = $3)"+
		" ORDER BY 1, 2, 3, b.id ON CONFLICT DO NOTHING", bootstrapKind, ledger.BootstrapSlot, perSlotKind)
	if err != nil {
		return 0, 0, ledger.StatementError(err, "recording River's bootstrapped cycles in the ledger")
	}
	added = tag.RowsAffected()
	tag, err = tx.Exec(ctx, "INSERT INTO "+l.table+" (task, cycle_start, plan, slot, job_id, created_at, accounts, inserted, skipped, batches, finished_at)"+
		" SELECT DISTINCT ON (1, 2, 3, 4) args->>'task', (args->>'cycle_start')::timestamptz, args->>'plan', (args->>'slot')::int, id, created_at,"+
		" CASE WHEN state = 'completed' THEN (metadata->'"+rivertype.MetadataKeyOutput+"'->>'accounts')::bigint END,"+
		" CASE WHEN state = 'completed' THEN (metadata->'"+rivertype.MetadataKeyOutput+"'->>'inserted')::bigint END,"+
		" CASE WHEN state = 'completed' THEN (metadata->'"+rivertype.MetadataKeyOutput+"'->>'skipped')::bigint END,"+
		" CASE WHEN state = 'completed' THEN (metadata->'"+rivertype.MetadataKeyOutput+"'->>'batches')::int END,"+
		" CASE WHEN state = 'completed' THEN finalized_at END"+
		" FROM "+l.jobs+" WHERE kind = $1 AND coalesce(args->>'plan', '') <> '' AND coalesce(args->>'task', '') <> '' AND args ? 'slot'"+
		" ORDER BY 1, 2, 3, 4, (state = 'completed') DESC, id ON CONFLICT DO NOTHING", perSlotKind)
	if err != nil {
		return 0, 0, ledger.StatementError(err, "recording River's per-slot jobs in the ledger")
	}
	added += tag.RowsAffected()
	tag, err = tx.Exec(ctx, "UPDATE "+l.table+" c SET placement = coalesce(j.args->>'placement', 'hash'), pins = j.args->'pins',"+
		" cycle_end = (j.args->>'cycle_end')::timestamptz"+
		" FROM (SELECT DISTINCT ON (args->>'task', args->>'cycle_start', args->>'plan') args FROM "+l.jobs+
		"  WHERE kind = $1 AND args ? 'placement' ORDER BY args->>'task', args->>'cycle_start', args->>'plan', id) j"+
		" WHERE c.slot = $2 AND c.placement IS NULL AND c.task = j.args->>'task' AND c.cycle_start = (j.args->>'cycle_start')::timestamptz AND c.plan = j.args->>'plan'",
		perSlotKind, ledger.BootstrapSlot)
	if err != nil {
		return 0, 0, ledger.StatementError(err, "recording the cycles' placements in the ledger")
	}
	return added, tag.RowsAffected(), nil
}
