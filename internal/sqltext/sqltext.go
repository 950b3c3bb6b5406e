// Package sqltext holds the text form of the bucket predicate, which
// selects the same rows as sqlbucket.SlotPredicate from the UUID's text. It
// is here only to compare against in tests and benchmarks: it cannot use the
// bucket index sqlbucket.IndexDDL creates (an expression index on the text
// form itself is possible; the benchmark measures what it costs).
package sqltext

import (
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Expr is the bucket from the UUID's text form:
//
//	get_byte(decode(replace("id"::text, '-', ''), 'hex'), 15)
func Expr(column string) string {
	return "get_byte(decode(replace(" + pgx.Identifier{column}.Sanitize() + "::text, '-', ''), 'hex'), 15)"
}

// SlotPredicate is the text form of a slot: buckets-per-slot as $kParam and
// the slot as $slotParam.
func SlotPredicate(column string, kParam, slotParam int) string {
	return Expr(column) + " / $" + strconv.Itoa(kParam) + " = $" + strconv.Itoa(slotParam)
}
