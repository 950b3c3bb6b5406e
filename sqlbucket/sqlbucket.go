package sqlbucket

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxIdentifierLength is Postgres' NAMEDATALEN - 1.
const maxIdentifierLength = 63

// Expr returns the bucket expression for the UUID column, with the column
// name quoted: get_byte(uuid_send("id"), 15). Its Go mirror is
// slotplan.Plan.SlotOf, which reads the same byte.
func Expr(column string) string {
	return "get_byte(uuid_send(" + pgx.Identifier{column}.Sanitize() + "), 15)"
}

// SlotPredicate returns the sargable predicate selecting one slot's accounts,
// with the slot's inclusive bucket bounds as bind parameters $loParam and
// $hiParam (see slotplan.Plan.BucketRange):
//
//	get_byte(uuid_send("id"), 15) BETWEEN $1 AND $2
func SlotPredicate(column string, loParam, hiParam int) string {
	return Expr(column) + " BETWEEN $" + strconv.Itoa(loParam) + " AND $" + strconv.Itoa(hiParam)
}

// IndexName returns the name IndexDDL gives the bucket index of table.column:
// "<table>_<column>_riverslot_bucket_idx", shortened to Postgres' 63-byte
// limit with a stable hash suffix when it would be longer.
func IndexName(table, column string) string {
	name := table + "_" + column + "_riverslot_bucket_idx"
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
	return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " + pgx.Identifier{IndexName(table, column)}.Sanitize() +
		" ON " + QualifiedTable(schema, table) +
		" ((" + Expr(column) + "), " + pgx.Identifier{column}.Sanitize() + ")"
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
	if _, err := db.Exec(ctx, IndexDDL(schema, table, column)); err != nil {
		return fmt.Errorf("error creating bucket index on %s(%s): %w", QualifiedTable(schema, table), column, err)
	}
	return nil
}
