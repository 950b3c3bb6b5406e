package taskspec

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/sqlbucket"
)

// Names of the weighted placement's tables, created in the task's Schema
// next to its accounts table.
const (
	PinsTable      = "riverslot_pins"
	PinCyclesTable = "riverslot_pin_cycles"
	// PinCensusTable holds the weight censuses of a weighted task: the
	// per-slot weights and heaviest accounts its pins are computed from,
	// taken in bounded steps ahead of the cycle (see pinning.Step).
	PinCensusTable = "riverslot_pin_census"
	// PinCensusCandidatesTable holds the heaviest accounts of a census
	// being taken, until its last step folds the PinCandidatesMax heaviest
	// into the census row's arrays.
	PinCensusCandidatesTable = "riverslot_pin_census_candidates"
)

// CensusSteps is how many steps a weight census takes: each reads
// Buckets/CensusSteps buckets (one of 256, or 256 of 65,536), about the
// fleet / 256 accounts, in a transaction of its own.
const CensusSteps = 256

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
//	ALTER TABLE "riverslot_pin_cycles" ADD COLUMN IF NOT EXISTS fallback text,
//	    ADD COLUMN IF NOT EXISTS follows timestamptz
//	CREATE TABLE IF NOT EXISTS "riverslot_pins" (
//	    task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
//	    account_id uuid NOT NULL, bucket int NOT NULL, slot int NOT NULL,
//	    weight double precision NOT NULL,
//	    PRIMARY KEY (task, plan, cycle_start, account_id))
//	CREATE INDEX IF NOT EXISTS "riverslot_pins_slot_idx"
//	    ON "riverslot_pins" (task, plan, cycle_start, slot, account_id)
//	CREATE INDEX IF NOT EXISTS "riverslot_pins_bucket_idx"
//	    ON "riverslot_pins" (task, plan, cycle_start, bucket, account_id)
//	CREATE TABLE IF NOT EXISTS "riverslot_pin_census" (
//	    task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
//	    started_at timestamptz NOT NULL DEFAULT now(), next_bucket int NOT NULL DEFAULT 0,
//	    steps int NOT NULL DEFAULT 0, accounts bigint NOT NULL DEFAULT 0,
//	    totals double precision[] NOT NULL, sum_sq double precision NOT NULL DEFAULT 0,
//	    candidate_ids uuid[] NOT NULL DEFAULT '{}', candidate_buckets int[] NOT NULL DEFAULT '{}',
//	    candidate_weights double precision[] NOT NULL DEFAULT '{}',
//	    floor double precision NOT NULL DEFAULT 0, kept int NOT NULL DEFAULT 0,
//	    finished_at timestamptz,
//	    PRIMARY KEY (task, plan, cycle_start))
//	CREATE TABLE IF NOT EXISTS "riverslot_pin_census_candidates" (
//	    task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
//	    account_id uuid NOT NULL, bucket int NOT NULL, weight double precision NOT NULL,
//	    PRIMARY KEY (task, plan, cycle_start, account_id))
//	CREATE INDEX IF NOT EXISTS "riverslot_pin_census_candidates_weight_idx"
//	    ON "riverslot_pin_census_candidates" (task, plan, cycle_start, weight DESC, account_id)
//
// One riverslot_pin_census row is the weight census taken for the pins of
// one (task, plan, cycle): per-slot weight totals (by home slot) and the
// sum of squared weights of the buckets below next_bucket; finished_at is
// set once every bucket is counted. While it is taken, the heaviest
// accounts counted are rows of riverslot_pin_census_candidates (kept of
// them, trimmed to the PinCandidatesMax heaviest, floor the lightest of
// those, whenever they pass twice that); its last step folds the
// PinCandidatesMax heaviest (heaviest first, ties by id) into the row's
// candidate arrays and deletes them.
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
		// A cycle whose pins took longer than PinsTimeout: fallback is
		// "previous" (it follows the pins of cycle follows) or "hash".
		"ALTER TABLE " + cycles + " ADD COLUMN IF NOT EXISTS fallback text, ADD COLUMN IF NOT EXISTS follows timestamptz",
		"CREATE TABLE IF NOT EXISTS " + pins + ` (
	task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
	account_id uuid NOT NULL, bucket int NOT NULL, slot int NOT NULL,
	weight double precision NOT NULL,
	PRIMARY KEY (task, plan, cycle_start, account_id))`,
		"CREATE INDEX IF NOT EXISTS " + pgx.Identifier{PinsTable + "_slot_idx"}.Sanitize() + " ON " + pins + " (task, plan, cycle_start, slot, account_id)",
		"CREATE INDEX IF NOT EXISTS " + pgx.Identifier{PinsTable + "_bucket_idx"}.Sanitize() + " ON " + pins + " (task, plan, cycle_start, bucket, account_id)",
		"CREATE TABLE IF NOT EXISTS " + sqlbucket.QualifiedTable(schema, PinCensusTable) + ` (
	task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
	started_at timestamptz NOT NULL DEFAULT now(), next_bucket int NOT NULL DEFAULT 0,
	steps int NOT NULL DEFAULT 0, accounts bigint NOT NULL DEFAULT 0,
	totals double precision[] NOT NULL, sum_sq double precision NOT NULL DEFAULT 0,
	candidate_ids uuid[] NOT NULL DEFAULT '{}', candidate_buckets int[] NOT NULL DEFAULT '{}',
	candidate_weights double precision[] NOT NULL DEFAULT '{}',
	floor double precision NOT NULL DEFAULT 0, kept int NOT NULL DEFAULT 0,
	finished_at timestamptz,
	PRIMARY KEY (task, plan, cycle_start))`,
		// A census job's attempts that took no step (a lock, a timeout):
		// how many in a row, since when, and why; Status shows them.
		"ALTER TABLE " + sqlbucket.QualifiedTable(schema, PinCensusTable) + " ADD COLUMN IF NOT EXISTS stalls int NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS stalled_since timestamptz",
		"CREATE TABLE IF NOT EXISTS " + sqlbucket.QualifiedTable(schema, PinCensusCandidatesTable) + ` (
	task text NOT NULL, plan text NOT NULL, cycle_start timestamptz NOT NULL,
	account_id uuid NOT NULL, bucket int NOT NULL, weight double precision NOT NULL,
	PRIMARY KEY (task, plan, cycle_start, account_id))`,
		"CREATE INDEX IF NOT EXISTS " + pgx.Identifier{PinCensusCandidatesTable + "_weight_idx"}.Sanitize() + " ON " +
			sqlbucket.QualifiedTable(schema, PinCensusCandidatesTable) + " (task, plan, cycle_start, weight DESC, account_id)",
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
	// CountUpTo counts the accounts matching the filter, up to $1.
	CountUpTo string
	// CensusFinished reports whether a census of task $1 and plan $2
	// started at or after $3 is finished.
	CensusFinished string
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
	// Decision returns (pinned, fallback, follows) of the cycle ($1 task,
	// $2 plan, $3 cycle start): what its bootstrap decided.
	Decision string
	// Fallback records on that row that the cycle fell back: $4 is
	// "previous" (following the pins of cycle $5) or "hash".
	Fallback string
	// Latest returns the start of the latest cycle of task $1 and plan $2
	// before $3 whose pins were computed (NULL if none): the pins a cycle
	// falls back to when its own take longer than PinsTimeout.
	Latest string

	// CensusStart inserts, if missing, the census row of ($1 task, $2
	// plan, $3 cycle start) with $4 zero slot totals.
	CensusStart string
	// CensusLock locks that row and returns (next_bucket, finished,
	// started_at, steps, accounts, totals, sum_sq, floor, kept).
	CensusLock string
	// CensusSums returns (bucket, sum of weights, sum of squared weights,
	// count) of the accounts whose bucket is in [$1, $2], one row per
	// bucket.
	CensusSums string
	// CensusAdd inserts into the census's candidates the $7 heaviest
	// accounts (ties by id) whose bucket is in [$4, $5] and weight at
	// least $6 (the floor).
	CensusAdd string
	// CensusKth returns (weight, id) of the $4th heaviest candidate of the
	// census, CensusTrim deletes those after it (weight $4, id $5).
	CensusKth, CensusTrim string
	// CensusSave stores one step on the census row: $4 next_bucket, $5
	// accounts, $6 totals, $7 sum_sq, $8 floor, $9 kept, finished when
	// $10.
	CensusSave string
	// CensusFold sets the census row's candidate arrays to its $4
	// heaviest candidates and deletes its candidate rows.
	CensusFold string
	// CensusRead returns CensusLock's columns and the candidate arrays
	// (ids, buckets, weights) of that row, without locking it.
	CensusRead string
	// CensusLatest returns CensusRead's columns and cycle_start of the
	// latest finished census of task $1 and plan $2 started at or after
	// $3.
	CensusLatest string
	// CensusCurrent returns (id, bucket, weight) of the accounts of ids
	// $1 and buckets $2 (a census's candidates) that still exist and
	// match the filter, with their current weights, each looked up
	// through the bucket index.
	CensusCurrent string
	// CensusPrune deletes the censuses of task $1 started before $2.
	CensusPrune string
	// CensusStalled counts one more attempt of the census of ($1 task,
	// $2 plan, $3 cycle start) that took no step and returns the count;
	// CensusProgressed resets it after a step.
	CensusStalled, CensusProgressed string
	// CensusState returns (cycle_start, steps, next_bucket, finished,
	// stalls, stalled_since) of the latest census of task $1 and plan $2.
	CensusState string
}

