package sqlbucket_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/sqltext"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
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

func TestTwoByteSQL(t *testing.T) {
	t.Parallel()

	const two = slotplan.BucketsTwoByte
	require.Equal(t, `(get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))`, sqlbucket.ExprFor("id", two))
	require.Equal(t, sqlbucket.Expr("id"), sqlbucket.ExprFor("id", slotplan.Buckets))
	require.Equal(t, `(get_byte(uuid_send("we""ird"), 15) * 256 + get_byte(uuid_send("we""ird"), 14)) BETWEEN $1 AND $2`, sqlbucket.SlotPredicateFor(`we"ird`, two, 1, 2))
	require.Equal(t, "accounts_id_riverslot_bucket2_idx", sqlbucket.IndexNameFor("accounts", "id", two))
	require.Equal(t, sqlbucket.IndexName("accounts", "id"), sqlbucket.IndexNameFor("accounts", "id", slotplan.Buckets))
	require.Equal(t,
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket2_idx" ON "app"."accounts" (((get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))), "id")`,
		sqlbucket.IndexDDLFor("app", "accounts", "id", two))
	long := strings.Repeat("a", 80)
	require.LessOrEqual(t, len(sqlbucket.IndexNameFor(long, "id", two)), 63)
	require.NotEqual(t, sqlbucket.IndexName(long, "id"), sqlbucket.IndexNameFor(long, "id", two))
	require.Panics(t, func() { sqlbucket.ExprFor("id", 4096) })
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

// TestTwoBytePredicateAgrees proves, on real Postgres, that the two-byte
// range predicate and the Go mirror (slotplan.Plan.SlotOf with 65,536
// buckets) put every one of 10,000 random UUIDs in the same slot, for slot
// counts from 16 to 65,536, and that the bucket Postgres computes equals
// the UUID text's last two hex digits followed by the two before them, read
// as a 16-bit number by Postgres itself (an independent form of the same
// definition).
func TestTwoBytePredicateAgrees(t *testing.T) {
	t.Parallel()

	const two = slotplan.BucketsTwoByte
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	ids := riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10_000)
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, pool, schema, "accounts", "id", two))
	table := pgx.Identifier{schema, "accounts"}.Sanitize()

	var differ int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+sqlbucket.ExprFor("id", two)+
		" <> ('x' || right(id::text, 2) || left(right(id::text, 4), 2))::bit(16)::int").Scan(&differ))
	require.Zero(t, differ, "two-byte expression vs the UUID text's last two hex digits, then the two before them")

	rangeSQL := "SELECT id FROM " + table + " WHERE " + sqlbucket.SlotPredicateFor("id", two, 1, 2)
	for _, cycle := range []time.Duration{16 * time.Second, 64 * time.Second, 24 * time.Hour, 65536 * time.Second} {
		plan, err := slotplan.NewBuckets(cycle, two)
		require.NoError(t, err)

		// Bucket ranges of consecutive slots, read in chunks of slots so
		// 65,536 slots cost 64 queries, not 65,536.
		chunk := max(1, plan.Slots/64)
		got := make(map[uuid.UUID]int, len(ids))
		for first := 0; first < plan.Slots; first += chunk {
			lo, _ := plan.BucketRange(first)
			_, hi := plan.BucketRange(first + chunk - 1)
			rows, err := pool.Query(ctx, "SELECT id, "+sqlbucket.ExprFor("id", two)+" FROM ("+rangeSQL+") s JOIN "+table+" USING (id)", lo, hi)
			require.NoError(t, err)
			var (
				id     uuid.UUID
				bucket int
			)
			_, err = pgx.ForEachRow(rows, []any{&id, &bucket}, func() error {
				_, dup := got[id]
				require.False(t, dup, "range predicate selected %s twice", id)
				got[id] = bucket / plan.BucketsPerSlot
				return nil
			})
			require.NoError(t, err)
		}
		require.Len(t, got, len(ids), "%d slots: range predicate must select every account once", plan.Slots)
		for _, id := range ids {
			require.Equal(t, plan.SlotOf(id), got[id], "%d slots, id %s: Postgres vs Go mirror", plan.Slots, id)
		}
	}
}

