// Package upstream holds riverslot's per-upstream limits and circuit
// breakers in PostgreSQL, in two small tables of River's schema, so that
// every node of a cluster holds the same budget with no other
// infrastructure:
//
//   - riverslot_upstream: one row per (task, upstream key), created on a
//     key's first sync: the operator's overrides of the task's limits,
//     the rate limiter's state (GCRA: the theoretical arrival time), a
//     pause an upstream asked for (429 Retry-After), the breaker's state
//     and counters.
//   - riverslot_upstream_place: the places in each key's line, one row per
//     sync job that holds a place in the rate limiter's line (reserved_at)
//     or waits for the breaker (deferred, since deferred_at; kept while
//     the sync runs as the breaker's probe, dropped when the probe
//     closes it).
//
// A sync in flight holds a lease in its key's row (leases: job id to
// expiry; in_flight counts them), which expires, so a node killed mid-sync
// blocks nothing for longer than the sync's timeout. Both tables are
// UNLOGGED: the state is rebuilt as syncs run, and a PostgreSQL crash
// (not a restart) empties them; operators' overrides are also kept in a
// logged table (riverslot_upstream_limits) and copied back into a key's
// row when it is made again.
//
// Every decision reads the database's clock (clock_timestamp()), not the
// node's, and takes the key's row lock for one short transaction: syncs
// of one upstream are decided one at a time, whatever node runs them. A
// node's Batcher sends the decisions and successes its syncs ask for at
// the same moment in one statement, which decides each upstream's group
// of them under its row lock as one.
//
// After an outage the breaker hands its deferred syncs back as spaced as
// they came: each waits past the breaker's close as long as it was first
// deferred after the outage began (open_since to closed_at), within the
// time it has left (recovery). A key no sync asked for in a long time is
// deleted (Prune).
package upstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/sqlbucket"
)

// Table, PlacesTable and LimitsTable are the limiter's tables, in River's
// schema.
const (
	Table       = "riverslot_upstream"
	PlacesTable = "riverslot_upstream_place"
	LimitsTable = "riverslot_upstream_limits"
)

// placesTableBefore is PlacesTable's earlier name (it holds places in
// line, not jobs); DDL renames a table of that name.
const placesTableBefore = "riverslot_upstream_job"

// MaxKeyLen is the longest upstream key, in bytes: the fan-out cuts longer
// values of Task.Upstream to it (CutKey).
const MaxKeyLen = 128

// CutKey cuts key to at most MaxKeyLen bytes without splitting a UTF-8
// character: a multibyte character that would straddle the limit is left
// out whole. CutKeySQL is the same cut in SQL; the two agree on every
// valid UTF-8 key.
func CutKey(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	n := MaxKeyLen
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return key[:n]
}

// CutKeySQL is CutKey in SQL over expr, a text expression evaluated once
// per row; NULL gives the empty key. A byte cut inside a character would make
// convert_from reject the row, and with it the whole page of a fan-out:
// the cut steps back over continuation bytes (10xxxxxx) to the
// character's first byte.
func CutKeySQL(expr string) string {
	return fmt.Sprintf(`coalesce((SELECT CASE WHEN octet_length(k.b) <= %[1]d THEN convert_from(k.b, 'UTF8')
	ELSE convert_from(substring(k.b from 1 for CASE
		WHEN get_byte(k.b, %[1]d) & 192 <> 128 THEN %[1]d
		WHEN get_byte(k.b, %[1]d - 1) & 192 <> 128 THEN %[1]d - 1
		WHEN get_byte(k.b, %[1]d - 2) & 192 <> 128 THEN %[1]d - 2
		ELSE %[1]d - 3 END), 'UTF8') END
	FROM (SELECT convert_to(%[2]s, 'UTF8') AS b) k), '')`, MaxKeyLen, expr)
}

// CooldownDefault is the default Limits.Cooldown.
const CooldownDefault = 30 * time.Second

// Limits are an upstream's limits; a zero field sets no limit.
type Limits struct {
	// Rate is syncs started per second.
	Rate float64
	// Burst is how many syncs may start at once above the rate after a
	// quiet spell; at least 1 (the default) when Rate is set.
	Burst int
	// Concurrency is syncs in flight at once.
	Concurrency int
	// FailureThreshold is how many consecutive failed syncs open the
	// breaker (0: no breaker).
	FailureThreshold int
	// Cooldown is how long an open breaker defers syncs before one probe
	// checks the upstream again.
	Cooldown time.Duration
	// Latency is how long one sync's call usually takes: not enforced,
	// only weighed by the budget check (Concurrency / Latency syncs a
	// second at most).
	Latency time.Duration
}

// Validate returns an error naming the field (prefix, e.g. "Limits.") and
// the fix.
func (l Limits) Validate(prefix string) error {
	var errs []error
	if l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) {
		errs = append(errs, fmt.Errorf("%sRate must be a finite number of syncs per second, 0 for no limit; got %v", prefix, l.Rate))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("%sBurst must be 0 (1 when Rate is set) or more; got %d", prefix, l.Burst))
	}
	if l.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("%sConcurrency must be 0 (no limit) or more; got %d", prefix, l.Concurrency))
	}
	if l.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("%sFailureThreshold must be 0 (no breaker) or more; got %d", prefix, l.FailureThreshold))
	}
	if l.Cooldown < 0 {
		errs = append(errs, fmt.Errorf("%sCooldown must be positive (default %s); got %s", prefix, CooldownDefault, l.Cooldown))
	}
	if l.Latency < 0 {
		errs = append(errs, fmt.Errorf("%sLatency must be 0 (unknown) or how long one sync's call takes, e.g. 800*time.Millisecond; got %s", prefix, l.Latency))
	}
	return errors.Join(errs...)
}

// WithDefaults returns l with Burst and Cooldown defaulted.
func (l Limits) WithDefaults() Limits {
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = 1
	}
	if l.Cooldown == 0 {
		l.Cooldown = CooldownDefault
	}
	return l
}

