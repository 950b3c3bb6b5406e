// Package serve is riverslot serve: periodic HTTP calls as a service. A
// schedule (a URL to call every period) is an account of a riverslot task
// per period, in the table riverslot_schedule: its id gives it a fixed
// place in the period, the same second of every period, spread evenly with
// every other schedule of that period, and adding or deleting schedules
// moves no one. The call is the task's sync.
package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// callsQueue is the River queue of the calls.
const callsQueue = "riverslot_calls"

// Tables of the service, in its schema (River's).
const (
	SchedulesTable = "riverslot_schedule"
	CallsTable     = "riverslot_call"
	TokensTable    = "riverslot_token"
)

// Limits of what a schedule and a call may carry.
const (
	MaxBody         = 64 << 10 // a schedule's body, and a call's answer read
	MaxHeaders      = 32
	MaxHeaderBytes  = 8 << 10
	MaxRequestBytes = 128 << 10 // an API request
	MaxRetries      = 10
	MaxTimeout      = time.Minute
	DefaultTimeout  = 10 * time.Second
	DefaultRetries  = 3
	DefaultHistory  = 7 * 24 * time.Hour
	// MinPeriod is the shortest period: riverslot's shortest cycle.
	MinPeriod = 16 * time.Second

	// Monthly is the period "monthly": calendar months in the server's
	// MonthLocation (stored as period_ms -1). A monthly schedule's place
	// is a fixed fraction of every month (riverslot.Task.Monthly).
	Monthly = -time.Millisecond
)

// Config configures a Server.
type Config struct {
	// Pool is the database of River's tables and the service's.
	Pool *pgxpool.Pool
	// Schema holds them (required).
	Schema string
	// Periods are the periods schedules may have, one riverslot task each
	// (default 1m, 1h, 24h); Monthly for calendar months.
	Periods []time.Duration
	// MonthLocation is the time zone of the Monthly period's months
	// (default UTC).
	MonthLocation *time.Location
	// Guard checks targets (default: private targets refused).
	Guard *Guard
	// History is how long calls, and deleted schedules, stay readable
	// (default 7 days).
	History time.Duration
	// HostLimits are each upstream's limits (an upstream is a schedule's
	// upstream, by default its URL's host).
	HostLimits riverslot.UpstreamLimits
	// TenantQuota is a new tenant's quota unless POST /v1/tenants gives
	// one (default: DefaultMaxSchedules schedules, no calls-per-second
	// quota; the default tenant has none).
	TenantQuota TenantQuota
	// Logger (default: discard).
	Logger *slog.Logger

	// Authenticate decides who a request to the API speaks for, in place
	// of the service's bearer tokens: a team that mounts Handler behind
	// its own authentication returns the Principal its middleware found
	// (the tenant and the scope), or an error, which the API answers 401
	// without its text (the error is logged at debug). Every endpoint's
	// scope (Endpoints) and every tenant's isolation apply to its
	// Principal as to a token's. Return Server.TokenAuth(r) for requests
	// the team's scheme leaves to the service's tokens. Defaults to nil:
	// the service's tokens only (TokenAuth).
	Authenticate func(r *http.Request) (Principal, error)
	// CatchUpAfter is how late a period's call may start after its place
	// and still be its call at its place. A call that starts later
	// because the service was not there at its place (down, stopped, or
	// without a free worker: its job was due, or queued by its slot's
	// late fan-out, longer than this ago), of a schedule that existed and
	// was unchanged at its place, follows the schedule's catch_up:
	// CatchUpSkip records a miss (MissedServerDown) and calls no more
	// this period, CatchUpOne calls at once. A service up but so busy
	// that a call waits this long counts as absent too, so keep it well
	// above the service's worst stall (River's fetch poll, a leader's
	// failover: 15-20 s). A period's calls use at most a third of the
	// period. Defaults to CatchUpAfterDefault (1 min); at least
	// CatchUpAfterMin (5 s).
	CatchUpAfter time.Duration
	// MissedInterval is how often Run looks for the calls that ended
	// periods did not make (RecordMissed); at least MissedIntervalMin and
	// at most the shortest period. Defaults to MissedIntervalDefault
	// (10 s).
	MissedInterval time.Duration
	// PruneInterval is how often Run deletes calls, and schedules
	// deleted, older than History (Prune); at least MissedIntervalMin and
	// at most History. Defaults to PruneIntervalDefault (1 minute).
	PruneInterval time.Duration
}

// Defaults and bounds of Config's intervals.
const (
	CatchUpAfterDefault   = time.Minute
	CatchUpAfterMin       = 5 * time.Second
	MissedIntervalDefault = 10 * time.Second
	MissedIntervalMin     = time.Second
	PruneIntervalDefault  = time.Minute
)

