package servecmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/httplisten"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/shutdown"
	"github.com/riverslot/riverslot/serve"
)

// Config is a serve process: the values of riverslot serve's flags, which
// the command validates as it parses them, the pool it connected and the
// address it bound.
type Config struct {
	// Pool is the database of River's tables and the service's.
	Pool *pgxpool.Pool
	// Listener is the API's address; Run serves it once River has started
	// and closes it before River stops.
	Listener *httplisten.Listener
	// Schema is the schema of River's tables and the service's, created
	// when missing.
	Schema string
	// TokenFile holds an API token; Run writes a new random one there when
	// the file is missing.
	TokenFile string
	// AllowPrivate allows targets on loopback, private and link-local
	// addresses.
	AllowPrivate bool
	// Periods are the periods schedules may have (serve.ParsePeriod), and
	// PeriodsText the same as given (--periods), which Run prints.
	Periods     []time.Duration
	PeriodsText string
	// MonthLocation is the time zone of the monthly period's months.
	MonthLocation *time.Location
	// Workers is MaxWorkers of the calls queue.
	Workers int
	// History is how long calls and deleted schedules stay readable.
	History time.Duration
	// HostLimits are each upstream's limits.
	HostLimits riverslot.UpstreamLimits
	// TenantQuota is a new tenant's quota (serve.Config.TenantQuota).
	TenantQuota serve.TenantQuota
	// RiverLogLevel is the level of River's logger; the service logs at
	// info.
	RiverLogLevel slog.Level
}

// Run prepares the schema, starts River and serves the API until ctx is
// done, with serve.Server.Run beside them (the missed calls' entries
// every 10 s, the history pruned every minute). What the service refuses (the
// schema, the configuration, the token file) is an *inspect.InputError.
func Run(ctx context.Context, c *Config, stdout, stderr io.Writer) error {
	if err := serve.Migrate(ctx, c.Pool, c.Schema); err != nil {
		return &inspect.InputError{Err: err}
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := serve.New(serve.Config{
		Pool: c.Pool, Schema: c.Schema, Periods: c.Periods, MonthLocation: c.MonthLocation, Guard: &serve.Guard{AllowPrivate: c.AllowPrivate},
		History: c.History, Logger: logger, HostLimits: c.HostLimits, TenantQuota: c.TenantQuota,
	})
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	if err := srv.CreateIndexes(ctx); err != nil {
		return err
	}
	created, err := srv.TokenFile(ctx, c.TokenFile)
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	if created {
		fmt.Fprintf(stdout, "wrote a new API token to %s\n", c.TokenFile)
	}
	config := &river.Config{
		Logger:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.RiverLogLevel})),
		Schema:            c.Schema,
		FetchPollInterval: 250 * time.Millisecond,
	}
	if err := srv.Configure(config, c.Workers); err != nil {
		return &inspect.InputError{Err: err}
	}
	client, err := river.NewClient(riverpgxv5.New(c.Pool), config)
	if err != nil {
		return &inspect.InputError{Err: err}
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", srv.Handler())
	c.Listener.Serve(mux)
	fmt.Fprintf(stdout, "riverslot serve: API at %s (OpenAPI at %s), periods %s\n", c.Listener.URL("/v1/"), c.Listener.URL("/v1/openapi.json"), c.PeriodsText)
	if c.AllowPrivate && !httplisten.Loopback(c.Listener.Addr()) {
		fmt.Fprint(stderr, "riverslot serve: --allow-private-targets on an address beyond this machine: anyone with a token can make it call your network\n")
	}

	// Until ctx is done: the missed calls' history entries and
	// catch-ups, and the history's pruning (River's client makes the
	// calls).
	if err := srv.Run(ctx); err != nil {
		return err
	}
	c.Listener.Close()
	stopErr, err := shutdown.StopThenFlush(client.Stop, srv.FlushOutcomes)
	if err != nil {
		fmt.Fprintf(stderr, "riverslot serve: error writing the call outcomes counted: %v\n", err)
	}
	if stopErr != nil {
		return fmt.Errorf("error stopping: %w", stopErr)
	}
	fmt.Fprintln(stdout, "riverslot serve: stopped")
	return nil
}