// DDL returns the statements that create the limiter's tables in schema
// ("" for the search path), idempotently. It first renames the places'
// table of an earlier version (riverslot_upstream_job) and its primary key,
// keeping its rows; the renames do nothing where the old names are gone:
//
//	ALTER TABLE IF EXISTS "schema"."riverslot_upstream_job" RENAME TO "riverslot_upstream_place"
//	ALTER INDEX IF EXISTS "schema"."riverslot_upstream_job_pkey" RENAME TO "riverslot_upstream_place_pkey"
//
// It adds the columns later versions read to tables an earlier one made
// (ADD COLUMN IF NOT EXISTS). ALTER TABLE takes a table's exclusive lock
// even when its columns exist, which would queue every sync of a running
// fleet behind it: run the DDL only where Current reports false.
func DDL(schema string) []string {
	t := sqlbucket.QualifiedTable(schema, Table)
	j := sqlbucket.QualifiedTable(schema, PlacesTable)
	o := sqlbucket.QualifiedTable(schema, LimitsTable)
	return []string{
		`ALTER TABLE IF EXISTS ` + sqlbucket.QualifiedTable(schema, placesTableBefore) + ` RENAME TO ` + pgx.Identifier{PlacesTable}.Sanitize(),
		`ALTER INDEX IF EXISTS ` + sqlbucket.QualifiedTable(schema, placesTableBefore+"_pkey") + ` RENAME TO ` + pgx.Identifier{PlacesTable + "_pkey"}.Sanitize(),
		`CREATE TABLE IF NOT EXISTS ` + o + ` (
	task text NOT NULL,
	key text NOT NULL,
	rate double precision,
	burst int,
	concurrency int,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, key)
)`,
		`COMMENT ON TABLE ` + o + ` IS 'riverslot: operators'' overrides of an upstream''s limits (riverslot upstream set); durable, copied into riverslot_upstream'`,
		`CREATE UNLOGGED TABLE IF NOT EXISTS ` + t + ` (
	task text NOT NULL,
	key text NOT NULL,
	rate double precision,
	burst int,
	concurrency int,
	line_tat timestamptz,
	start_tat timestamptz,
	paused_until timestamptz,
	paused_since timestamptz,
	state text NOT NULL DEFAULT 'closed',
	failures int NOT NULL DEFAULT 0,
	in_flight int NOT NULL DEFAULT 0,
	leases jsonb NOT NULL DEFAULT '{}',
	win_start timestamptz,
	win_calls int NOT NULL DEFAULT 0,
	last_rate double precision NOT NULL DEFAULT 0,
	open_until timestamptz,
	open_since timestamptz,
	closed_at timestamptz,
	probe_job bigint,
	probe_until timestamptz,
	calls bigint NOT NULL DEFAULT 0,
	failed bigint NOT NULL DEFAULT 0,
	throttled bigint NOT NULL DEFAULT 0,
	deferred bigint NOT NULL DEFAULT 0,
	skipped bigint NOT NULL DEFAULT 0,
	probes bigint NOT NULL DEFAULT 0,
	opens bigint NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, key)
)`,
		`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS paused_since timestamptz`,
		`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS open_since timestamptz`,
		`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS closed_at timestamptz`,
		`COMMENT ON TABLE ` + t + ` IS 'riverslot: per-upstream limits (operator overrides), rate limiter, 429 pauses and circuit breaker, one row per task and upstream key'`,
		`CREATE UNLOGGED TABLE IF NOT EXISTS ` + j + ` (
	task text NOT NULL,
	key text NOT NULL,
	job_id bigint NOT NULL,
	reserved_at timestamptz,
	throttled boolean NOT NULL DEFAULT false,
	deferred boolean NOT NULL DEFAULT false,
	deferred_at timestamptz,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (task, key, job_id)
)`,
		`ALTER TABLE ` + j + ` ADD COLUMN IF NOT EXISTS deferred_at timestamptz`,
		`COMMENT ON TABLE ` + j + ` IS 'riverslot: places in an upstream''s line: sync jobs holding a place in its rate limit (reserved_at), or waiting for its breaker (deferred)'`,
	}
}

// columns are the columns of the limiter's tables that a version added
// after the table itself (DDL's ADD COLUMN IF NOT EXISTS), by table.
var columns = []struct {
	table string
	names []string
}{
	{Table, []string{"paused_since", "open_since", "closed_at"}},
	{PlacesTable, []string{"deferred_at"}},
}

// Current reports whether the limiter's three tables exist in schema with
// every column this version reads; when not, DDL brings them up to date
// (riverslot.Migrate runs it). It only reads the catalog.
func Current(ctx context.Context, db DB, schema string) (bool, error) {
	q := `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL AND to_regclass($3) IS NOT NULL`
	args := []any{sqlbucket.QualifiedTable(schema, Table), sqlbucket.QualifiedTable(schema, PlacesTable), sqlbucket.QualifiedTable(schema, LimitsTable)}
	for _, c := range columns {
		args = append(args, sqlbucket.QualifiedTable(schema, c.table), c.names)
		q += fmt.Sprintf(` AND (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($%d) AND attname = ANY($%d::text[]) AND NOT attisdropped) = %d`,
			len(args)-1, len(args), len(c.names))
	}
	var ok bool
	err := db.QueryRow(ctx, q, args...).Scan(&ok)
	return ok, wrap(err, "looking up the upstream tables' columns")
}

// Outcome is what a sync did to its upstream.
type Outcome int

const (
	// Succeeded: the upstream answered.
	Succeeded Outcome = iota
	// Failed: the sync failed (counts toward the breaker).
	Failed
	// Throttled: the upstream asked to slow down (429, Retry-After).
	Throttled
	// Neutral: the sync ended without an answer about the upstream (it
	// was cancelled, snoozed, or its node shut down): neither a success
	// nor a failure for the breaker, not a call.
	Neutral
)

// String is the outcome's metric label.
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Throttled:
		return "throttled"
	case Neutral:
		return "neutral"
	}
	return "unknown"
}

// Verdict is what Acquire decided for a sync.
type Verdict int

const (
	// Run: call the upstream now (a lease is held until Release).
	Run Verdict = iota
	// Wait: snooze for Decision.Wait, keeping any place in line.
	Wait
	// Skip: the sync cannot start before its NotAfter; complete it as
	// skipped (Decision.Reason).
	Skip
)

// Reasons a sync is skipped by its upstream's state.
const (
	// SkippedDown: the upstream's breaker stays open (or a probe runs)
	// past the sync's NotAfter.
	SkippedDown = "upstream_down"
	// SkippedThrottled: the upstream's rate limit, or a pause it asked
	// for, has no room for the sync before its NotAfter.
	SkippedThrottled = "upstream_throttled"
)

// Decision is Acquire's answer.
type Decision struct {
	Verdict Verdict
	Wait    time.Duration
	Reason  string // Skip's reason, Wait's cause ("rate", "concurrency", "paused", "open", "probe", "recovery")
	Probe   bool   // Run as the half-open breaker's probe
	// Delay is how long a Run waits before it calls the upstream (at most
	// MaxDelay): its start was given to it under the rate, a moment
	// ahead, so that syncs that River wakes together on one fetch are
	// paced in process instead of sent back to sleep.
	Delay time.Duration
}

// WaitConcurrency is the Reason of a Wait for a lease: the upstream is at
// its in-flight limit.
const WaitConcurrency = "concurrency"

// WaitRecovery is the Reason of a Wait of a sync the breaker deferred,
// after the breaker closed: it comes back as long after the close as it
// was first deferred after the outage began (within its NotAfter), so
// that a recovered upstream does not get every deferred sync at once.
const WaitRecovery = "recovery"