// Server is the service's state: its tasks and its HTTP API.
type Server struct {
	cfg           Config
	tokenSet      tokenSet
	scheduler     *riverslot.Scheduler
	tasks         map[time.Duration]riverslot.TaskInfo
	http          *http.Client
	schedules     string // qualified table names
	calls         string
	tokens        string
	tenants       string
	defaultTenant atomic.Pointer[uuid.UUID]
	// inserter queues triggered calls (a River client that works no job).
	inserter *river.Client[pgx.Tx]
	// limiter is riverslot's upstream limiter, which triggered and
	// caught-up calls go through as the calls at their places do, and
	// every call through its tenant's quota (QuotaTask).
	limiter       *upstream.Limiter
	upstreamTable string // the limiter's state, riverslot_upstream
	// ledger is riverslot's ledger, and begun, per task, whether its
	// current period is bootstrapped (read at most every 2 s).
	ledger  ledger.Ledger
	beganMu sync.Mutex
	began   map[string]periodBegun
	// started is, per task, the begun fan-outs of its current period
	// (slotStarted).
	startedMu sync.Mutex
	started   map[string]startedRead
	// missedDone holds, per task, the periods RecordMissed finished.
	missedMu   sync.Mutex
	missedDone map[string]map[time.Time]bool
}

// TaskName is the riverslot task of period.
func TaskName(period time.Duration) string {
	return "http-" + FormatPeriod(period)
}

// FormatPeriod writes a period as the API does: "32s", "1m", "1h", "24h",
// "1h30m".
func FormatPeriod(d time.Duration) string {
	if d == Monthly {
		return "monthly"
	}
	s := d.String() // 1h0m0s, 1m0s, 32s, 1h30m0s
	s, _ = strings.CutSuffix(s, "m0s")
	if strings.HasSuffix(d.String(), "m0s") {
		s += "m"
	}
	if before, ok := strings.CutSuffix(s, "h0m"); ok {
		s = before + "h"
	}
	return s
}

// ParsePeriod reads a period: a Go duration such as "32s", "1h" or "24h",
// "daily", "hourly", or "monthly" (Monthly). It returns an error that names the nearest
// periods the service can spread.
func ParsePeriod(s string) (time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "hourly":
		return time.Hour, nil
	case "daily":
		return 24 * time.Hour, nil
	case "monthly":
		return Monthly, nil
	case "":
		return 0, errors.New(`is required: a duration such as "32s", "1h" or "24h", or "monthly"`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf(`must be a duration such as "32s", "1h" or "24h", or "monthly", got %q`, s)
	}
	if _, err := slotplan.NewBuckets(d, slotplan.BucketsTwoByte); err != nil || d < MinPeriod {
		lo := max(d.Truncate(2*time.Second), MinPeriod)
		hi := lo + 2*time.Second
		if d <= MinPeriod {
			return 0, fmt.Errorf("%s is too short: a period is at least %s (River starts scheduled jobs every 5 s)", d, FormatPeriod(MinPeriod))
		}
		return 0, fmt.Errorf("%s cannot be spread evenly (a period must be a whole number of seconds, a multiple of 2 s, at least %s); the nearest are %s and %s",
			d, FormatPeriod(MinPeriod), FormatPeriod(lo), FormatPeriod(hi))
	}
	return d, nil
}

