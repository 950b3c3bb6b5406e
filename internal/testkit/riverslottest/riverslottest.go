// Package riverslottest holds test helpers shared by riverslot's packages:
// the test database, a fresh schema per test, and seeded account tables.
// It is internal: users must not rely on it.
package riverslottest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/measure"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
)

// DefaultDatabaseURL is the test database `make test` prepares.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/riverslot_test?sslmode=disable"

// DatabaseURL returns TEST_DATABASE_URL, else DefaultDatabaseURL.
func DatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

var (
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

// Pool returns a pool on the test database shared by the whole test binary.
// When Postgres cannot be reached the test fails, saying how to get one.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()

	poolOnce.Do(func() {
		config, err := pgxpool.ParseConfig(DatabaseURL())
		if err != nil {
			poolErr = err
			return
		}
		config.MaxConns = poolConns // worker processes and in-process commands reserve their own: ReserveConnections
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, poolErr = pgxpool.NewWithConfig(ctx, config)
		if poolErr == nil {
			poolErr = pool.Ping(ctx)
		}
	})
	if poolErr != nil {
		tb.Fatalf("cannot reach the test database at %s: %v\n"+
			"Run the tests with `make test`, which starts or finds a PostgreSQL and creates the database,\n"+
			"or point TEST_DATABASE_URL at a PostgreSQL you can create schemas in.", DatabaseURL(), poolErr)
	}
	return pool
}

var (
	accountsOnce sync.Once
	accountsPool *pgxpool.Pool
	accountsURL  string
	accountsErr  error
)

// AccountsPool returns a pool on a second database beside the test
// database, named after it with the suffix "_accounts" (created if missing,
// idempotently), for tests of accounts kept apart from River's database
// (Task.AccountsPool), and its URL. It is shared by the whole test binary;
// tests isolate themselves with their own schema in it.
func AccountsPool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()

	river := Pool(tb)
	accountsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		config, err := pgxpool.ParseConfig(DatabaseURL())
		if err != nil {
			accountsErr = err
			return
		}
		name := config.ConnConfig.Database + "_accounts"
		if _, err := river.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			// Another test binary may have created it first.
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || (pgErr.Code != "42P04" && pgErr.Code != "23505") {
				accountsErr = fmt.Errorf("error creating database %s: %w", name, err)
				return
			}
		}
		u, err := url.Parse(DatabaseURL())
		if err != nil {
			accountsErr = err
			return
		}
		u.Path = "/" + name
		accountsURL = u.String()
		if config, err = pgxpool.ParseConfig(accountsURL); err != nil {
			accountsErr = err
			return
		}
		config.MaxConns = accountsConns
		accountsPool, accountsErr = NewPool(ctx, config)
	})
	require.NoError(tb, accountsErr, "the accounts database beside %s", DatabaseURL())
	return accountsPool, accountsURL
}

// Schema creates a fresh schema with River's tables migrated into it (and
// riverslot's ledger and upstream tables, as riverslot.Migrate creates
// them), and drops it when
// the test ends. Tests that each use their own schema can run
// in parallel.
func Schema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()

	schema := EmptySchema(ctx, tb, pool)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	require.NoError(tb, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(tb, err)
	for _, ddl := range append(ledger.DDL(schema), upstream.DDL(schema)...) {
		_, err = pool.Exec(ctx, ddl)
		require.NoError(tb, err)
	}
	return schema
}

