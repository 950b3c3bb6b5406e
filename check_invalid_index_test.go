package riverslot_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

const invalidIndex = "riverslot: bucket index is INVALID (a CREATE INDEX CONCURRENTLY failed or was interrupted): PostgreSQL does not use it and per-slot selection will scan the whole table. Scheduler.CreateIndexes drops and rebuilds it"

// TestCheckInvalidIndex: a bucket index left INVALID (as by a failed
// CREATE INDEX CONCURRENTLY) is reported by Scheduler.Check as a warning
// naming the task, the index and its DDL (not as missing), and
// Scheduler.CreateIndexes drops and rebuilds it: a new, valid index, which
// Check no longer reports.
func TestCheckInvalidIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 100)
	name := sqlbucket.IndexNameFor("accounts", "id", slotplan.Buckets)
	qualified := sqlbucket.QualifiedTable(schema, name)

	task := validTask()
	task.Schema = schema
	logger, records := riverslottest.RecordingLogger(slog.LevelWarn)
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{task}, Logger: logger})
	require.NoError(t, err)

	index := func() (oid uint32, valid bool) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, "SELECT indexrelid::oid, indisvalid FROM pg_index WHERE indexrelid = $1::regclass", qualified).Scan(&oid, &valid))
		return oid, valid
	}

	require.NoError(t, s.CreateIndexes(ctx))
	_, err = pool.Exec(ctx, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass", qualified)
	require.NoError(t, err)
	broken, valid := index()
	require.False(t, valid)

	require.NoError(t, s.Check(ctx), "an INVALID index is a warning")
	warned := records.Find(invalidIndex)
	require.Len(t, warned, 1)
	require.Equal(t, "WARN", warned[0]["level"].String())
	require.Equal(t, "transactions", warned[0]["task"].String())
	require.Equal(t, name, warned[0]["index"].String())
	require.Equal(t, sqlbucket.IndexDDLFor(schema, "accounts", "id", slotplan.Buckets), warned[0]["ddl"].String())
	require.Empty(t, records.Find(missingIndex), "INVALID, not missing")

	require.NoError(t, s.CreateIndexes(ctx))
	rebuilt, valid := index()
	require.True(t, valid, "CreateIndexes rebuilt the index valid")
	require.NotEqual(t, broken, rebuilt, "dropped and built again, not kept")

	require.NoError(t, s.Check(ctx))
	require.Len(t, records.Find(invalidIndex), 1, "no new warning once rebuilt")
	require.Empty(t, records.Find(missingIndex))
}