// New returns a server; Migrate must have run on cfg.Schema.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("serve: Config.Pool is required")
	}
	if cfg.Schema == "" {
		return nil, errors.New("serve: Config.Schema is required: the schema of River's tables and the service's")
	}
	if len(cfg.Periods) == 0 {
		cfg.Periods = []time.Duration{time.Minute, time.Hour, 24 * time.Hour}
	}
	if cfg.Guard == nil {
		cfg.Guard = &Guard{}
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.History < time.Hour {
		return nil, fmt.Errorf("serve: Config.History must be at least 1h (how long calls stay readable), got %s", cfg.History)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.CatchUpAfter = cmp.Or(cfg.CatchUpAfter, CatchUpAfterDefault)
	cfg.MissedInterval = cmp.Or(cfg.MissedInterval, MissedIntervalDefault)
	cfg.PruneInterval = cmp.Or(cfg.PruneInterval, PruneIntervalDefault)
	if cfg.CatchUpAfter < CatchUpAfterMin {
		return nil, fmt.Errorf("serve: Config.CatchUpAfter must be at least %s (how late a call may start and still be its call at its place), got %s", CatchUpAfterMin, cfg.CatchUpAfter)
	}
	if cfg.MissedInterval < MissedIntervalMin {
		return nil, fmt.Errorf("serve: Config.MissedInterval must be at least %s (how often Run looks for missed calls), got %s", MissedIntervalMin, cfg.MissedInterval)
	}
	if cfg.PruneInterval < MissedIntervalMin || cfg.PruneInterval > cfg.History {
		return nil, fmt.Errorf("serve: Config.PruneInterval must be between %s and History (%s), got %s", MissedIntervalMin, cfg.History, cfg.PruneInterval)
	}
	s := &Server{cfg: cfg, tasks: map[time.Duration]riverslot.TaskInfo{},
		schedules:     pgx.Identifier{cfg.Schema, SchedulesTable}.Sanitize(),
		calls:         pgx.Identifier{cfg.Schema, CallsTable}.Sanitize(),
		tokens:        pgx.Identifier{cfg.Schema, TokensTable}.Sanitize(),
		tenants:       pgx.Identifier{cfg.Schema, TenantsTable}.Sanitize(),
		ledger:        ledger.New(cfg.Schema),
		limiter:       upstream.New(cfg.Schema),
		upstreamTable: sqlbucket.QualifiedTable(cfg.Schema, upstream.Table),
		began:         map[string]periodBegun{},
		started:       map[string]startedRead{},
	}
	switch q := &s.cfg.TenantQuota; {
	case *q == TenantQuota{}:
		q.MaxSchedules = DefaultMaxSchedules
	case q.MaxSchedules < 0:
		q.MaxSchedules = 0 // none
	}
	if q := s.cfg.TenantQuota; q.MaxSchedules > 10_000_000 || q.MaxCallsPerSecond < 0 || q.MaxCallsPerSecond > 1e6 {
		return nil, fmt.Errorf("serve: Config.TenantQuota: MaxSchedules must be at most 10000000 (-1: no quota) and MaxCallsPerSecond between 0 (no quota) and 1000000, got %d and %g", q.MaxSchedules, q.MaxCallsPerSecond)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: cfg.Guard.Control}
	s.http = &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil, // never through a proxy the environment names
			DialContext:            dialer.DialContext,
			MaxResponseHeaderBytes: 64 << 10,
			MaxIdleConnsPerHost:    8,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
		},
		// A redirect is the target's answer, not a new target.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if s.cfg.MonthLocation == nil {
		s.cfg.MonthLocation = time.UTC
	}
	seen := map[time.Duration]bool{}
	var (
		tasks    []riverslot.Task
		periodOf []time.Duration // each task's period
	)
	for _, p := range cfg.Periods {
		if _, err := ParsePeriod(FormatPeriod(p)); err != nil {
			return nil, fmt.Errorf("serve: period %s: %w", p, err)
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		periodOf = append(periodOf, p)
		if p == Monthly {
			tasks = append(tasks, s.task(p, riverslot.Task{Monthly: true, Location: s.cfg.MonthLocation}))
			continue
		}
		buckets := slotplan.BucketsTwoByte // 24h: 1,024 slots
		if p < time.Hour {
			// 16 slots of 1 s for 16 s, not 128 fan-outs of 125 ms.
			buckets = slotplan.Buckets
		}
		tasks = append(tasks, s.task(p, riverslot.Task{Cycle: p, Buckets: buckets}))
	}
	// The server's own sorted list, each period once (the caller's slice
	// is left as it was).
	s.cfg.Periods = slices.Sorted(maps.Keys(seen))
	for _, p := range s.cfg.Periods { // sorted: the first fixed period is the shortest (Monthly is -1 ms)
		if p > 0 && cfg.MissedInterval > p {
			return nil, fmt.Errorf("serve: Config.MissedInterval must be at most the shortest period, %s (RecordMissed looks at the last 4 ended periods), got %s", FormatPeriod(p), cfg.MissedInterval)
		}
		if p > 0 {
			break
		}
	}
	scheduler, err := riverslot.New(cfg.Pool, &riverslot.Config{Logger: cfg.Logger, Tasks: tasks})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.scheduler = scheduler
	if s.inserter, err = river.NewClient(riverpgxv5.New(cfg.Pool), &river.Config{Schema: cfg.Schema, Logger: cfg.Logger}); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	for i, t := range tasks {
		info, err := scheduler.Task(t.Name)
		if err != nil {
			return nil, err
		}
		s.tasks[periodOf[i]] = info
	}
	return s, nil
}

// task returns the riverslot task of period p: t (its cycle: Cycle and
// Buckets, or Monthly and Location) with the settings every period
// shares.
func (s *Server) task(p time.Duration, t riverslot.Task) riverslot.Task {
	t.Name = TaskName(p)
	// A server started mid-period calls from the next period on, as a
	// schedule created mid-period does: every call at its place.
	t.FirstCycle = riverslot.FirstCycleNext
	// LateGrace stays its default, the slot: readBegun (next_calls)
	// decides whether a queued first bootstrap can still make its period
	// by the slot's length.
	// Calls start within the client's fetch poll of their place, not at
	// River's next 5 s scheduler tick.
	t.Punctual = true
	t.Schema, t.Table = s.cfg.Schema, SchedulesTable
	t.Filter = periodFilter(p)
	t.Queue = callsQueue
	t.MaxAttempts = MaxRetries + 1
	t.SyncTimeout = MaxTimeout + 5*time.Second
	t.Upstream, t.Limits = "upstream", s.cfg.HostLimits
	t.Sync = s.call
	t.OnSkip = s.skipped
	return t
}

// periodFilter is the condition of the schedules a period's task calls.
func periodFilter(p time.Duration) string {
	return "deleted_at IS NULL AND NOT paused AND period_ms = " + strconv.FormatInt(p.Milliseconds(), 10)
}

// PeriodIndexName is the name of the bucket index of period's schedules.
func PeriodIndexName(period time.Duration) string {
	if period == Monthly {
		return "riverslot_schedule_monthly_bucket"
	}
	return "riverslot_schedule_" + strconv.FormatInt(period.Milliseconds(), 10) + "ms_bucket"
}

