package sqlbucket

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/slotplan"
)

// maxIdentifierLength is Postgres' NAMEDATALEN - 1.
const maxIdentifierLength = 63

// Expr returns the one-byte bucket expression (256 buckets) for the UUID
// column, with the column name quoted: get_byte(uuid_send("id"), 15). Its
// Go mirror is slotplan.Plan.BucketOf, which reads the same byte.
func Expr(column string) string {
	return ExprFor(column, slotplan.Buckets)
}

// ExprFor returns the bucket expression for the UUID column among buckets
// (slotplan.Buckets or slotplan.BucketsTwoByte), with the column name
// quoted. With 256 buckets it is Expr; with 65,536 the last byte is the
// high part and byte 14 the low part:
//
//	(get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))
//
// Its Go mirror is slotplan.BucketOf. Any other bucket count panics, a
// programming error (slotplan.NewBuckets refuses it).
func ExprFor(column string, buckets int) string {
	id := pgx.Identifier{column}.Sanitize()
	switch buckets {
	case slotplan.Buckets:
		return "get_byte(uuid_send(" + id + "), 15)"
	case slotplan.BucketsTwoByte:
		return "(get_byte(uuid_send(" + id + "), 15) * 256 + get_byte(uuid_send(" + id + "), 14))"
	}
	panic(fmt.Sprintf("sqlbucket: %d buckets; want %d or %d", buckets, slotplan.Buckets, slotplan.BucketsTwoByte))
}

// SlotPredicate returns the sargable predicate selecting one slot's accounts
// among 256 buckets, with the slot's inclusive bucket bounds as bind
// parameters $loParam and $hiParam (see slotplan.Plan.BucketRange):
//
//	get_byte(uuid_send("id"), 15) BETWEEN $1 AND $2
func SlotPredicate(column string, loParam, hiParam int) string {
	return SlotPredicateFor(column, slotplan.Buckets, loParam, hiParam)
}

// SlotPredicateFor is SlotPredicate among buckets (see ExprFor); the index
// IndexDDLFor creates for the same bucket count serves it.
func SlotPredicateFor(column string, buckets, loParam, hiParam int) string {
	return ExprFor(column, buckets) + " BETWEEN $" + strconv.Itoa(loParam) + " AND $" + strconv.Itoa(hiParam)
}

// IndexName returns the name IndexDDL gives the bucket index of table.column:
// "<table>_<column>_riverslot_bucket_idx", shortened to Postgres' 63-byte
// limit with a stable hash suffix when it would be longer.
func IndexName(table, column string) string {
	return IndexNameFor(table, column, slotplan.Buckets)
}

// IndexNameFor returns the name IndexDDLFor gives the bucket index of
// table.column among buckets: IndexName's for 256 buckets,
// "<table>_<column>_riverslot_bucket2_idx" for 65,536 (a table can carry
// both while its tasks move from one to the other), shortened the same way.
func IndexNameFor(table, column string, buckets int) string {
	name := table + "_" + column + "_riverslot_bucket_idx"
	if buckets == slotplan.BucketsTwoByte {
		name = table + "_" + column + "_riverslot_bucket2_idx"
	}
	if len(name) <= maxIdentifierLength {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	suffix := fmt.Sprintf("_%08x_rsb_idx", h.Sum32())
	return name[:maxIdentifierLength-len(suffix)] + suffix
}

// IndexDDL returns the statement that creates the bucket expression index on
// schema.table(column); an empty schema leaves the table unqualified (found
// through search_path). Every identifier is quoted.
//
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket_idx"
//	    ON "public"."accounts" ((get_byte(uuid_send("id"), 15)), "id")
//
// The trailing id column makes the index cover the per-slot keyset scan.
// CONCURRENTLY cannot run inside a transaction block; run it on its own, as
// CreateIndex does.
func IndexDDL(schema, table, column string) string {
	return IndexDDLFor(schema, table, column, slotplan.Buckets)
}

// IndexDDLFor is IndexDDL for the bucket expression among buckets (see
// ExprFor). With 65,536 buckets:
//
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket2_idx"
//	    ON "public"."accounts" (((get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))), "id")
func IndexDDLFor(schema, table, column string, buckets int) string {
	return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + pgx.Identifier{IndexNameFor(table, column, buckets)}.Sanitize() +
		" ON " + QualifiedTable(schema, table) +
		" ((" + ExprFor(column, buckets) + "), " + pgx.Identifier{column}.Sanitize() + ")"
}

// QualifiedTable returns the quoted, optionally schema-qualified table name.
func QualifiedTable(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// Execer is the subset of pgx.Conn / pgxpool.Pool that CreateIndex needs.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// CreateIndex runs IndexDDL. It must be given a connection or pool, not a
// transaction. On a large table it takes as long as one pass over the table
// but does not block writes.
func CreateIndex(ctx context.Context, db Execer, schema, table, column string) error {
	return CreateIndexFor(ctx, db, schema, table, column, slotplan.Buckets)
}

// CreateIndexFor runs IndexDDLFor, like CreateIndex. When db can also
// query (a pool or connection does) and the index exists but is INVALID
// (a CREATE INDEX CONCURRENTLY that failed or was interrupted leaves one
// behind, which PostgreSQL never uses and IF NOT EXISTS would keep), it is
// dropped concurrently first and built again.
func CreateIndexFor(ctx context.Context, db Execer, schema, table, column string, buckets int) error {
	name := IndexNameFor(table, column, buckets)
	if q, ok := db.(Queryer); ok {
		valid, exists, err := IndexValid(ctx, q, schema, table, name)
		if err != nil {
			return err
		}
		if exists && !valid {
			if _, err := db.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+QualifiedTable(schema, name)); err != nil {
				return fmt.Errorf("error dropping the INVALID bucket index %s to rebuild it: %w", QualifiedTable(schema, name), err)
			}
		}
	}
	if _, err := db.Exec(ctx, IndexDDLFor(schema, table, column, buckets)); err != nil {
		return fmt.Errorf("error creating bucket index on %s(%s): %w", QualifiedTable(schema, table), column, err)
	}
	return nil
}

// Queryer reads one row: a pool, connection or transaction.
type Queryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// IndexValid reports whether the index name on schema.table exists and
// whether PostgreSQL marks it valid (usable by queries).
func IndexValid(ctx context.Context, q Queryer, schema, table, name string) (valid, exists bool, err error) {
	err = q.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = to_regclass($1) AND c.relname = $2`, QualifiedTable(schema, table), name).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("error looking up bucket index %s: %w", name, err)
	}
	return valid, true, nil
}
