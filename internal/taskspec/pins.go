package taskspec

import (
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/sqlbucket"
)

// Names of the weighted placement's tables, created in the task's Schema
// next to its accounts table.
const (
	PinsTable      = "riverslot_pins"
	PinCyclesTable = "riverslot_pin_cycles"
)

// PinCandidatesMax is how many of the heaviest accounts a bootstrap
// considers for pinning each cycle (besides the previous pins).
const PinCandidatesMax = 100_000

// PinsDDL returns the statements creating the pins tables in schema ("" for
// search_path), each IF NOT EXISTS. One riverslot_pin_cycles row marks the
// pins of one (task, plan, cycle) as computed; riverslot_pins holds them.
//
//	CREATE TABLE IF NOT EXISTS "riverslot_pin_cycles" (
//	    task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
//	    threshold double precision, pinned int, created_at timestamptz NOT NULL DEFAULT now(),
//	    PRIMARY KEY (task, plan, cycle_start))
//	CREATE TABLE IF NOT EXISTS "riverslot_pins" (
//	    task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
//	    account_id uuid NOT NULL, bucket int NOT NULL, slot int NOT NULL,
//	    weight double precision NOT NULL,
//	    PRIMARY KEY (task, plan, cycle_start, account_id))
//	CREATE INDEX IF NOT EXISTS "riverslot_pins_slot_idx"
//	    ON "riverslot_pins" (task, plan, cycle_start, slot, account_id)
//	CREATE INDEX IF NOT EXISTS "riverslot_pins_bucket_idx"
//	    ON "riverslot_pins" (task, plan, cycle_start, bucket, account_id)
//
// A pin keeps the account's bucket, so that a per-slot job loads the pins
// of its own bucket range only, and fetches a pinned account through the
// bucket index (bucket, id) whatever other indexes the table has.
func PinsDDL(schema string) []string {
	cycles := sqlbucket.QualifiedTable(schema, PinCyclesTable)
	pins := sqlbucket.QualifiedTable(schema, PinsTable)
	return []string{
		"CREATE TABLE IF NOT EXISTS " + cycles + ` (
	task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
	threshold double precision, pinned int, created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, plan, cycle_start))`,
		"CREATE TABLE IF NOT EXISTS " + pins + ` (
	task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
	account_id uuid NOT NULL, bucket int NOT NULL, slot int NOT NULL,
	weight double precision NOT NULL,
	PRIMARY KEY (task, plan, cycle_start, account_id))`,
		"CREATE INDEX IF NOT EXISTS " + pgx.Identifier{PinsTable + "_slot_idx"}.Sanitize() + " ON " + pins + " (task, plan, cycle_start, slot, account_id)",
		"CREATE INDEX IF NOT EXISTS " + pgx.Identifier{PinsTable + "_bucket_idx"}.Sanitize() + " ON " + pins + " (task, plan, cycle_start, bucket, account_id)",
	}
}

// PinsSQL holds the queries of a weighted task, built once by BuildSQL.
type PinsSQL struct {
	// SlotWeights returns (bucket, sum of weights, sum of squared weights)
	// of the accounts matching the filter, one row per bucket.
	SlotWeights string
	// Candidates returns (id, bucket, weight) of the $1 heaviest accounts.
	Candidates string
	// RangeAccounts returns (id, bucket, weight) of every account whose
	// bucket is in [$1, $2]: the evacuees of a slot kept for a giant.
	RangeAccounts string
	// Previous returns (id, bucket, weight, slot) of the pins of the latest
	// cycle of task $1 and plan $2 before $3 whose accounts still exist
	// and match the filter, with their current weights.
	Previous string
	// Claim inserts the riverslot_pin_cycles row of ($1 task, $2 plan, $3
	// cycle start); it returns a row only to the transaction that inserted
	// it.
	Claim string
	// Record stores the threshold $4 and pin count $5 on that row.
	Record string
	// Prune deletes the pins and pin cycles of task $1 that started before
	// $2.
	Prune []string
	// RangePins returns the ids of the accounts pinned in the cycle ($1
	// task, $2 plan, $3 cycle start) whose bucket is in [$4, $5]: a
	// per-slot job leaves them out of its bucket range's pages, which stay
	// Spec.SQL's plain index-only pages.
	RangePins string
	// PinnedFirstPage selects the accounts pinned to slot $4 in the cycle
	// ($1 task, $2 plan, $3 cycle start) by id, $5 limit; rows are (id,
	// bucket). PinnedNextPage continues after id $6.
	PinnedFirstPage, PinnedNextPage string
}