// PinsRef names the pins a cycle's per-slot jobs follow: those the
// bootstrap computed for the cycle of task Task and plan Plan, in the pins
// tables of Schema. An account pinned to slot p is served in slot p + Shift:
// a task OppositeOf a weighted task follows that task's pins shifted by
// half the slots, so the two never meet on an account, giants included.
//
// CycleStart, when set, names the pinned cycle whose pins are followed:
// a cycle whose own pins could not be computed within the task's
// PinsTimeout follows the latest pins computed before it. Zero: the
// cycle's own pins.
type PinsRef struct {
	Task       string    `json:"task"`
	Plan       string    `json:"plan"`
	Schema     string    `json:"schema,omitempty"`
	Shift      int       `json:"shift,omitempty"`
	CycleStart time.Time `json:"cycle_start,omitzero"`
}

// PinsCycle returns the cycle start the pins are stored under: CycleStart
// when set, else cycleStart (the following cycle's own).
func (r *PinsRef) PinsCycle(cycleStart time.Time) time.Time {
	if r.CycleStart.IsZero() {
		return cycleStart
	}
	return r.CycleStart
}

// PinRead holds the queries a per-slot job runs on the pins a cycle
// follows (a PinsRef), built for that ref's schema. Every node can run
// them, weighted or not: a per-slot job follows its cycle's decision, not
// its node's Weight.
type PinRead struct {
	// PageRange returns the ids of the accounts pinned in the cycle ($1
	// task, $2 plan, $3 cycle start) whose (bucket, id) is in [($4, $5),
	// ($6, $7)]: the pinned accounts of one page of a bucket range, which
	// that page skips. Bounded by the page, whatever the fleet.
	PageRange string
	// PinnedFirstPage selects the accounts pinned to slot $4 in the cycle
	// ($1 task, $2 plan, $3 cycle start) by id, $5 limit; rows are (id,
	// bucket, upstream key). PinnedNextPage continues after id $6.
	PinnedFirstPage, PinnedNextPage string
	// Slots returns (id, slot) of the accounts of ids $4 pinned in the
	// cycle ($1 task, $2 plan, $3 cycle start).
	Slots string
}