// MaxDelay is the longest Decision.Delay: River's default fetch poll
// interval, how far apart River wakes snoozed jobs that are due.
const MaxDelay = time.Second

// Request names one sync job's use of its upstream.
type Request struct {
	Task   string
	Key    string
	JobID  int64
	Limits Limits // the task's, defaults applied; a key's overrides win
	// NotAfter is the sync's latest start (zero: none): a sync that would
	// wait past it is skipped instead.
	NotAfter time.Time
	// Hold is how long a lease lasts (the sync's timeout and a margin):
	// a lease of a node killed mid-sync expires then.
	Hold time.Duration
	// NoDelay: the sync may not wait in process for its start
	// (Decision.Delay); it takes a place in line instead. The sync worker
	// sets it when enough syncs of the upstream wait in process on its
	// node already, so that one upstream's backlog cannot hold the
	// workers every other upstream needs.
	NoDelay bool
	// Cycle is the task's cycle (zero: not known). Acquire prunes the
	// task's keys idle for longer than PruneIdle or two cycles, the
	// longer (Prune).
	Cycle time.Duration
}

// DB is what the limiter needs of a pool.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Limiter decides and records syncs of the upstreams of River's schema.
type Limiter struct {
	table, places, limits string
}

// New returns the limiter over the tables of schema ("" for the search
// path).
func New(schema string) *Limiter {
	return &Limiter{table: sqlbucket.QualifiedTable(schema, Table), places: sqlbucket.QualifiedTable(schema, PlacesTable),
		limits: sqlbucket.QualifiedTable(schema, LimitsTable)}
}

// state is a key's row as Acquire reads it, with the job's own row, and
// what decide sets for record to write.
type state struct {
	// read
	rate                          float64
	burst, concurrency            int
	lineTAT, startTAT             *time.Time
	pausedUntil                   *time.Time
	pausedSince                   *time.Time // when the pause in force began
	breaker                       string
	openUntil                     *time.Time
	probeJob                      *int64
	probeUntil                    *time.Time
	openSince, closedAt           *time.Time // the last outage: the breaker opened, and closed
	failures                      int
	now                           time.Time
	inFlight                      int
	hasJob                        bool
	reservedAt                    *time.Time
	throttled, deferred           bool
	deferredAt                    *time.Time // the job's first deferral
	overrideRate                  *float64
	overrideBurst, overrideConcur *int
	// the request's
	threshold int
	cooldown  time.Duration
	notAfter  time.Time
	jobID     int64
	hold      time.Duration
	waitSeed  uint64
	noDelay   bool
	// decided
	delay                       time.Duration // a Run's Delay
	newLineTAT, newStartTAT     *time.Time
	reserve                     *time.Time // the job's place in line, kept or taken
	markThrottled, markDeferred bool
	newProbe                    bool
	countSkipped                bool
	leaseRun                    bool
	dropJob                     bool
}

// Acquire decides whether the sync of r may call its upstream now, and
// records the decision: a place in the rate limiter's line, a lease, the
// breaker's probe. One transaction holding the key's row lock. Once an
// hour a node's decision also prunes the task's idle keys (Prune).
func (l *Limiter) Acquire(ctx context.Context, db DB, r Request) (Decision, error) {
	d, err := l.acquire(ctx, db, r)
	if err == nil {
		l.maybePrune(ctx, db, r)
	}
	return d, err
}