// CreateIndexes creates the schedules' bucket indexes: riverslot's (one per
// bucket count of the server's periods) and one per period, partial on the
// period's live schedules, so that each period's fan-out reads only its
// own schedules, not every period's of its slot's buckets. Each is built
// CONCURRENTLY (writes go on), an INVALID one left by an interrupted build
// dropped and built again.
func (s *Server) CreateIndexes(ctx context.Context) error {
	if err := s.scheduler.CreateIndexes(ctx); err != nil {
		return err
	}
	for _, p := range s.cfg.Periods {
		info := s.tasks[p]
		name := PeriodIndexName(p)
		valid, exists, err := sqlbucket.IndexValid(ctx, s.cfg.Pool, s.cfg.Schema, SchedulesTable, name)
		if err != nil {
			return err
		}
		if exists && !valid {
			if _, err := s.cfg.Pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+pgx.Identifier{s.cfg.Schema, name}.Sanitize()); err != nil {
				return fmt.Errorf("error dropping the INVALID index %s to build it again: %w", name, err)
			}
		}
		expr := sqlbucket.ExprFor("id", info.Plan.Buckets)
		if _, err := s.cfg.Pool.Exec(ctx, "CREATE INDEX CONCURRENTLY IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()+" ON "+s.schedules+
			" (("+expr+"), id) WHERE "+periodFilter(p)); err != nil {
			return fmt.Errorf("error creating the index of period %s's schedules: %w", FormatPeriod(p), err)
		}
	}
	return nil
}

// Schema is the schema of River's tables and the service's.
func (s *Server) Schema() string { return s.cfg.Schema }

// Pool is the server's database pool.
func (s *Server) Pool() *pgxpool.Pool { return s.cfg.Pool }

// Scheduler is the server's riverslot scheduler (its tasks, one per
// period).
func (s *Server) Scheduler() *riverslot.Scheduler { return s.scheduler }

// Configure adds the server's workers, periodic triggers and queues to a
// River config (workers MaxWorkers per queue).
func (s *Server) Configure(config *river.Config, workers int) error {
	if config.Queues == nil {
		config.Queues = map[string]river.QueueConfig{}
	}
	config.Queues[callsQueue] = river.QueueConfig{MaxWorkers: workers}
	if _, ok := config.Queues[river.QueueDefault]; !ok {
		config.Queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: 10}
	}
	if err := s.scheduler.Configure(config); err != nil {
		return err
	}
	return river.AddWorkerSafely(config.Workers, &triggerWorker{s: s})
}

// FlushOutcomes writes the call outcomes counted and not yet written to
// the ledger: call it after River's client stopped.
func (s *Server) FlushOutcomes(ctx context.Context) error { return s.scheduler.FlushOutcomes(ctx) }

// Migrate creates River's tables, riverslot's, and the service's in schema;
// Server.CreateIndexes the schedules' bucket indexes. It is idempotent, and
// brings a schema of an earlier version up to date: schedules and tokens
// made before tenants existed belong to the default tenant (the tokens as
// admin tokens), whose signing secret is the one the server had.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	// One migration of the schema at a time: servers starting together
	// wait for the first.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("error connecting to migrate schema %q: %w", schema, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('riverslot serve migrate ' || $1))`, schema); err != nil {
		return fmt.Errorf("error locking schema %q to migrate it: %w", schema, err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('riverslot serve migrate ' || $1))`, schema)
	}()
	if err := riverslot.Migrate(ctx, pool, schema); err != nil {
		return err
	}
	t := pgx.Identifier{schema, SchedulesTable}.Sanitize()
	c := pgx.Identifier{schema, CallsTable}.Sanitize()
	k := pgx.Identifier{schema, TokensTable}.Sanitize()
	tn := pgx.Identifier{schema, TenantsTable}.Sanitize()
	signing := pgx.Identifier{schema, SigningTable}.Sanitize()
	fresh, err := newSigningSecret()
	if err != nil {
		return err
	}
	exec := func(q string, args ...any) error {
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("error creating the service's tables in schema %q: %w", schema, err)
		}
		return nil
	}
	for _, q := range append(tenantsDDL(tn),
		signingDDL(signing),
		// The default tenant, signing with the secret the server had
		// before tenants (receivers keep verifying), or a new one.
		`INSERT INTO `+tn+` (id, name, max_schedules, signing_secret)