// PinRead returns the pin queries of this task's accounts table against the
// pins tables of schema.
func (s *Spec) PinRead(schema string) PinRead {
	pins := sqlbucket.QualifiedTable(schema, PinsTable)
	bucket := s.BucketExpr()
	// Each pin of the slot, in id order, looked up by (bucket, id) in a
	// subquery of its own, so the filter sees only the accounts table.
	pinnedHead := "SELECT a.i, a.b, a.u FROM " + pins + " p CROSS JOIN LATERAL (SELECT " + s.QuotedID + " AS i, " + bucket + " AS b, " + s.UpstreamExpr() + " AS u FROM " +
		s.QualifiedTable + " WHERE " + bucket + " = p.bucket AND " + s.QuotedID + " = p.account_id" + s.FilterClause + ") a" +
		" WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3 AND p.slot = $4"
	pinnedTail := " ORDER BY p.account_id LIMIT $5"
	cycle := " WHERE task = $1 AND plan = $2 AND cycle_start = $3"
	return PinRead{
		PageRange:       "SELECT account_id FROM " + pins + cycle + " AND (bucket, account_id) >= ($4::int, $5::uuid) AND (bucket, account_id) <= ($6::int, $7::uuid)",
		PinnedFirstPage: pinnedHead + pinnedTail,
		PinnedNextPage:  pinnedHead + " AND p.account_id > $6" + pinnedTail,
		Slots:           "SELECT account_id, slot FROM " + pins + cycle + " AND account_id = ANY($4::uuid[])",
	}
}