// acquire is Acquire without the prune.
func (l *Limiter) acquire(ctx context.Context, db DB, r Request) (Decision, error) {
	if ok, err := l.fast(ctx, db, r); err != nil {
		return Decision{}, err
	} else if ok {
		return Decision{Verdict: Run}, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Decision{}, wrap(err, "starting the upstream's decision")
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit

	s := state{threshold: r.Limits.FailureThreshold, cooldown: r.Limits.Cooldown, notAfter: r.NotAfter, jobID: r.JobID, hold: r.Hold, waitSeed: seed(r.JobID), noDelay: r.NoDelay}
	err = tx.QueryRow(ctx, `WITH u AS (
	INSERT INTO `+l.table+` (task, key, rate, burst, concurrency)
	SELECT $1, $2, o.rate, o.burst, o.concurrency FROM (SELECT 1) x LEFT JOIN `+l.limits+` o ON o.task = $1 AND o.key = $2
	ON CONFLICT (task, key) DO UPDATE SET task = EXCLUDED.task
	RETURNING rate, burst, concurrency, line_tat, start_tat, paused_until, paused_since, state, failures, open_until, probe_job, probe_until, leases, open_since, closed_at)
SELECT u.rate, u.burst, u.concurrency, u.line_tat, u.start_tat, u.paused_until, u.paused_since, u.state, u.failures, u.open_until, u.probe_job, u.probe_until,
	clock_timestamp(),
	(SELECT count(*) FROM jsonb_each_text(u.leases) e WHERE e.key <> $3::text AND e.value::float8 > extract(epoch FROM clock_timestamp())),
	j.job_id IS NOT NULL, j.reserved_at, coalesce(j.throttled, false), coalesce(j.deferred, false),
	u.open_since, u.closed_at, j.deferred_at
FROM u LEFT JOIN `+l.places+` j ON j.task = $1 AND j.key = $2 AND j.job_id = $3`, r.Task, r.Key, r.JobID).
		Scan(&s.overrideRate, &s.overrideBurst, &s.overrideConcur, &s.lineTAT, &s.startTAT, &s.pausedUntil, &s.pausedSince, &s.breaker, &s.failures, &s.openUntil, &s.probeJob, &s.probeUntil,
			&s.now, &s.inFlight, &s.hasJob, &s.reservedAt, &s.throttled, &s.deferred,
			&s.openSince, &s.closedAt, &s.deferredAt)
	if err != nil {
		return Decision{}, wrap(err, "reading the upstream's state")
	}
	s.rate, s.burst, s.concurrency = r.Limits.Rate, r.Limits.Burst, r.Limits.Concurrency
	if s.overrideRate != nil {
		s.rate = *s.overrideRate
	}
	if s.overrideBurst != nil {
		s.burst = *s.overrideBurst
	}
	if s.overrideConcur != nil {
		s.concurrency = *s.overrideConcur
	}
	if s.rate > 0 && s.burst < 1 {
		s.burst = 1
	}
	d := s.decide()
	if err := l.record(ctx, tx, r, &s); err != nil {
		return Decision{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Decision{}, wrap(err, "committing the upstream's decision")
	}
	return d, nil
}

// fast is Acquire's common case in one statement, which holds the key's
// row lock only while it runs: the key exists, is neither paused nor (with
// a breaker) other than closed, no sync waits in line, the start clock and
// the in-flight counter have room, and the job holds no place in line.
// It takes a lease and reports true; anything else goes the slow way (a
// transaction that decides with the whole state, repairs the in-flight
// counter from the leases and clears expired ones).
func (l *Limiter) fast(ctx context.Context, db DB, r Request) (bool, error) {
	var n int
	err := db.QueryRow(ctx, `WITH u AS (
	UPDATE `+l.table+` SET
		start_tat = CASE WHEN coalesce(rate, $4) > 0
			THEN greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp()) + (1e6 / coalesce(rate, $4)) * interval '1 microsecond'
			ELSE start_tat END,
		in_flight = in_flight + 1,
		leases = leases || jsonb_build_object($3::text, extract(epoch FROM clock_timestamp()) + $8::float8 / 1e6),
		updated_at = clock_timestamp()
	WHERE task = $1 AND key = $2
		AND (paused_until IS NULL OR paused_until <= clock_timestamp())
		AND ($6 = 0 OR state = 'closed')
		AND CASE WHEN coalesce(rate, $4) <= 0 THEN true ELSE
			(line_tat IS NULL OR line_tat <= clock_timestamp())
			AND greatest(coalesce(start_tat, clock_timestamp()), clock_timestamp())
				- (greatest(coalesce(burst, $5), 1) - 1) * (1e6 / coalesce(rate, $4)) * interval '1 microsecond' <= clock_timestamp() END
		AND (coalesce(concurrency, $7) = 0 OR in_flight < coalesce(concurrency, $7))
		AND NOT EXISTS (SELECT 1 FROM `+l.places+` j WHERE j.task = $1 AND j.key = $2 AND j.job_id = $3)
	RETURNING 1)
SELECT count(*) FROM u`, r.Task, r.Key, r.JobID, r.Limits.Rate, r.Limits.Burst, r.Limits.FailureThreshold, r.Limits.Concurrency, r.Hold.Microseconds()).Scan(&n)
	if err != nil {
		return false, wrap(err, "deciding the sync with its upstream")
	}
	return n == 1, nil
}

// later returns the later of t and a nullable u.
func later(t time.Time, u *time.Time) time.Time {
	if u != nil && u.After(t) {
		return *u
	}
	return t
}

// decide is Acquire's rule, on the state read under the key's lock; it
// sets what record writes.
//
// The rate limit is two GCRA clocks. start_tat admits actual starts: no
// more than Burst at once and Rate a second after that, however late
// River wakes a snoozed job. line_tat hands out places in line to the
// syncs that must wait, Rate a second: each snoozes until its place, so
// they wake spread out and in the order they came (their scheduled
// order), and a newcomer joins behind them.
func (s *state) decide() Decision {
	now := s.now
	// waitUntil waits until t (plus a spread of up to spread, fixed per
	// job, so that syncs deferred together do not all wake at once), or
	// skips when t is past the sync's NotAfter.
	waitUntil := func(t time.Time, spread time.Duration, cause, skip string) Decision {
		if !s.notAfter.IsZero() && t.After(s.notAfter) {
			// Counted as skipped, not as deferred or throttled.
			s.countSkipped, s.dropJob, s.markDeferred, s.markThrottled = true, true, false, false
			return Decision{Verdict: Skip, Reason: s.skipReason(skip)}
		}
		extra := s.spread(t, spread)
		if !s.notAfter.IsZero() {
			extra = min(extra, s.notAfter.Sub(t)) // never woken past its NotAfter by the spread
		}
		return Decision{Verdict: Wait, Wait: max(t.Sub(now)+extra, time.Millisecond), Reason: cause}
	}
	// leaseWait waits for a lease: asked again after w, or at its NotAfter
	// when that comes first (a lease may free before then), not skipped
	// before its NotAfter for the wait's length.
	leaseWait := func(w time.Duration) Decision {
		t := now.Add(w)
		if !s.notAfter.IsZero() && t.After(s.notAfter) && !now.After(s.notAfter) {
			t = s.notAfter
		}
		return waitUntil(t, 100*time.Millisecond, WaitConcurrency, SkippedThrottled)
	}
	if s.pausedUntil != nil && s.pausedUntil.After(now) {
		// The upstream asked for a pause: every sync waits it out, then
		// takes a new place in line. Each waits past the pause's end as
		// long as it came after the pause began, so that the syncs the
		// pause held come back as spaced as they came, not in a burst;
		// one whose NotAfter comes sooner is spread over the time it has
		// left after the pause, in the same order.
		s.markThrottled = true
		wake := *s.pausedUntil
		if s.pausedSince != nil && now.After(*s.pausedSince) && s.pausedUntil.After(*s.pausedSince) {
			into := now.Sub(*s.pausedSince)
			wake = s.pausedUntil.Add(into)
			if left := s.notAfter.Sub(*s.pausedUntil); !s.notAfter.IsZero() && left > 0 && wake.After(s.notAfter) {
				wake = s.pausedUntil.Add(time.Duration(float64(left) * float64(into) / float64(s.pausedUntil.Sub(*s.pausedSince))))
			}
		}
		return waitUntil(wake, 0, "paused", SkippedThrottled)
	}
	if s.threshold > 0 {
		probe := false
		switch s.breaker {
		case "open":
			if s.openUntil != nil && s.openUntil.After(now) {
				s.markDeferred = true
				// Spread over a cooldown: thousands of deferred syncs
				// waking together at each probe would take every
				// worker's next fetch from the other upstreams.
				return waitUntil(*s.openUntil, s.cooldown, "open", SkippedDown)
			}
			probe = true
		case "half_open":
			switch {
			case s.probeJob != nil && *s.probeJob == s.jobID:
				probe = true // the probe itself, run again
			case s.probeUntil != nil && s.probeUntil.After(now):
				s.markDeferred = true
				// The probe's outcome closes or reopens the breaker; ask
				// again in a quarter cooldown (at least a second), not
				// every second: thousands of deferred syncs would poll
				// the key's row.
				return waitUntil(now.Add(min(max(time.Second, s.cooldown/4), s.probeUntil.Sub(now))), s.cooldown/4, "probe", SkippedDown)
			default:
				probe = true // the probe's node died: this sync probes instead
			}
		}
		if probe {
			// One probe at a time, outside the line: it holds a lease,
			// counts against the rate, and its outcome closes or reopens
			// the breaker.
			s.newProbe, s.leaseRun = true, true
			if s.rate > 0 {
				next := later(now, s.startTAT).Add(time.Duration(float64(time.Second) / s.rate))
				s.newStartTAT = &next
			}
			return Decision{Verdict: Run, Probe: true}
		}
		if wake, ok := s.recovery(); ok && s.breaker == "closed" && wake.After(now) {
			// The breaker closed after an outage that deferred this
			// sync: it comes back as long after the close as it was
			// deferred after the outage began, so that the syncs the
			// outage held come back as spaced as they came, not in one
			// herd. It keeps its deferral (counted once, when it began):
			// should it run out of time, it ran out because the upstream
			// was down.
			s.markDeferred = true
			return waitUntil(wake, 0, WaitRecovery, SkippedDown)
		}
	}
	if s.rate > 0 {
		interval := time.Duration(float64(time.Second) / s.rate)
		tolerance := time.Duration(s.burst-1) * interval
		if s.reservedAt != nil && s.reservedAt.After(now) {
			return Decision{Verdict: Wait, Wait: s.reservedAt.Sub(now), Reason: "rate"}
		}
		joinAt := func(at time.Time) Decision {
			if !s.notAfter.IsZero() && at.After(s.notAfter) {
				s.countSkipped, s.dropJob = true, true
				return Decision{Verdict: Skip, Reason: s.skipReason(SkippedThrottled)}
			}
			next := at.Add(interval)
			s.newLineTAT, s.reserve, s.markThrottled = &next, &at, true
			return Decision{Verdict: Wait, Wait: max(at.Sub(now), time.Millisecond), Reason: "rate"}
		}
		if s.reservedAt == nil && s.lineTAT != nil && s.lineTAT.After(now) {
			return joinAt(*s.lineTAT) // others wait in line: behind them
		}
		start := later(now, s.startTAT)
		if allow := start.Add(-tolerance); allow.After(now) {
			front := s.reservedAt != nil || s.lineTAT == nil || !s.lineTAT.After(now)
			if front && !s.noDelay && allow.Sub(now) <= MaxDelay && (s.notAfter.IsZero() || !allow.After(s.notAfter)) {
				if s.concurrency > 0 && s.inFlight >= s.concurrency {
					// Only the in-flight limit holds it (syncs waiting
					// for their start hold leases too): keep any place,
					// wait for a lease (the sync worker asks again in
					// process for a moment before it snoozes).
					s.markThrottled = true
					s.reserve = s.reservedAt
					return leaseWait(min(max(100*time.Millisecond, interval), time.Second))
				}
				// At the front of the line (its place came, or there is
				// no line) and the next start is a moment away: take it
				// and wait for it in process. Syncs River woke together
				// run paced, at the rate, instead of all but Burst of
				// them going back to sleep until River's next fetch.
				next := start.Add(interval)
				s.newStartTAT, s.leaseRun, s.delay = &next, true, allow.Sub(now)
				return Decision{Verdict: Run, Delay: s.delay}
			}
			if s.reservedAt != nil {
				// At the front of the line, with no start within
				// MaxDelay: keep the place, wait for room.
				s.reserve = s.reservedAt
				return waitUntil(allow, 0, "rate", SkippedThrottled)
			}
			return joinAt(later(allow, s.lineTAT))
		}
		if s.concurrency <= 0 || s.inFlight < s.concurrency {
			next := start.Add(interval)
			s.newStartTAT = &next
		}
	}
	if s.concurrency > 0 && s.inFlight >= s.concurrency {
		// Keeps any place in line, and tries again soon.
		s.markThrottled = true
		s.reserve = s.reservedAt
		w := 100 * time.Millisecond
		if s.rate > 0 {
			w = max(w, time.Duration(float64(time.Second)/s.rate))
		}
		return leaseWait(min(w, time.Second))
	}
	s.leaseRun = true
	return Decision{Verdict: Run}
}

// recovery returns when a sync the breaker deferred comes back after the
// breaker closed (false for a sync it did not defer in that outage): as
// long after the close (closed_at) as it was first deferred after the
// outage began (open_since), in the order they came. One whose NotAfter
// comes sooner is spread over the time it has left after the close, less
// a margin (half of it, at most MaxDelay: River wakes a snoozed job up to
// a fetch interval late, and a sync that starts after its NotAfter is
// stale), in the same order; one with no time left is not held.
//
// Every node computes the same wake from the same rows: a sync asked
// again before its wake waits for the same moment, and one asked after it
// goes on under the limits.
func (s *state) recovery() (time.Time, bool) {
	if !s.deferred || s.deferredAt == nil || s.openSince == nil || s.closedAt == nil ||
		!s.closedAt.After(*s.openSince) || s.deferredAt.After(*s.closedAt) {
		return time.Time{}, false
	}
	outage := s.closedAt.Sub(*s.openSince)
	// A sync deferred in an earlier outage, still waiting: first.
	into := max(s.deferredAt.Sub(*s.openSince), 0)
	wake := s.closedAt.Add(into)
	if s.notAfter.IsZero() {
		return wake, true
	}
	left := s.notAfter.Sub(*s.closedAt)
	if left <= 0 {
		return time.Time{}, false
	}
	room := left - min(left/2, MaxDelay)
	if wake.After(s.closedAt.Add(room)) {
		wake = s.closedAt.Add(time.Duration(float64(room) * float64(into) / float64(outage)))
	}
	return wake, true
}

// skipReason is reason, or SkippedDown for a sync the breaker deferred
// before: it ran out of time because the upstream was down, even when the
// line after the outage is what it could not get through.
func (s *state) skipReason(reason string) string {
	if s.deferred {
		return SkippedDown
	}
	return reason
}

// orderSpan is the range of NotAfter that spread orders wake-ups over.
const orderSpan = 2 * time.Minute

// spread returns where in [0, spread) the job wakes after t: a sync whose
// NotAfter is within orderSpan of t in the first half, ordered by it (the
// earliest deadline first, so that after a pause or an outage the syncs
// with the least time left take the first places in line), the others in
// the second half, at a place fixed per job (a 24 h cycle's syncs, hours
// from their deadlines, would otherwise all wake at once).
func (s *state) spread(t time.Time, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	jitter := float64(s.waitSeed%1024) / 1024
	if s.notAfter.IsZero() {
		return time.Duration(jitter * float64(spread))
	}
	if left := s.notAfter.Sub(t); left < orderSpan {
		return time.Duration(max(float64(left)/float64(orderSpan), 0) * float64(spread) / 2)
	}
	return time.Duration((1 + jitter) * float64(spread) / 2)
}

// record writes what decide set, in tx.
func (l *Limiter) record(ctx context.Context, tx pgx.Tx, r Request, s *state) error {
	var throttledInc, deferredInc, skippedInc, probesInc int
	if s.markThrottled && !s.throttled {
		throttledInc = 1
	}
	if s.markDeferred && !s.deferred {
		deferredInc = 1
	}
	if s.countSkipped {
		skippedInc = 1
	}
	var (
		probeJob   *int64
		probeUntil *time.Time
	)
	if s.newProbe {
		probesInc = 1
		t := s.now.Add(s.hold)
		probeJob, probeUntil = &s.jobID, &t
	}
	// The in-flight counter the fast path reads, repaired from the live
	// leases (a lease of a killed node expires; its count would not).
	inFlight := s.inFlight
	if s.leaseRun {
		inFlight++
	}
	if _, err := tx.Exec(ctx, `UPDATE `+l.table+` SET
	line_tat = coalesce($3, line_tat),
	start_tat = coalesce($4, start_tat),
	state = CASE WHEN $5::bigint IS NOT NULL THEN 'half_open' ELSE state END,
	probe_job = CASE WHEN $5::bigint IS NOT NULL THEN $5 ELSE probe_job END,
	probe_until = CASE WHEN $5::bigint IS NOT NULL THEN $6 ELSE probe_until END,
	throttled = throttled + $7, deferred = deferred + $8, skipped = skipped + $9, probes = probes + $10,
	in_flight = $12,
	leases = (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') FROM jsonb_each(leases) e
		WHERE e.key <> $13::text AND (e.value)::float8 > extract(epoch FROM $11::timestamptz))
		|| CASE WHEN $14 THEN jsonb_build_object($13::text, extract(epoch FROM $11::timestamptz) + $15::float8 / 1e6) ELSE '{}' END,
	updated_at = $11
WHERE task = $1 AND key = $2`, r.Task, r.Key, s.newLineTAT, s.newStartTAT, probeJob, probeUntil, throttledInc, deferredInc, skippedInc, probesInc, s.now, inFlight,
		fmt.Sprint(r.JobID), s.leaseRun, (r.Hold + s.delay).Microseconds()); err != nil {
		return wrap(err, "recording the upstream's decision")
	}
	// Places of jobs River deleted while they waited (they never came
	// back); expired leases went above.
	// A job that waits asks again at least every cooldown, at its
	// place, or at its wake after an outage (at the latest the close plus
	// its deferral's time into the outage, recovery); one not heard of
	// for an hour past all of them was cancelled or deleted while it
	// waited.
	if _, err := tx.Exec(ctx, `DELETE FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id <> $3
	AND greatest(coalesce(reserved_at, updated_at), updated_at,
		CASE WHEN deferred THEN $5::timestamptz + greatest(deferred_at - $6::timestamptz, interval '0') END) < $4::timestamptz - interval '1 hour'`,
		r.Task, r.Key, r.JobID, s.now, s.closedAt, s.openSince); err != nil {
		return wrap(err, "clearing the upstream's abandoned places")
	}
	switch {
	case s.leaseRun && s.newProbe && s.deferred:
		// A deferred sync that runs as the probe keeps its deferral (out
		// of the line): should the probe fail, it waits for the breaker
		// again from its first deferral, counted once; Release drops the
		// place when the probe closes the breaker.
		if _, err := tx.Exec(ctx, `UPDATE `+l.places+` SET reserved_at = NULL, updated_at = $4
WHERE task = $1 AND key = $2 AND job_id = $3`, r.Task, r.Key, r.JobID, s.now); err != nil {
			return wrap(err, "recording the upstream's decision")
		}
	case s.dropJob || s.leaseRun:
		if s.hasJob {
			if _, err := tx.Exec(ctx, `DELETE FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id = $3`, r.Task, r.Key, r.JobID); err != nil {
				return wrap(err, "recording the upstream's decision")
			}
		}
	case s.reserve != nil || s.markThrottled || s.markDeferred:
		// deferred_at: the job's first deferral, kept.
		var deferredAt *time.Time
		if s.markDeferred {
			deferredAt = &s.now
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+l.places+` (task, key, job_id, reserved_at, throttled, deferred, deferred_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (task, key, job_id) DO UPDATE SET reserved_at = EXCLUDED.reserved_at, updated_at = now(),
	throttled = `+l.places+`.throttled OR EXCLUDED.throttled, deferred = `+l.places+`.deferred OR EXCLUDED.deferred,
	deferred_at = coalesce(`+l.places+`.deferred_at, EXCLUDED.deferred_at)`,
			r.Task, r.Key, r.JobID, s.reserve, s.markThrottled || s.throttled, s.markDeferred || s.deferred, deferredAt); err != nil {
			return wrap(err, "recording the upstream's decision")
		}
	}
	return nil
}

// Release records how the sync of r went and gives back its lease: a
// success closes a half-open breaker (and resets the failure count), a
// failure counts toward FailureThreshold (and reopens a half-open
// breaker), a throttle pauses the whole upstream for retryAfter on every
// node. One statement.
//
// It drops the sync's place, but for a deferred sync that ran as the probe
// and did not succeed: the breaker did not close, and the sync keeps its
// first deferral (the only place a running sync holds, record).
func (l *Limiter) Release(ctx context.Context, db DB, r Request, outcome Outcome, retryAfter time.Duration) (Released, error) {
	var rel Released
	err := db.QueryRow(ctx, `WITH j AS (DELETE FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id = $3 AND ($4 = 0 OR NOT deferred))
UPDATE `+l.table+` u SET
	calls = calls + CASE WHEN $4 = 3 THEN 0 ELSE 1 END,
	win_calls = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN 1 ELSE win_calls + 1 END,
	last_rate = CASE WHEN win_start IS NOT NULL AND clock_timestamp() - win_start >= interval '10 seconds'
		THEN win_calls / extract(epoch FROM clock_timestamp() - win_start)::float8 ELSE last_rate END,
	win_start = CASE WHEN win_start IS NULL OR clock_timestamp() - win_start >= interval '10 seconds' THEN clock_timestamp() ELSE win_start END,
	in_flight = greatest(in_flight - CASE WHEN leases ? $3::text THEN 1 ELSE 0 END, 0),
	leases = leases - $3::text,
	failed = failed + CASE WHEN $4 = 1 THEN 1 ELSE 0 END,
	failures = CASE $4 WHEN 0 THEN 0 WHEN 1 THEN failures + 1 ELSE failures END,
	paused_until = CASE WHEN $4 = 2 THEN greatest(coalesce(paused_until, clock_timestamp()), clock_timestamp() + $5 * interval '1 microsecond') ELSE paused_until END,
	paused_since = CASE WHEN $4 = 2 AND (paused_until IS NULL OR paused_until <= clock_timestamp()) THEN clock_timestamp() ELSE paused_since END,
	state = CASE
		WHEN $4 = 0 AND state = 'half_open' AND probe_job = $3 THEN 'closed'
		WHEN $4 = 1 AND $6 > 0 AND (state = 'closed' AND failures + 1 >= $6 OR state = 'half_open' AND probe_job = $3) THEN 'open'
		WHEN $4 = 2 AND state = 'half_open' AND probe_job = $3 THEN 'open'
		ELSE state END,
	open_until = CASE
		WHEN $4 = 1 AND $6 > 0 AND (state = 'closed' AND failures + 1 >= $6 OR state = 'half_open' AND probe_job = $3) THEN clock_timestamp() + $7 * interval '1 microsecond'
		WHEN $4 = 2 AND state = 'half_open' AND probe_job = $3 THEN clock_timestamp() + $5 * interval '1 microsecond'
		ELSE open_until END,
	opens = opens + CASE WHEN $4 = 1 AND $6 > 0 AND state = 'closed' AND failures + 1 >= $6 THEN 1 ELSE 0 END,
	-- The outage: from the failure that opened the breaker (a failed
	-- probe reopens it within the same outage) to the probe that closed it.
	open_since = CASE WHEN $4 = 1 AND $6 > 0 AND state = 'closed' AND failures + 1 >= $6 THEN clock_timestamp() ELSE open_since END,
	closed_at = CASE WHEN $4 = 0 AND state = 'half_open' AND probe_job = $3 THEN clock_timestamp() ELSE closed_at END,
	probe_job = CASE WHEN probe_job = $3 THEN NULL ELSE probe_job END,
	probe_until = CASE WHEN probe_job = $3 THEN NULL ELSE probe_until END,
	updated_at = clock_timestamp()
WHERE task = $1 AND key = $2
RETURNING state = 'open', open_until, clock_timestamp()`, r.Task, r.Key, r.JobID, int(outcome), retryAfter.Microseconds(), r.Limits.FailureThreshold, r.Limits.Cooldown.Microseconds()).
		Scan(&rel.Open, &rel.OpenUntil, &rel.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return Released{}, nil // the key's row is gone (dropped by hand): nothing to record
	}
	return rel, wrap(err, "recording the sync's outcome for its upstream")
}

// MarkDeferred records that the sync of r waits for its upstream's open
// breaker after it failed (Released.DeferFor): it holds no place in line,
// and should it run out of time it is skipped as upstream_down. A sync the
// breaker deferred before (a failed probe) keeps its first deferral, and is
// not counted again.
func (l *Limiter) MarkDeferred(ctx context.Context, db DB, r Request) error {
	_, err := db.Exec(ctx, `WITH p AS (SELECT deferred FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id = $3),
j AS (INSERT INTO `+l.places+` (task, key, job_id, deferred, deferred_at) VALUES ($1, $2, $3, true, clock_timestamp())
	ON CONFLICT (task, key, job_id) DO UPDATE SET deferred = true, reserved_at = NULL, updated_at = now(),
		deferred_at = coalesce(`+l.places+`.deferred_at, clock_timestamp())
	RETURNING 1)
UPDATE `+l.table+` SET deferred = deferred + 1 WHERE task = $1 AND key = $2 AND EXISTS (SELECT 1 FROM j)
	AND NOT coalesce((SELECT deferred FROM p), false)`, r.Task, r.Key, r.JobID)
	return wrap(err, "recording the deferred sync")
}

// Stale records that the sync of r completes as stale (it started after
// its NotAfter) and says whether its upstream had held it: its breaker
// deferred it (it ran out of time because the upstream was down) or it
// waited in the rate limiter's line. Such a sync counts as skipped by the
// upstream.
func (l *Limiter) Stale(ctx context.Context, db DB, r Request) (deferred, throttled bool, err error) {
	err = db.QueryRow(ctx, `WITH d AS (DELETE FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id = $3 RETURNING deferred, throttled),
u AS (UPDATE `+l.table+` SET skipped = skipped + 1 WHERE task = $1 AND key = $2 AND EXISTS (SELECT 1 FROM d WHERE deferred OR throttled) RETURNING 1)
SELECT coalesce((SELECT deferred FROM d), false), coalesce((SELECT throttled FROM d), false), EXISTS (SELECT 1 FROM u)`, r.Task, r.Key, r.JobID).Scan(&deferred, &throttled, new(bool))
	return deferred, throttled, wrap(err, "recording the stale sync")
}

// Forget drops the sync of r's place in line or deferral, for a sync that
// ends before it asks again (its account is gone, another sync of it ran).
func (l *Limiter) Forget(ctx context.Context, db DB, r Request) error {
	_, err := db.Exec(ctx, `DELETE FROM `+l.places+` WHERE task = $1 AND key = $2 AND job_id = $3`, r.Task, r.Key, r.JobID)
	return wrap(err, "forgetting the sync's place")
}

// Released is the upstream's breaker after Release.
type Released struct {
	// Open: the breaker is open (this failure may have opened it) until
	// OpenUntil, by the database's clock Now.
	Open      bool
	OpenUntil *time.Time
	Now       time.Time
}

// DeferFor returns how long a sync that failed while the breaker is open
// waits before it asks again (0 when the breaker is not open).
func (r Released) DeferFor() time.Duration {
	if !r.Open || r.OpenUntil == nil || !r.OpenUntil.After(r.Now) {
		return 0
	}
	return r.OpenUntil.Sub(r.Now)
}

// Override is an operator's change of one key's limits; a nil field keeps
// the current override, Clear drops them all (the task's limits apply).
type Override struct {
	Rate        *float64
	Burst       *int
	Concurrency *int
	Clear       bool
}

// Validate returns an error naming the flag or field.
func (o Override) Validate() error {
	var errs []error
	if o.Rate != nil && (*o.Rate < 0 || math.IsNaN(*o.Rate) || math.IsInf(*o.Rate, 0)) {
		errs = append(errs, fmt.Errorf("rate must be a finite number of syncs per second, 0 for no limit; got %v", *o.Rate))
	}
	if o.Burst != nil && *o.Burst < 0 {
		errs = append(errs, fmt.Errorf("burst must be 0 or more; got %d", *o.Burst))
	}
	if o.Concurrency != nil && *o.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency must be 0 (no limit) or more; got %d", *o.Concurrency))
	}
	return errors.Join(errs...)
}

// Set records o for (task, key), creating the key's row when the key has
// not synced yet. Running syncs read it on their next decision: no deploy.
func (l *Limiter) Set(ctx context.Context, db DB, task, key string, o Override) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("key is %d bytes; upstream keys are at most %d", len(key), MaxKeyLen)
	}
	// The durable record first, then the running state's copy, which a
	// PostgreSQL crash empties (the next sync of the key copies it back).
	_, err := db.Exec(ctx, `WITH o AS (
	INSERT INTO `+l.limits+` (task, key, rate, burst, concurrency) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (task, key) DO UPDATE SET
		rate = CASE WHEN $6 THEN NULL ELSE coalesce(EXCLUDED.rate, `+l.limits+`.rate) END,
		burst = CASE WHEN $6 THEN NULL ELSE coalesce(EXCLUDED.burst, `+l.limits+`.burst) END,
		concurrency = CASE WHEN $6 THEN NULL ELSE coalesce(EXCLUDED.concurrency, `+l.limits+`.concurrency) END,
		updated_at = clock_timestamp()
	RETURNING rate, burst, concurrency)
INSERT INTO `+l.table+` (task, key, rate, burst, concurrency) SELECT $1, $2, rate, burst, concurrency FROM o
ON CONFLICT (task, key) DO UPDATE SET rate = EXCLUDED.rate, burst = EXCLUDED.burst, concurrency = EXCLUDED.concurrency,
	-- A new rate restarts the clocks: places handed out at the old one
	-- would keep newcomers behind a line paced for it.
	line_tat = CASE WHEN EXCLUDED.rate IS DISTINCT FROM `+l.table+`.rate OR EXCLUDED.burst IS DISTINCT FROM `+l.table+`.burst THEN NULL ELSE `+l.table+`.line_tat END,
	start_tat = CASE WHEN EXCLUDED.rate IS DISTINCT FROM `+l.table+`.rate OR EXCLUDED.burst IS DISTINCT FROM `+l.table+`.burst THEN NULL ELSE `+l.table+`.start_tat END,
	updated_at = clock_timestamp()`,
		task, key, o.Rate, o.Burst, o.Concurrency, o.Clear)
	return wrap(err, "setting the upstream's limits")
}