// EmptySchema creates a fresh schema without River's tables. It is dropped
// when the test ends, unless the test failed and RIVERSLOT_TEST_KEEP_FAILED
// is set (to look at its tables).
func EmptySchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "riverslot_test_" + hex.EncodeToString(b[:])
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(tb, err)
	tb.Cleanup(func() {
		if tb.Failed() && os.Getenv("RIVERSLOT_TEST_KEEP_FAILED") != "" {
			tb.Logf("RIVERSLOT_TEST_KEEP_FAILED: keeping schema %s of the failed test", schema)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("error dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// CreateAccounts creates schema.table with a uuid primary key "id" and a
// boolean "active" column, inserts n random UUIDv4 accounts (all active) with
// COPY, and returns their ids.
func CreateAccounts(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema, table string, n int) []uuid.UUID {
	tb.Helper()

	qualified := pgx.Identifier{schema, table}.Sanitize()
	_, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true)", qualified))
	require.NoError(tb, err)
	return InsertAccounts(ctx, tb, pool, schema, table, n)
}

// InsertAccounts adds n random active accounts to an existing table.
func InsertAccounts(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema, table string, n int) []uuid.UUID {
	tb.Helper()

	ids := make([]uuid.UUID, n)
	rows := make([][]any, n)
	for i := range ids {
		ids[i] = uuid.New()
		rows[i] = []any{ids[i], true}
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{schema, table}, []string{"id", "active"}, pgx.CopyFromRows(rows))
	require.NoError(tb, err)
	return ids
}

// Logger returns a logger for River clients and riverslot workers in tests:
// warnings and errors written through tb.Log (shown with the failing test or
// with -v), the rest dropped. Lines logged after the test ended are dropped.
func Logger(tb testing.TB) *slog.Logger {
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct {
	tb   testing.TB
	done atomic.Bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// Spec returns a task spec for tier tests, built by hand as a fixture (apps
// get theirs from riverslot.New): task name over schema.table(id) with
// filter, cycle, no lead, batches of batchSize, syncs in the default queue.
func Spec(tb testing.TB, name, schema, table, filter string, cycle time.Duration, batchSize int) *taskspec.Spec {
	tb.Helper()
	return SpecBuckets(tb, name, schema, table, filter, cycle, batchSize, slotplan.Buckets)
}

// SpecBuckets is Spec with buckets buckets (slotplan.Buckets or
// slotplan.BucketsTwoByte).
func SpecBuckets(tb testing.TB, name, schema, table, filter string, cycle time.Duration, batchSize, buckets int) *taskspec.Spec {
	tb.Helper()

	plan, err := slotplan.NewBuckets(cycle, buckets)
	require.NoError(tb, err)
	schedule, err := slotplan.NewSchedule(cycle, 0, nil)
	require.NoError(tb, err)
	require.NoError(tb, taskspec.CheckFilter(filter))
	seed := slotplan.SeedFromName(name)
	spec := &taskspec.Spec{
		Name: name, Plan: plan, Schedule: schedule, Seed: seed,
		Schema: schema, Table: table, IDColumn: "id", Filter: filter,
		BatchSize: batchSize, LatePolicy: taskspec.LatePolicySpread, LateGrace: plan.SlotDuration,
		PerSlotTimeout: time.Minute, SyncTimeout: time.Minute,
		ControlQueue: river.QueueDefault, ControlPriority: 1,
		SyncOpts: river.InsertOpts{Queue: river.QueueDefault, Priority: 2, MaxAttempts: 5},
	}
	spec.SetKey(taskspec.KeyOf(plan, seed, 0))
	spec.BuildSQL()
	return spec
}

// WaitFor polls cond every 100 ms until it is true, failing the test after
// timeout. It waits for a condition the test then asserts on; it is not a
// sleep standing in for one.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()

	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Count runs a count query and returns its result.
func Count(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	tb.Helper()

	var n int64
	require.NoError(tb, pool.QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

// StartClient starts a River client on pool for a test (schema, queues and
// workers from config; Logger defaults to Logger, TestOnly is set) and
// stops it when the test ends. The channel receives every job that
// completes, is cancelled or fails.
func StartClient(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, config *river.Config) (*river.Client[pgx.Tx], <-chan *river.Event) {
	tb.Helper()

	if config.Logger == nil {
		config.Logger = LockLogger(tb, pool)
	}
	config.TestOnly = true
	client, err := river.NewClient(riverpgxv5.New(pool), config)
	require.NoError(tb, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	require.NoError(tb, client.Start(ctx))
	tb.Cleanup(func() {
		require.NoError(tb, client.Stop(context.Background()))
		cancel()
	})
	return client, events
}

// PanicTB returns a testing.TB for Example functions, which have no *testing.T:
// failures panic with the message, cleanups are not run (examples clean up
// themselves).
func PanicTB() testing.TB { return panicTB{} }

type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Cleanup(func())                    {}
func (panicTB) Logf(string, ...any)               {}
func (panicTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (panicTB) FailNow()                          { panic("test helper failed") }

// RunTests is TestMain for packages that start River clients: it runs the
// tests, then fails the run if any goroutine is left running (goleak), the
// pgx pool shared by the test binary excepted.
func RunTests(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
			// An idle pooled connection's background reader, left blocked
			// after a large write (COPY) until the connection is next used
			// or closed.
			goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Records collects log records, for tests that assert what was logged.
type Records struct {
	mu      sync.Mutex
	records []slog.Record
}

// RecordingLogger returns a logger that keeps every record at level and
// above.
func RecordingLogger(level slog.Level) (*slog.Logger, *Records) {
	r := &Records{}
	return slog.New(&recordingHandler{records: r, level: level}), r
}

// Find returns the attributes of every record with message msg.
func (r *Records) Find(msg string) []map[string]slog.Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]slog.Value
	for _, rec := range r.records {
		if rec.Message != msg {
			continue
		}
		attrs := map[string]slog.Value{"level": slog.StringValue(rec.Level.String())}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// Each calls f with the message and attributes of every record, in order.
func (r *Records) Each(f func(msg string, attrs map[string]slog.Value)) {
	r.mu.Lock()
	records := slices.Clone(r.records)
	r.mu.Unlock()
	for _, rec := range records {
		attrs := map[string]slog.Value{"level": slog.StringValue(rec.Level.String())}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value
			return true
		})
		f(rec.Message, attrs)
	}
}

type recordingHandler struct {
	records *Records
	level   slog.Level
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordingHandler) Handle(_ context.Context, rec slog.Record) error {
	h.records.mu.Lock()
	h.records.records = append(h.records.records, rec.Clone())
	h.records.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// SyncedTableDDL is the table RecordSync writes to, which the riverslot
// worker command's --record also fills.
const SyncedTableDDL = measure.SyncedTableDDL

// CreateSyncedTable creates schema.synced, empty: a table the demo made
// (riverslot demo records its own syncs there) is replaced, so that what the
// test reads afterwards is what ran after this call (the tests call it once
// the demo is killed, before a worker finishes the cycle).
func CreateSyncedTable(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	table := pgx.Identifier{schema, "synced"}.Sanitize()
	_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+table)
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" "+SyncedTableDDL)
	require.NoError(tb, err)
}

// RecordSync returns a sync function that records each call in
// schema.synced through pool.
func RecordSync(pool *pgxpool.Pool, schema string) func(ctx context.Context, accountID uuid.UUID, job *river.Job[syncjob.Args]) error {
	table := pgx.Identifier{schema, "synced"}.Sanitize()
	return func(ctx context.Context, accountID uuid.UUID, job *river.Job[syncjob.Args]) error {
		ctx, cancel := measure.RecordContext(ctx)
		defer cancel()
		_, err := pool.Exec(ctx, "INSERT INTO "+table+" (task, account_id, cycle_start) VALUES ($1, $2, $3)",
			job.Args.Task, accountID, job.Args.CycleStart)
		return err
	}
}

// NewPool opens a pool with cfg and checks it can reach the server.
func NewPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// Key returns the plan key of planID (riverslot.TaskInfo.PlanID), for job
// args a test builds by hand.
func Key(tb testing.TB, planID string) taskspec.PlanKey {
	tb.Helper()
	k, err := taskspec.ParsePlanKey(planID)
	require.NoError(tb, err)
	return k
}

// CountOutcomes adds n outcomes o (with lateness, for OutcomeSynced) to the
// ledger row of the task's cycle at start under plan, as the sync workers
// that ended n such jobs would have: for tests that finish sync jobs by
// hand instead of running them.
func CountOutcomes(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema, task, plan string, start time.Time, o ledger.Outcome, n int, lateness time.Duration) {
	tb.Helper()
	tally := ledger.Tally{Exec: func(ctx context.Context, sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}}
	for range n {
		tally.Add(schema, ledger.CycleKey{Task: task, Plan: plan, Start: start}, o, lateness)
	}
	if err := tally.Flush(ctx); err != nil {
		tb.Fatalf("counting outcomes in the ledger: %v", err)
	}
}

// LockLogger is Logger, and more: when River logs a warning or an error
// of a statement that timed out (a query's deadline exceeded, a statement
// cancelled), it logs the database's sessions that are not idle, each with
// what it waits for and the pids that block it, so that a test that sees
// River's scheduler time out on FOR UPDATE shows who held the rows (at
// most 5 such reports, 10 s apart).
func LockLogger(tb testing.TB, pool *pgxpool.Pool) *slog.Logger {
	w := &tbWriter{tb: tb}
	tb.Cleanup(func() { w.done.Store(true) })
	base := slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(&lockHandler{Handler: base, dump: &lockDump{pool: pool, log: slog.New(base)}})
}

type lockDump struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	mu   sync.Mutex
	n    int
	last time.Time
}

type lockHandler struct {
	slog.Handler
	dump *lockDump
}

func (h *lockHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		text := r.Message
		r.Attrs(func(a slog.Attr) bool {
			text += " " + a.Value.String()
			return true
		})
		if strings.Contains(text, "deadline exceeded") || strings.Contains(text, "canceling statement") || strings.Contains(text, "timeout") {
			go h.dump.report(text)
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *lockHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lockHandler{Handler: h.Handler.WithAttrs(attrs), dump: h.dump}
}

func (h *lockHandler) WithGroup(name string) slog.Handler {
	return &lockHandler{Handler: h.Handler.WithGroup(name), dump: h.dump}
}

func (d *lockDump) report(cause string) {
	d.mu.Lock()
	if d.n >= 5 || time.Since(d.last) < 10*time.Second {
		d.mu.Unlock()
		return
	}
	d.n++
	d.last = time.Now()
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := d.pool.Query(ctx, `SELECT a.pid, a.state, coalesce(a.wait_event_type || ':' || a.wait_event, ''), pg_blocking_pids(a.pid)::text,
	coalesce(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric(10,1)::text, ''), left(regexp_replace(a.query, '\s+', ' ', 'g'), 300)
FROM pg_stat_activity a WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state <> 'idle' ORDER BY a.xact_start NULLS LAST`)
	if err != nil {
		d.log.Warn("riverslottest: could not read the sessions after a timeout", slog.String("error", err.Error()))
		return
	}
	var lines []string
	var (
		pid                               int
		state, wait, blockers, age, query string
	)
	_, err = pgx.ForEachRow(rows, []any{&pid, &state, &wait, &blockers, &age, &query}, func() error {
		lines = append(lines, fmt.Sprintf("pid %d %s wait=%s blocked_by=%s xact_age=%ss: %s", pid, state, wait, blockers, age, query))
		return nil
	})
	if err != nil {
		lines = append(lines, "error: "+err.Error())
	}
	d.log.Warn("riverslottest: sessions after a statement timed out ("+cause+")", slog.String("sessions", strings.Join(lines, "\n")))
}