// PinOfSQL returns the query for one account's pin in the pins tables of
// schema: (cycle start, slot, weight) of account $3 in the latest pinned
// cycle of task $1 and plan $2; slot and weight are NULL when the account
// is not pinned in that cycle, and there is no row when no cycle was. A
// cycle that fell back follows the pins it fell back to (none: hash).
func PinOfSQL(schema string) string {
	return "SELECT c.cycle_start, p.slot, p.weight FROM " + sqlbucket.QualifiedTable(schema, PinCyclesTable) + " c LEFT JOIN " +
		sqlbucket.QualifiedTable(schema, PinsTable) +
		" p ON p.task = c.task AND p.plan = c.plan AND p.cycle_start = coalesce(c.follows, c.cycle_start) AND p.account_id = $3" +
		" WHERE c.task = $1 AND c.plan = $2 ORDER BY c.cycle_start DESC LIMIT 1"
}

// PruneSQL returns the statement that deletes the pin cycles (and their
// pins) of task $1 that started before $2 and that no cycle can still need:
// the latest cycle of each plan whose pins were computed is kept (the next cycle's hysteresis
// starts from it), and so is every (plan, cycle start) of the arrays $3,
// $4, those the ledger records as still read (ledger.PinsInUse): a cycle keeps its pins while a per-slot job
// that reads them can still run.
func PruneSQL(schema string) string {
	pins := sqlbucket.QualifiedTable(schema, PinsTable)
	cycles := sqlbucket.QualifiedTable(schema, PinCyclesTable)
	return "WITH gone AS (DELETE FROM " + cycles + " c WHERE c.task = $1 AND c.cycle_start < $2" +
		" AND c.cycle_start < (SELECT max(l.cycle_start) FROM " + cycles + " l WHERE l.task = c.task AND l.plan = c.plan AND l.pinned IS NOT NULL)" +
		" AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::timestamptz[]) k(plan, cycle_start) WHERE k.plan = c.plan AND k.cycle_start = c.cycle_start)" +
		" RETURNING c.task, c.plan, c.cycle_start)" +
		" DELETE FROM " + pins + " p USING gone g WHERE p.task = g.task AND p.plan = g.plan AND p.cycle_start = g.cycle_start"
}