SELECT gen_random_uuid(), '`+DefaultTenantName+`', 0, coalesce((SELECT secret FROM `+signing+`), $1)
ON CONFLICT (name) WHERE deleted_at IS NULL DO NOTHING`,
		`CREATE TABLE IF NOT EXISTS `+t+` (
	id uuid PRIMARY KEY,
	tenant_id uuid NOT NULL,
	external_id text,
	url text NOT NULL,
	method text NOT NULL,
	headers jsonb NOT NULL DEFAULT '{}',
	body text NOT NULL DEFAULT '',
	period_ms bigint NOT NULL,
	timeout_ms int NOT NULL,
	retries int NOT NULL,
	upstream text NOT NULL,
	paused boolean NOT NULL DEFAULT false,
	catch_up text NOT NULL DEFAULT 'skip',
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	deleted_at timestamptz
)`,
		`ALTER TABLE `+t+` ADD COLUMN IF NOT EXISTS tenant_id uuid, ADD COLUMN IF NOT EXISTS external_id text,
	ADD COLUMN IF NOT EXISTS catch_up text NOT NULL DEFAULT 'skip',
	ADD COLUMN IF NOT EXISTS call_job bigint, ADD COLUMN IF NOT EXISTS call_until timestamptz,
	ADD COLUMN IF NOT EXISTS paused_reason text`,
		`CREATE TABLE IF NOT EXISTS `+c+` (
	schedule_id uuid NOT NULL,
	tenant_id uuid,
	period_ms bigint NOT NULL,
	job_id bigint,
	attempt int NOT NULL,
	due_at timestamptz,
	started_at timestamptz NOT NULL,
	lateness_ms double precision,
	status int,
	latency_ms double precision NOT NULL,
	error text,
	ok boolean NOT NULL
)`,
		`ALTER TABLE `+c+` ADD COLUMN IF NOT EXISTS tenant_id uuid, ADD COLUMN IF NOT EXISTS period_start timestamptz,
	ADD COLUMN IF NOT EXISTS missed text, ADD COLUMN IF NOT EXISTS triggered boolean NOT NULL DEFAULT false`,
		`CREATE INDEX IF NOT EXISTS riverslot_call_period ON `+c+` (schedule_id, period_start)`,
		`CREATE INDEX IF NOT EXISTS riverslot_call_job ON `+c+` (job_id) WHERE job_id IS NOT NULL`,
		`CREATE INDEX IF NOT EXISTS riverslot_call_schedule ON `+c+` (schedule_id, started_at DESC)`,
		`CREATE INDEX IF NOT EXISTS riverslot_call_started ON `+c+` (started_at)`,
		`CREATE INDEX IF NOT EXISTS riverslot_call_tenant ON `+c+` (tenant_id, started_at)`,
		`CREATE TABLE IF NOT EXISTS `+k+` (
	id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
	hash bytea PRIMARY KEY,
	name text NOT NULL DEFAULT '',
	scope text NOT NULL DEFAULT 'admin',
	tenant_id uuid,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	revoked_at timestamptz
)`,
		`ALTER TABLE `+k+` ADD COLUMN IF NOT EXISTS scope text NOT NULL DEFAULT 'admin', ADD COLUMN IF NOT EXISTS tenant_id uuid, ADD COLUMN IF NOT EXISTS revoked_at timestamptz`,
	) {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{fresh}
		}
		if err := exec(q, args...); err != nil {
			return err
		}
	}
	var def uuid.UUID
	if err := conn.QueryRow(ctx, `SELECT id FROM `+tn+` WHERE name = $1 AND deleted_at IS NULL`, DefaultTenantName).Scan(&def); err != nil {
		return fmt.Errorf("error reading the default tenant in schema %q: %w", schema, err)
	}
	// In batches of 1,000, each its own statement: a fleet's schedules are
	// never rewritten in one transaction.
	batches := func(what, q string, args ...any) (int64, error) {
		var total int64
		for {
			tag, err := conn.Exec(ctx, q, args...)
			if err != nil {
				return total, fmt.Errorf("error %s in schema %q: %w", what, schema, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() == 0 {
				return total, nil
			}
		}
	}
	// Schedules of before tenants: the default tenant's, and its counts.
	moved, err := batches("giving the schedules their tenant", `UPDATE `+t+` SET tenant_id = $1
WHERE id = ANY (ARRAY(SELECT id FROM `+t+` WHERE tenant_id IS NULL LIMIT 1000))`, def)
	if err != nil {
		return err
	}
	if moved > 0 {
		if err := exec(`UPDATE `+tn+` SET (schedules, planned_ncps) = (SELECT count(*), coalesce(sum(`+plannedNCPS("period_ms")+`), 0)
	FROM `+t+` WHERE tenant_id = $1 AND deleted_at IS NULL) WHERE id = $1`, def); err != nil {
			return err
		}
	}
	var nullable string
	if err := conn.QueryRow(ctx, `SELECT is_nullable FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = 'tenant_id'`,
		schema, SchedulesTable).Scan(&nullable); err != nil {
		return fmt.Errorf("error reading the schedules' columns in schema %q: %w", schema, err)
	}
	if nullable == "YES" {
		if err := exec(`ALTER TABLE ` + t + ` ALTER COLUMN tenant_id SET NOT NULL`); err != nil {
			return err
		}
	}
	for _, q := range []string{
		`CREATE INDEX IF NOT EXISTS riverslot_schedule_tenant ON ` + t + ` (tenant_id, id)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS riverslot_schedule_external_id ON ` + t + ` (tenant_id, external_id) WHERE external_id IS NOT NULL AND deleted_at IS NULL`,
	} {
		if err := exec(q); err != nil {
			return err
		}
	}
	// Keys made before keys named the port ("host" → "host:443", the
	// sub-key kept), then before they named the tenant and the scheme
	// ("host:443/sub" → "<tenant> https://host:443/sub"): otherwise one
	// host's schedules would count under two keys, each with the whole
	// --host-rate. Idempotent: a key naming its tenant is left alone.
	if _, err := batches("giving the schedules' upstream keys their port", `WITH a AS (
	SELECT id, upstream, lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]+)')) AS auth, lower(substring(url from '^([A-Za-z][A-Za-z0-9+.-]*)://')) AS scheme
	FROM `+t+` WHERE position(' ' in upstream) = 0),