// State is one key's row, as List reads it.
type State struct {
	Task string `json:"task"`
	Key  string `json:"key"`
	// Rate, Burst and Concurrency are the operator's overrides (nil: the
	// task's limits apply).
	Rate        *float64 `json:"rate_override"`
	Burst       *int     `json:"burst_override"`
	Concurrency *int     `json:"concurrency_override"`
	// Breaker is "closed", "open" or "half_open"; OpenUntil is when an
	// open breaker lets a probe through.
	Breaker     string     `json:"breaker"`
	OpenUntil   *time.Time `json:"open_until,omitempty"`
	PausedUntil *time.Time `json:"paused_until,omitempty"`
	// Failures counts consecutive failed syncs.
	Failures int `json:"failures"`
	// InFlight is the syncs holding a lease now, Waiting those holding a
	// place in the rate limiter's line.
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting"`
	// RateNow is calls a second over the last window of about 10 s.
	RateNow float64 `json:"rate_now"`
	// Counters since the key's first sync.
	Calls     int64     `json:"calls"`
	Failed    int64     `json:"failed"`
	Throttled int64     `json:"throttled"`
	Deferred  int64     `json:"deferred"`
	Skipped   int64     `json:"skipped"`
	Probes    int64     `json:"probes"`
	Opens     int64     `json:"opens"`
	UpdatedAt time.Time `json:"updated_at"`
}

