package sqlbucket_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverslottest"
	"github.com/riverslot/riverslot/internal/sqltext"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

func TestExprQuotesIdentifiers(t *testing.T) {
	t.Parallel()

	require.Equal(t, `get_byte(uuid_send("id"), 15)`, sqlbucket.Expr("id"))
	require.Equal(t, `get_byte(uuid_send("we""ird; --"), 15)`, sqlbucket.Expr(`we"ird; --`))
	require.Equal(t, `get_byte(uuid_send("id"), 15) BETWEEN $3 AND $4`, sqlbucket.SlotPredicate("id", 3, 4))
	require.Equal(t,
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket_idx" ON "app"."accounts" ((get_byte(uuid_send("id"), 15)), "id")`,
		sqlbucket.IndexDDL("app", "accounts", "id"))
}

func TestIndexNameFitsPostgresLimit(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("a", 80)
	name := sqlbucket.IndexName(long, "id")
	require.LessOrEqual(t, len(name), 63)
	require.Equal(t, name, sqlbucket.IndexName(long, "id"), "stable")
	require.NotEqual(t, name, sqlbucket.IndexName(long+"b", "id"), "distinct tables get distinct names")
}

func TestBucketMirror(t *testing.T) {
	t.Parallel()

	plan, err := slotplan.New(256 * time.Second) // 256 slots: one bucket each
	require.NoError(t, err)
	require.Equal(t, 0x79, plan.SlotOf(uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479")))
}

// TestPredicatesAgree proves, on real Postgres, that the indexed range
// predicate, the talk's text form and the Go mirror (slotplan.Plan.SlotOf)
// put every one of 10,000 random UUIDs in the same slot, for every valid slot
// count (2 to 256).
func TestPredicatesAgree(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10_000)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))

	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	rangeSQL := "SELECT id FROM " + table + " WHERE " + sqlbucket.SlotPredicate("id", 1, 2)
	textSQL := "SELECT id FROM " + table + " WHERE " + sqltext.SlotPredicate("id", 1, 2)

	selectIDs := func(sql string, args ...any) []uuid.UUID {
		rows, err := pool.Query(ctx, sql, args...)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		return got
	}

	for _, slots := range []int{2, 4, 8, 16, 32, 64, 128, 256} {
		plan, err := slotplan.New(time.Duration(slots) * time.Second)
		require.NoError(t, err)

		rangeSlot := make(map[uuid.UUID]int, len(ids))
		textSlot := make(map[uuid.UUID]int, len(ids))
		for slot := range slots {
			lo, hi := plan.BucketRange(slot)
			for _, id := range selectIDs(rangeSQL, lo, hi) {
				_, dup := rangeSlot[id]
				require.False(t, dup, "range predicate selected %s in two slots", id)
				rangeSlot[id] = slot
			}
			for _, id := range selectIDs(textSQL, plan.BucketsPerSlot, slot) {
				_, dup := textSlot[id]
				require.False(t, dup, "text predicate selected %s in two slots", id)
				textSlot[id] = slot
			}
		}

		require.Len(t, rangeSlot, len(ids), "%d slots: range predicate must select every account once", slots)
		require.Len(t, textSlot, len(ids), "%d slots: text predicate must select every account once", slots)
		for _, id := range ids {
			goSlot := plan.SlotOf(id)
			require.Equal(t, goSlot, rangeSlot[id], "%d slots, id %s: range vs Go mirror", slots, id)
			require.Equal(t, goSlot, textSlot[id], "%d slots, id %s: text vs Go mirror", slots, id)
		}
	}
}

// TestRangePredicateUsesIndex shows the range predicate is sargable on the
// bucket index while the text form is not.
func TestRangePredicateUsesIndex(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 5_000)
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))
	// Idempotent.
	require.NoError(t, sqlbucket.CreateIndex(ctx, pool, schema, "accounts", "id"))

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "accounts"}.Sanitize())
	require.NoError(t, err)

	explain := func(sql string, args ...any) string {
		rows, err := conn.Query(ctx, "EXPLAIN "+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}

	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	plan := explain("SELECT id FROM "+table+" WHERE "+sqlbucket.SlotPredicate("id", 1, 2), 0, 1)
	require.Contains(t, plan, sqlbucket.IndexName("accounts", "id"), "range predicate must use the bucket index:\n%s", plan)

	textPlan := explain("SELECT id FROM "+table+" WHERE "+sqltext.SlotPredicate("id", 1, 2), 2, 0)
	require.NotContains(t, textPlan, sqlbucket.IndexName("accounts", "id"), "text predicate unexpectedly used the index:\n%s", textPlan)
	require.Contains(t, textPlan, "Seq Scan")
}

func TestCreateIndexErrorNamesTable(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	err := sqlbucket.CreateIndex(ctx, pool, "no_such_schema_x", "accounts", "id")
	require.ErrorContains(t, err, `error creating bucket index on "no_such_schema_x"."accounts"(id)`)
}
