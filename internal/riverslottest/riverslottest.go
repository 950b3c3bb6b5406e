// Package riverslottest holds test helpers shared by riverslot's packages:
// the test database, a fresh schema per test, and seeded account tables.
// It is internal: users must not rely on it.
package riverslottest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"
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
		config.MaxConns = 30 // make test runs packages one at a time; worker processes add their own
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

// Schema creates a fresh schema with River's tables migrated into it, and
// drops it when the test ends. Tests that each use their own schema can run
// in parallel.
func Schema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()

	schema := EmptySchema(ctx, tb, pool)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	require.NoError(tb, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(tb, err)
	return schema
}

// EmptySchema creates a fresh schema without River's tables.
func EmptySchema(ctx context.Context, tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "riverslot_test_" + hex.EncodeToString(b[:])
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(tb, err)
	tb.Cleanup(func() {
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
// warnings and errors to stderr, the rest dropped.
func Logger(testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// StartClient starts a River client on pool for a test (schema, queues and
// workers from config; Logger defaults to Logger, TestOnly is set) and
// stops it when the test ends. The channel receives every job that
// completes, is cancelled or fails.
func StartClient(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, config *river.Config) (*river.Client[pgx.Tx], <-chan *river.Event) {
	tb.Helper()

	if config.Logger == nil {
		config.Logger = Logger(tb)
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