// stateColumns are State's columns of a row u, in scanState's order.
const stateColumns = `u.task, u.key, u.rate, u.burst, u.concurrency, u.state, u.open_until, u.paused_until, u.failures,
	(SELECT count(*) FROM jsonb_each_text(u.leases) e WHERE e.value::float8 > extract(epoch FROM clock_timestamp())),
	(SELECT count(*) FROM %s x WHERE x.task = u.task AND x.key = u.key AND x.reserved_at IS NOT NULL),
	CASE WHEN u.win_start IS NULL THEN 0
		WHEN clock_timestamp() - u.win_start < interval '10 seconds' THEN u.last_rate
		ELSE u.win_calls / extract(epoch FROM clock_timestamp() - u.win_start)::float8 END,
	u.calls, u.failed, u.throttled, u.deferred, u.skipped, u.probes, u.opens, u.updated_at`

func scanState(row pgx.CollectableRow) (State, error) {
	var s State
	err := row.Scan(&s.Task, &s.Key, &s.Rate, &s.Burst, &s.Concurrency, &s.Breaker, &s.OpenUntil, &s.PausedUntil, &s.Failures,
		&s.InFlight, &s.Waiting, &s.RateNow, &s.Calls, &s.Failed, &s.Throttled, &s.Deferred, &s.Skipped, &s.Probes, &s.Opens, &s.UpdatedAt)
	return s, err
}