k AS (SELECT id, CASE WHEN auth ~ ':[0-9]+$' THEN auth ELSE auth || ':' || CASE scheme WHEN 'https' THEN '443' ELSE '80' END END AS host, upstream FROM a WHERE auth IS NOT NULL),
todo AS (SELECT id, host FROM k WHERE split_part(upstream, '/', 1) <> host LIMIT 1000)
UPDATE `+t+` s SET upstream = todo.host || coalesce('/' || nullif(split_part(s.upstream, '/', 2), ''), '')
FROM todo WHERE todo.id = s.id`); err != nil {
		return err
	}
	_, err = batches("giving the schedules' upstream keys their tenant", `UPDATE `+t+` SET upstream = tenant_id::text || ' ' || lower(substring(url from '^([A-Za-z][A-Za-z0-9+.-]*)://')) || '://' || upstream
WHERE id = ANY (ARRAY(SELECT id FROM `+t+` WHERE position(' ' in upstream) = 0 AND url ~ '^[A-Za-z][A-Za-z0-9+.-]*://' LIMIT 1000))`)
	return err
}

// pruneBatch is how many rows one pruning statement deletes: a server
// back from a long stop, or with a shorter History, prunes in many short
// transactions, not one that grows with the fleet.
const pruneBatch = 10_000

// Prune deletes calls, and schedules deleted, longer ago than History.
func (s *Server) Prune(ctx context.Context) (calls, schedules int64, err error) {
	prune := func(table, column, what string) (int64, error) {
		var total int64
		for {
			tag, err := s.cfg.Pool.Exec(ctx, `DELETE FROM `+table+` WHERE ctid = ANY (ARRAY(SELECT ctid FROM `+table+`
	WHERE `+column+` < clock_timestamp() - $1 * interval '1 millisecond' LIMIT $2))`, s.cfg.History.Milliseconds(), pruneBatch)
			if err != nil {
				return total, fmt.Errorf("error pruning %s: %w", what, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < pruneBatch {
				return total, nil
			}
		}
	}
	if calls, err = prune(s.calls, "started_at", "calls"); err != nil {
		return calls, 0, err
	}
	schedules, err = prune(s.schedules, "deleted_at", "deleted schedules")
	return calls, schedules, err
}

// target is what a call needs of its schedule.
type target struct {
	msgID             string // Standard Webhooks' webhook-id
	url, method, body string
	headers           map[string]string
	timeout           time.Duration
	retries           int
	secrets           []string // the tenant's signing secrets in force
}

// loaded is a schedule as a call needs it.
type loaded struct {
	target
	tenant   uuid.UUID
	periodMS int64
	live     bool    // not deleted nor paused
	upstream string  // its upstream key
	maxCPS   float64 // its tenant's max_calls_per_second (0: none)
	catchUp  string
	// created and updated are when the schedule was made and last changed.
	created, updated time.Time
}

// load reads what a call of schedule id needs (pgx.ErrNoRows when there
// is no such schedule): the tenant's secrets come with it, and a schedule
// whose tenant is deleted is deleted with it.
func (s *Server) load(ctx context.Context, id uuid.UUID) (loaded, error) {
	var (
		l                loaded
		timeoutMS        int
		secret, previous *string
	)
	err := s.cfg.Pool.QueryRow(ctx, `SELECT s.url, s.method, s.headers, s.body, s.timeout_ms, s.retries, s.period_ms, s.deleted_at IS NULL AND NOT s.paused, s.tenant_id,
	t.signing_secret, CASE WHEN t.previous_until > clock_timestamp() THEN t.previous_secret END, s.upstream, coalesce(t.max_calls_per_second, 0),
	s.catch_up, s.created_at, s.updated_at