// TestTwoByteRangeUsesIndex shows the two-byte range predicate is sargable
// on its index under a generic plan (plan_cache_mode = force_generic_plan,
// as a prepared statement run many times is planned): the bounds are
// parameters, not constants the planner could fold.
func TestTwoByteRangeUsesIndex(t *testing.T) {
	t.Parallel()

	const two = slotplan.BucketsTwoByte
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 5_000)
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, pool, schema, "accounts", "id", two))
	require.NoError(t, sqlbucket.CreateIndexFor(ctx, pool, schema, "accounts", "id", two)) // idempotent

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	_, err = conn.Exec(ctx, "ANALYZE "+table)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	defer conn.Exec(ctx, "RESET plan_cache_mode") //nolint:errcheck

	// A prepared statement, explained with its parameters: under
	// force_generic_plan the plan cannot depend on the bounds' values.
	explain := func(sql string, args string) string {
		_, err := conn.Exec(ctx, "DEALLOCATE ALL")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "PREPARE slot_page AS "+sql)
		require.NoError(t, err)
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE slot_page("+args+")", pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	// The per-slot keyset page: range, keyset position, order and limit.
	bucket := sqlbucket.ExprFor("id", two)
	page := "SELECT id, " + bucket + " FROM " + table + " WHERE " + sqlbucket.SlotPredicateFor("id", two, 1, 2) +
		" AND (" + bucket + ", id) > ($4::int, $5::uuid) ORDER BY " + bucket + ", id LIMIT $3"
	for _, q := range []struct{ sql, args string }{
		{"SELECT id FROM " + table + " WHERE " + sqlbucket.SlotPredicateFor("id", two, 1, 2), "0, 63"},
		{page, "0, 63, 100, 0, '00000000-0000-0000-0000-000000000000'"},
	} {
		plan := explain(q.sql, q.args)
		require.Contains(t, plan, "Index", "two-byte range predicate must use an index:\n%s", plan)
		require.Contains(t, plan, sqlbucket.IndexNameFor("accounts", "id", two), "two-byte range predicate must use its bucket index:\n%s", plan)
		require.NotContains(t, plan, "Seq Scan", "\n%s", plan)
		require.Contains(t, plan, "$1", "the plan must be generic (bounds as parameters):\n%s", plan)
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

// TestCreateIndexRebuildsInvalid: an INVALID bucket index (what a failed or
// interrupted CREATE INDEX CONCURRENTLY leaves; marked so here through
// pg_index, as PostgreSQL marks it) is reported by IndexValid and rebuilt
// by CreateIndexFor, which IF NOT EXISTS alone would keep as it is.
func TestCreateIndexRebuildsInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 100)
	name := sqlbucket.IndexNameFor("accounts", "id", slotplan.BucketsTwoByte)

	valid, exists, err := sqlbucket.IndexValid(ctx, pool, schema, "accounts", name)
	require.NoError(t, err)
	require.False(t, exists)
	require.False(t, valid)

	require.NoError(t, sqlbucket.CreateIndexFor(ctx, pool, schema, "accounts", "id", slotplan.BucketsTwoByte))
	_, err = pool.Exec(ctx, "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass", sqlbucket.QualifiedTable(schema, name))
	require.NoError(t, err)
	valid, exists, err = sqlbucket.IndexValid(ctx, pool, schema, "accounts", name)
	require.NoError(t, err)
	require.True(t, exists)
	require.False(t, valid, "reported INVALID")

	require.NoError(t, sqlbucket.CreateIndexFor(ctx, pool, schema, "accounts", "id", slotplan.BucketsTwoByte))
	valid, exists, err = sqlbucket.IndexValid(ctx, pool, schema, "accounts", name)
	require.NoError(t, err)
	require.True(t, exists)
	require.True(t, valid, "rebuilt valid")
}