// buildPinsSQL fills s.Pins for a weighted task.
func (s *Spec) buildPinsSQL() {
	pins := sqlbucket.QualifiedTable(s.Schema, PinsTable)
	cycles := sqlbucket.QualifiedTable(s.Schema, PinCyclesTable)
	bucket := s.BucketExpr()
	weight := s.WeightExpr()
	where := " WHERE true" + s.FilterClause
	census := sqlbucket.QualifiedTable(s.Schema, PinCensusTable)
	candidates := sqlbucket.QualifiedTable(s.Schema, PinCensusCandidatesTable)
	const (
		censusCols = "next_bucket, finished_at IS NOT NULL, started_at, steps, accounts, totals, sum_sq"
		censusKey  = " WHERE task = $1 AND plan = $2 AND cycle_start = $3"
	)
	prevCycle := "(SELECT max(cycle_start) FROM " + cycles + " WHERE task = $1 AND plan = $2 AND cycle_start < $3 AND pinned IS NOT NULL)"
	s.Pins = PinsSQL{
		SlotWeights: "SELECT " + bucket + ", sum(w), sum(w * w) FROM (SELECT " + s.QuotedID + ", " + weight + " AS w FROM " +
			s.QualifiedTable + where + ") a GROUP BY 1",
		Candidates: "SELECT " + s.QuotedID + ", " + bucket + ", " + weight + " AS w FROM " + s.QualifiedTable + where +
			" ORDER BY w DESC, " + s.QuotedID + " LIMIT $1",
		CountUpTo: "SELECT count(*) FROM (SELECT FROM " + s.QualifiedTable + where + " LIMIT $1) a",
		RangeAccounts: "SELECT " + s.QuotedID + ", " + bucket + ", " + weight + " AS w FROM " + s.QualifiedTable +
			" WHERE " + s.SlotPredicate(1, 2) + s.FilterClause,
		// The accounts in a derived table of their own, so the filter and
		// weight never meet the pins table's columns.
		Previous: "SELECT a.i, a.b, a.w, p.slot FROM (SELECT " + s.QuotedID + " AS i, " + bucket + " AS b, " + weight + " AS w FROM " + s.QualifiedTable +
			" WHERE " + s.QuotedID + " IN (SELECT account_id FROM " + pins + " WHERE task = $1 AND plan = $2 AND cycle_start = " + prevCycle + ")" + s.FilterClause +
			") a JOIN " + pins + " p ON p.account_id = a.i AND p.task = $1 AND p.plan = $2 AND p.cycle_start = " + prevCycle,
		Claim:    "INSERT INTO " + cycles + " (task, plan, cycle_start) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING true",
		Record:   "UPDATE " + cycles + " SET threshold = $4, pinned = $5 WHERE task = $1 AND plan = $2 AND cycle_start = $3",
		Decision: "SELECT pinned, coalesce(fallback, ''), follows FROM " + cycles + " WHERE task = $1 AND plan = $2 AND cycle_start = $3",
		Fallback: "UPDATE " + cycles + " SET fallback = $4, follows = $5 WHERE task = $1 AND plan = $2 AND cycle_start = $3",
		Latest:   "SELECT max(cycle_start) FROM " + cycles + " WHERE task = $1 AND plan = $2 AND cycle_start < $3 AND pinned IS NOT NULL",

		CensusStart: "INSERT INTO " + census + " (task, plan, cycle_start, totals) VALUES ($1, $2, $3, array_fill(0::float8, ARRAY[$4::int])) ON CONFLICT DO NOTHING",
		CensusLock:  "SELECT " + censusCols + ", floor, kept FROM " + census + censusKey + " FOR UPDATE",
		CensusSums: "SELECT b, sum(w), sum(w * w), count(*) FROM (SELECT " + bucket + " AS b, " + weight + " AS w FROM " + s.QualifiedTable +
			" WHERE " + s.SlotPredicate(1, 2) + s.FilterClause + ") a GROUP BY 1",
		CensusAdd: "INSERT INTO " + candidates + " (task, plan, cycle_start, account_id, bucket, weight) SELECT $1, $2, $3, i, b, w FROM (SELECT " +
			s.QuotedID + " AS i, " + bucket + " AS b, " + weight + " AS w FROM " + s.QualifiedTable + " WHERE " + s.SlotPredicate(4, 5) + s.FilterClause + ") a" +
			" WHERE w >= $6 ORDER BY w DESC, i LIMIT $7",
		CensusKth:  "SELECT weight, account_id FROM " + candidates + censusKey + " ORDER BY weight DESC, account_id OFFSET $4::int - 1 LIMIT 1",
		CensusTrim: "DELETE FROM " + candidates + censusKey + " AND (weight < $4 OR (weight = $4 AND account_id > $5))",
		CensusSave: "UPDATE " + census + " SET next_bucket = $4, steps = steps + 1, accounts = $5, totals = $6, sum_sq = $7, floor = $8, kept = $9," +
			" finished_at = CASE WHEN $10::bool THEN now() END" + censusKey,
		CensusFold: "WITH top AS (SELECT account_id, bucket, weight FROM " + candidates + censusKey + " ORDER BY weight DESC, account_id LIMIT $4)," +
			" gone AS (DELETE FROM " + candidates + censusKey + ")" +
			" UPDATE " + census + " SET (candidate_ids, candidate_buckets, candidate_weights) = (SELECT coalesce(array_agg(account_id ORDER BY weight DESC, account_id), '{}')," +
			" coalesce(array_agg(bucket ORDER BY weight DESC, account_id), '{}'), coalesce(array_agg(weight ORDER BY weight DESC, account_id), '{}') FROM top)" +
			censusKey,
		CensusStalled:    "UPDATE " + census + " SET stalls = stalls + 1, stalled_since = coalesce(stalled_since, now())" + censusKey + " RETURNING stalls",
		CensusProgressed: "UPDATE " + census + " SET stalls = 0, stalled_since = NULL" + censusKey + " AND stalls > 0",
		CensusState: "SELECT cycle_start, steps, next_bucket, finished_at IS NOT NULL, stalls, stalled_since FROM " + census +
			" WHERE task = $1 AND plan = $2 ORDER BY cycle_start DESC LIMIT 1",
		CensusRead:     "SELECT " + censusCols + ", candidate_ids, candidate_buckets, candidate_weights FROM " + census + censusKey,
		CensusFinished: "SELECT EXISTS (SELECT FROM " + census + " WHERE task = $1 AND plan = $2 AND finished_at IS NOT NULL AND started_at >= $3)",
		CensusLatest: "SELECT " + censusCols + ", candidate_ids, candidate_buckets, candidate_weights, cycle_start FROM " + census +
			" WHERE task = $1 AND plan = $2 AND finished_at IS NOT NULL AND started_at >= $3 ORDER BY started_at DESC, cycle_start DESC LIMIT 1",
		CensusCurrent: "SELECT a.i, a.b, a.w FROM unnest($1::uuid[], $2::int[]) AS c (i, b) CROSS JOIN LATERAL (SELECT " + s.QuotedID + " AS i, " + bucket + " AS b, " +
			weight + " AS w FROM " + s.QualifiedTable + " WHERE " + bucket + " = c.b AND " + s.QuotedID + " = c.i" + s.FilterClause + ") a",
		CensusPrune: "WITH gone AS (DELETE FROM " + census + " WHERE task = $1 AND started_at < $2 RETURNING task, plan, cycle_start)" +
			" DELETE FROM " + candidates + " c USING gone g WHERE c.task = g.task AND c.plan = g.plan AND c.cycle_start = g.cycle_start",
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