FROM `+s.schedules+` s LEFT JOIN `+s.tenants+` t ON t.id = s.tenant_id WHERE s.id = $1`, id).
		Scan(&l.url, &l.method, &l.headers, &l.body, &timeoutMS, &l.retries, &l.periodMS, &l.live, &l.tenant, &secret, &previous, &l.upstream, &l.maxCPS,
			&l.catchUp, &l.created, &l.updated)
	if err != nil {
		return l, err
	}
	if secret == nil {
		return l, fmt.Errorf("schedule %s's tenant %s has no signing secret (run serve.Migrate)", id, l.tenant)
	}
	l.secrets = []string{*secret}
	if previous != nil {
		l.secrets = append(l.secrets, *previous)
	}
	l.timeout = time.Duration(timeoutMS) * time.Millisecond
	return l, nil
}

// attempt is one call made, as the history records it.
type attempt struct {
	schedule    uuid.UUID
	l           loaded
	periodStart *time.Time // nil for a triggered call
	jobID       int64
	attempt     int
	due         *time.Time
	triggered   bool
}

// make does the call of a and records it; it returns the answer's status
// (0 when none came), its Retry-After and the call's error.
func (s *Server) make(ctx context.Context, a attempt) (ok bool, status int, wait time.Duration, callErr error) {
	started := time.Now()
	status, wait, callErr = s.do(ctx, a.l.target)
	latency := time.Since(started)
	var lateness *float64
	if a.due != nil && a.attempt == 1 {
		l := float64(started.Sub(*a.due)) / float64(time.Millisecond)
		lateness = &l
	}
	ok = callErr == nil && status >= 200 && status < 300
	var errText *string
	if callErr != nil {
		e := callErr.Error()
		errText = &e
	}
	var statusCol *int
	if status != 0 {
		statusCol = &status
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Pool.Exec(rctx, `INSERT INTO `+s.calls+` (schedule_id, tenant_id, period_ms, period_start, job_id, attempt, due_at, started_at, lateness_ms, status, latency_ms, error, ok, triggered)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, a.schedule, a.l.tenant, a.l.periodMS, a.periodStart, a.jobID, a.attempt, a.due, started, lateness,
		statusCol, float64(latency)/float64(time.Millisecond), errText, ok, a.triggered); err != nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not record a call", slog.String("schedule", a.schedule.String()), slog.String("error", err.Error()))
	}
	return ok, status, wait, callErr
}

// call is the tasks' sync: one call of the schedule id.
func (s *Server) call(ctx context.Context, id uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
	l, err := s.load(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !l.live {
		return nil // deleted or paused since its fan-out: never called
	}
	if err == nil && job.Args.Task != TaskName(time.Duration(l.periodMS)*time.Millisecond) {
		return nil // moved to another period since its fan-out: that period's task calls it
	}
	if err != nil {
		// The server's fault, not the upstream's: no breaker count, no
		// call recorded with the database's error text.
		return riverslot.NotUpstream(fmt.Errorf("error reading schedule %s: %w", id, err))
	}
	t, periodMS := l.target, l.periodMS
	// The calls this job made before (a retry, or a call again after its
	// upstream's pause, which riverslot may make in the same attempt):
	// retries counts every call made, a 429's included, so "retries": 0 is
	// one call a period whatever the answer. One probe of the calls' job
	// index.
	//
	// A call never overlaps the previous one: while another call of the
	// schedule (triggered, caught up) holds its claim, this one snoozes a
	// second and looks again. It does not wait here: it holds its
	// upstream's lease and start (a host at its concurrency limit would
	// wait behind an idle worker), and a wait could outlast the job's
	// timeout.
	made, claimed, err := s.claimCall(ctx, id, job.ID, l.timeout)
	if err != nil {
		return riverslot.NotUpstream(err)
	}
	if !claimed {
		return river.JobSnooze(time.Second)
	}
	defer s.releaseCall(ctx, id, job.ID)
	if made > l.retries {
		return river.JobCancel(fmt.Errorf("giving up: %d calls made this period, the schedule's retries are %d", made, l.retries))
	}
	l.msgID = messageID(id, job.Args.CycleStart)
	var due *time.Time
	notAfter := job.Args.NotAfter
	if info, ok := s.tasks[time.Duration(periodMS)*time.Millisecond]; ok && info.Name == job.Args.Task {
		d := info.Due(job.Args.CycleStart, id)
		due = &d
		length := info.Schedule.Next(job.Args.CycleStart).Sub(job.Args.CycleStart)
		if notAfter.IsZero() {
			// riverslot's rule: at most half a period after its place.
			notAfter = d.Add(length / 2)
		}
		// The service was not there at the call's place (down, stopped,
		// no worker free): the schedule's catch_up decides, not the
		// lateness. Its first call of the period only: a retry follows a
		// call made.
		if made == 0 && l.catchUp == CatchUpSkip && s.absentAtPlace(job, l, d, length) {
			s.recordMiss(ctx, id, job, MissedServerDown)
			return river.JobCancel(fmt.Errorf("not called: the service was not there at its place %s, and its catch_up is %q (%s)", d.UTC().Format(time.RFC3339), CatchUpSkip, MissedServerDown))
		}
	}
	// The tenant's calls a second, at run time: a call (a retry too) over
	// the quota waits its turn in line, and one whose turn would come too
	// close to the next call is skipped, a history entry "tenant_quota".
	if qr, ok := quotaRequest(l.tenant, l.maxCPS, job.ID, notAfter); ok {
		d, err := s.admit(ctx, qr)
		if err != nil {
			return riverslot.NotUpstream(fmt.Errorf("error deciding schedule %s's call under its tenant's quota: %w", id, err))
		}
		switch d.Verdict {
		case upstream.Wait:
			return river.JobSnooze(d.Wait)
		case upstream.Skip:
			// Missed, with its entry; cancelled, not completed: a nil
			// would tell the upstream's limiter (which holds this job's
			// lease) that a call succeeded, and close a half-open
			// breaker with no call made.
			s.recordMiss(ctx, id, job, MissedQuota)
			return river.JobCancel(fmt.Errorf("not called: its tenant's max_calls_per_second had no room for it within half a period of its place (%s)", MissedQuota))
		}
		defer s.release(ctx, qr, upstream.Succeeded, 0)
	}
	periodStart := job.Args.CycleStart
	ok, status, wait, callErr := s.make(ctx, attempt{schedule: id, l: l, periodStart: &periodStart, jobID: job.ID, attempt: job.Attempt, due: due})
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case ok:
		return nil
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable && wait > 0:
		// The upstream asked to slow down: every schedule of its key waits,
		// at most half the period (past it the next period's call comes
		// anyway), so one answer cannot hold a host's schedules for an hour.
		if wait <= 0 {
			wait = time.Second
		}
		if p := time.Duration(periodMS) * time.Millisecond; p > 0 {
			wait = min(wait, p/2)
		}
		return riverslot.Throttled(wait, fmt.Errorf("%s %s answered %d, Retry-After %s", t.method, t.url, status, wait))
	case status == http.StatusGone:
		if err := s.pauseGone(rctx, id, t.url); err != nil {
			return riverslot.NotUpstream(err)
		}
		return river.JobCancel(fmt.Errorf("%s answered 410 Gone: schedule paused", t.url))
	}
	failure := callErr
	if failure == nil {
		failure = fmt.Errorf("%s answered %d", t.url, status)
	}
	if made+1 > t.retries {
		// The schedule's retries are spent: the next period calls again.
		return river.JobCancel(fmt.Errorf("giving up after %d calls: %w", made+1, failure))
	}
	return failure
}

