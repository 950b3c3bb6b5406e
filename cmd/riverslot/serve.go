package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/servecmd"
	"github.com/riverslot/riverslot/serve"
)

const serveAbout = `Runs River, riverslot and an HTTP API in one process: periodic HTTP calls
as a service. A schedule (POST /v1/schedules: url, method, headers, body,
period, timeout, retries, upstream, paused) is called once per period at a
fixed place in it (its offset, from its id), spread evenly with every other
schedule of the period. Several processes on one --schema form a cluster.

Tenants: each owns its schedules, its tokens and the secret its calls are
signed with (Standard Webhooks). Every endpoint but /v1/openapi.json and
/v1/page (the operator's page, static: it asks for a token) needs a token
(Authorization: Bearer TOKEN) of a wide enough scope: admin (tenants,
quotas, every tenant's schedules), tenant (its own tenant's schedules,
tokens and secret) or read. --token-file holds the admin token: written
with a new random one when the file is missing, refused (exit 2) when it
was revoked. POST /v1/tenants makes a tenant and its first token; POST
/v1/tokens makes more, DELETE /v1/tokens/{id} revokes one for good.
Tokens are stored hashed.

Targets on loopback, private and link-local addresses are refused, when a
schedule is created and at every connection, unless --allow-private-targets.
`

// runServe runs River, riverslot and the HTTP API until interrupted
// (servecmd.Run).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", serveAbout, stderr)
	databaseURL := databaseURLFlag(fs, defaultDatabaseURL, "serve")
	addr := fs.String("addr", "127.0.0.1:8080", "HOST:PORT of the HTTP API")
	schema := fs.String("schema", "riverslot_serve", "schema of River's tables and the service's (created when missing)")
	tokenFile := fs.String("token-file", "riverslot-serve.token", "file holding an API token; written with a new random token when missing")
	allowPrivate := fs.Bool("allow-private-targets", false, "allow targets on loopback, private and link-local addresses (the server may then reach its own network)")
	periods := fs.String("periods", "1m,1h,24h", "comma-separated periods schedules may have, one riverslot task each (multiples of 2s, or monthly: calendar months)")
	monthLocation := fs.String("month-location", "UTC", "time zone of the monthly period's months (an IANA name, e.g. Europe/London)")
	workers := fs.Int("workers", 100, "calls in flight at once per process (MaxWorkers of the calls queue)")
	history := fs.Duration("history", serve.DefaultHistory, "how long calls and deleted schedules stay readable")
	hostRate := fs.Float64("host-rate", 0, "calls started per second per upstream (default: a tenant's scheme://host:port of a schedule's URL); 0: no limit")
	hostConcurrency := fs.Int("host-concurrency", 0, "calls in flight per upstream; 0: no limit")
	hostFailures := fs.Int("host-failures", 20, "consecutive failed calls that open an upstream's circuit breaker (0: no breaker)")
	tenantSchedules := fs.Int("tenant-max-schedules", serve.DefaultMaxSchedules, "a new tenant's schedules quota unless POST /v1/tenants gives one (-1: none)")
	tenantRate := fs.Float64("tenant-max-calls-per-second", 0, "a new tenant's quota of calls a second its schedules plan, unless POST /v1/tenants gives one (0: none)")
	maxConns := fs.Int("max-conns", 20, "database connections this process may open")
	riverLogLevel := logLevelFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var ps []time.Duration
	for _, p := range strings.Split(*periods, ",") {
		d, err := serve.ParsePeriod(p)
		if err != nil {
			return usageErr("--periods %q: %v", p, err)
		}
		ps = append(ps, d)
	}
	monthLoc, err := time.LoadLocation(*monthLocation)
	if err != nil || *monthLocation == "" || *monthLocation == "Local" {
		return usageErr("--month-location %q is not a time zone name; give an IANA name such as UTC or Europe/London", *monthLocation)
	}
	switch {
	case *workers < 1 || *workers > river.QueueNumWorkersMax:
		return usageErr("--workers must be between 1 and %d, got %d", river.QueueNumWorkersMax, *workers)
	case *maxConns < 4:
		return usageErr("--max-conns must be at least 4, got %d", *maxConns)
	case *history < time.Hour:
		return usageErr("--history must be at least 1h, got %s", *history)
	case *hostRate < 0 || *hostConcurrency < 0 || *hostFailures < 0:
		return usageErr("--host-rate, --host-concurrency and --host-failures must not be negative")
	case *tenantSchedules < -1 || *tenantSchedules > 10_000_000:
		return usageErr("--tenant-max-schedules must be between -1 (no quota) and 10000000, got %d", *tenantSchedules)
	case *tenantRate < 0 || *tenantRate > 1e6:
		return usageErr("--tenant-max-calls-per-second must be between 0 (no quota) and 1000000, got %g", *tenantRate)
	}
	quota := serve.TenantQuota{MaxSchedules: *tenantSchedules, MaxCallsPerSecond: *tenantRate}
	if quota.MaxSchedules == 0 {
		quota.MaxSchedules = -1 // 0 on the command line is no quota too
	}
	ln, err := listenHTTP("--addr", *addr, "127.0.0.1:8080 or 127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()

	pool, err := connect(ctx, databaseURL(), int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	return inputErr(servecmd.Run(ctx, &servecmd.Config{
		Pool: pool, Listener: ln, Schema: *schema, TokenFile: *tokenFile, AllowPrivate: *allowPrivate, Periods: ps, PeriodsText: *periods,
		MonthLocation: monthLoc, Workers: *workers, History: *history, RiverLogLevel: *riverLogLevel,
		HostLimits:  riverslot.UpstreamLimits{Rate: *hostRate, Concurrency: *hostConcurrency, FailureThreshold: *hostFailures},
		TenantQuota: quota,
	}, stdout, stderr))
}