// PinOfSQL returns the query for one account's pin in the pins tables of
// schema: (cycle start, slot, weight) of account $3 in the latest pinned
// cycle of task $1 and plan $2; slot and weight are NULL when the account
// is not pinned in that cycle, and there is no row when no cycle was.
func PinOfSQL(schema string) string {
	return "SELECT c.cycle_start, p.slot, p.weight FROM " + sqlbucket.QualifiedTable(schema, PinCyclesTable) + " c LEFT JOIN " +
		sqlbucket.QualifiedTable(schema, PinsTable) +
		" p ON p.task = c.task AND p.plan = c.plan AND p.cycle_start = c.cycle_start AND p.account_id = $3" +
		" WHERE c.task = $1 AND c.plan = $2 ORDER BY c.cycle_start DESC LIMIT 1"
}

// buildPinsSQL fills s.Pins for a weighted task.
func (s *Spec) buildPinsSQL() {
	pins := sqlbucket.QualifiedTable(s.Schema, PinsTable)
	cycles := sqlbucket.QualifiedTable(s.Schema, PinCyclesTable)
	bucket := sqlbucket.Expr(s.IDColumn)
	weight := s.WeightExpr()
	where := " WHERE true" + s.FilterClause
	prevCycle := "(SELECT max(cycle_start) FROM " + cycles + " WHERE task = $1 AND plan = $2 AND cycle_start < $3)"
	// Each pin of the slot, in id order, looked up by (bucket, id) in a
	// subquery of its own, so the filter sees only the accounts table.
	pinnedHead := "SELECT a.i, a.b FROM " + pins + " p CROSS JOIN LATERAL (SELECT " + s.QuotedID + " AS i, " + bucket + " AS b FROM " +
		s.QualifiedTable + " WHERE " + bucket + " = p.bucket AND " + s.QuotedID + " = p.account_id" + s.FilterClause + ") a" +
		" WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3 AND p.slot = $4"
	pinnedTail := " ORDER BY p.account_id LIMIT $5"
	s.Pins = PinsSQL{
		SlotWeights: "SELECT " + bucket + ", sum(w), sum(w * w) FROM (SELECT " + s.QuotedID + ", " + weight + " AS w FROM " +
			s.QualifiedTable + where + ") a GROUP BY 1",
		Candidates: "SELECT " + s.QuotedID + ", " + bucket + ", " + weight + " AS w FROM " + s.QualifiedTable + where +
			" ORDER BY w DESC, " + s.QuotedID + " LIMIT $1",
		RangeAccounts: "SELECT " + s.QuotedID + ", " + bucket + ", " + weight + " AS w FROM " + s.QualifiedTable +
			" WHERE " + sqlbucket.SlotPredicate(s.IDColumn, 1, 2) + s.FilterClause,
		// The accounts in a derived table of their own, so the filter and
		// weight never meet the pins table's columns.
		Previous: "SELECT a.i, a.b, a.w, p.slot FROM (SELECT " + s.QuotedID + " AS i, " + bucket + " AS b, " + weight + " AS w FROM " + s.QualifiedTable +
			" WHERE " + s.QuotedID + " IN (SELECT account_id FROM " + pins + " WHERE task = $1 AND plan = $2 AND cycle_start = " + prevCycle + ")" + s.FilterClause +
			") a JOIN " + pins + " p ON p.account_id = a.i AND p.task = $1 AND p.plan = $2 AND p.cycle_start = " + prevCycle,
		Claim:  "INSERT INTO " + cycles + " (task, plan, cycle_start) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING true",
		Record: "UPDATE " + cycles + " SET threshold = $4, pinned = $5 WHERE task = $1 AND plan = $2 AND cycle_start = $3",
		Prune: []string{
			"DELETE FROM " + pins + " WHERE task = $1 AND cycle_start < $2",
			"DELETE FROM " + cycles + " WHERE task = $1 AND cycle_start < $2",
		},
		RangePins:       "SELECT account_id FROM " + pins + " WHERE task = $1 AND plan = $2 AND cycle_start = $3 AND bucket BETWEEN $4 AND $5",
		PinnedFirstPage: pinnedHead + pinnedTail,
		PinnedNextPage:  pinnedHead + " AND p.account_id > $6" + pinnedTail,
	}
}

// WeightExpr is the task's weight as SQL: never NULL, negative, NaN or
// infinite (each counts as 0).
//
//	greatest(coalesce(nullif(nullif((weight)::float8, 'NaN'), 'Infinity'), 0), 0)
func (s *Spec) WeightExpr() string {
	return "greatest(coalesce(nullif(nullif((" + s.Weight + ")::float8, 'NaN'), 'Infinity'), 0), 0)"
}

// Weighted reports whether the task balances weights.
func (s *Spec) Weighted() bool { return s.Weight != "" }