// pauseGone pauses schedule id, whose url answered 410 Gone: the receiver
// says the endpoint is gone for good, so the schedule is paused (its
// history shows the 410, its paused_reason PausedGone), not called every
// period, whichever call got the answer (at its place, triggered, caught
// up). PATCH {"paused": false} resumes it.
func (s *Server) pauseGone(ctx context.Context, id uuid.UUID, url string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Pool.Exec(rctx, `UPDATE `+s.schedules+` SET paused_reason = CASE WHEN paused THEN paused_reason ELSE $2 END, paused = true, updated_at = clock_timestamp() WHERE id = $1 AND deleted_at IS NULL`,
		id, PausedGone); err != nil {
		return fmt.Errorf("error pausing schedule %s after 410 Gone: %w", id, err)
	}
	s.cfg.Logger.WarnContext(ctx, "riverslot serve: a schedule's URL answered 410 Gone; the schedule is paused until resumed", slog.String("schedule", id.String()), slog.String("url", url))
	return nil
}

// catchUpAfter is how late a period's call may start after its place and
// still be its call at its place, in a period of length:
// Config.CatchUpAfter, at most a third of the period.
func (s *Server) catchUpAfter(length time.Duration) time.Duration {
	return min(s.cfg.CatchUpAfter, length/3)
}

// absentAtPlace reports whether job, the call at due of schedule l in a
// period of length, comes late because the service was not there at its
// place: its slot's fan-out queued it more than catchUpAfter after its
// place (the fan-out ran late: the service was down or behind when it was
// due), or its first run starts more than that after the job was due (it
// waited, due, with no process to run it). A job its upstream's limits,
// its tenant's quota or another call in flight held back was snoozed: due
// again at its wake-up, not absent. A schedule made or changed after its
// place is not judged: it had no call at its place to miss (a late
// fan-out takes it as a new schedule).
func (s *Server) absentAtPlace(job *river.Job[riverslot.SyncArgs], l loaded, due time.Time, length time.Duration) bool {
	if !l.created.Before(due) || !l.updated.Before(due) {
		return false
	}
	after := s.catchUpAfter(length)
	if job.CreatedAt.Sub(due) > after {
		return true
	}
	// River appends a client to AttemptedBy each time it starts the job,
	// snoozes included: one is the job's first run, at the time it was
	// queued for.
	first := job.Attempt == 1 && len(job.AttemptedBy) == 1 && job.AttemptedAt != nil
	return first && job.AttemptedAt.Sub(job.ScheduledAt) > after
}

// do makes the call and returns its status (0 when none came) and how
// long its Retry-After asks to wait (0 without one, at most an hour).
func (s *Server) do(ctx context.Context, t target) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var body io.Reader
	if t.body != "" {
		body = strings.NewReader(t.body)
	}
	req, err := http.NewRequestWithContext(ctx, t.method, t.url, body)
	if err != nil {
		return 0, 0, err
	}
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "riverslot-serve")
	if err := sign(req, t.msgID, []byte(t.body), t.secrets); err != nil {
		return 0, 0, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
	var wait time.Duration // none given
	if v := resp.Header.Get("Retry-After"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			wait = time.Duration(min(n, 3600)) * time.Second
		} else if at, err := http.ParseTime(v); err == nil && time.Until(at) > 0 {
			wait = time.Until(at)
		}
	}
	return resp.StatusCode, min(wait, time.Hour), nil
}