// List returns the keys of task ("" for every task), by task and key,
// at most limit after the key after (keyset pagination within one task;
// "" starts at the first key, the task's default upstream "" included).
func (l *Limiter) List(ctx context.Context, db DB, task, after string, limit int) ([]State, error) {
	if task == "" && after != "" {
		return nil, errors.New("listing after a key needs a task: keys are paged within one task")
	}
	if limit < 2 {
		// A page of one holding only the default key "" could not be
		// continued (after "" is the first page).
		return nil, fmt.Errorf("limit must be at least 2, got %d", limit)
	}
	rows, err := db.Query(ctx, `SELECT `+fmt.Sprintf(stateColumns, l.places)+`
FROM `+l.table+` u WHERE ($1 = '' OR u.task = $1) AND ($2 = '' OR u.key > $2) ORDER BY u.task, u.key LIMIT $3`, task, after, limit)
	if err != nil {
		return nil, wrap(err, "listing the upstreams")
	}
	out, err := pgx.CollectRows(rows, scanState)
	return out, wrap(err, "listing the upstreams")
}

// Summary is a task's upstreams at a glance: how many, how many with a
// breaker not closed, and the n that most need a look (breaker not closed
// first, then paused, then by syncs skipped, then by syncs throttled).
func (l *Limiter) Summary(ctx context.Context, db DB, task string, n int) (keys, notClosed int, top []State, err error) {
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'closed') FROM `+l.table+` WHERE task = $1`, task).Scan(&keys, &notClosed); err != nil {
		return 0, 0, nil, wrap(err, "summing up the upstreams")
	}
	rows, err := db.Query(ctx, `SELECT `+fmt.Sprintf(stateColumns, l.places)+`
FROM `+l.table+` u WHERE u.task = $1
ORDER BY u.state <> 'closed' DESC, coalesce(u.paused_until > clock_timestamp(), false) DESC, u.skipped DESC, u.throttled DESC, u.key LIMIT $2`, task, n)
	if err != nil {
		return 0, 0, nil, wrap(err, "summing up the upstreams")
	}
	top, err = pgx.CollectRows(rows, scanState)
	return keys, notClosed, top, wrap(err, "summing up the upstreams")
}

// ErrMissing is returned when the limiter's tables do not exist.
var ErrMissing = errors.New("riverslot's upstream tables are missing: run riverslot.Migrate on River's schema to create them")

func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("error %s: %w", what, ErrMissing)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "42703" {
		// A column this version reads is missing: the tables were made
		// by an earlier version (Current, DDL).
		return fmt.Errorf("error %s: riverslot's upstream tables are out of date, run riverslot.Migrate on River's schema: %w", what, err)
	}
	return fmt.Errorf("error %s: %w", what, err)
}

// seed spreads a job's wake-up inside a window, the same for the job on
// every try.
func seed(jobID int64) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.FormatInt(jobID, 10)))
	return h.Sum64()
}
