package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Databases the make targets prepare: the fallbacks of --database-url when
// $DATABASE_URL is not set.
const (
	defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/riverslot_demo?sslmode=disable"  // make demo; demo and worker
	defaultBenchURL    = "postgres://postgres@127.0.0.1:5432/riverslot_bench?sslmode=disable" // make bench
)

// connect opens the --database-url pool and pings it; failures exit 2 with
// a hint.
func connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return connectFlag(ctx, "--database-url", url, maxConns)
}

// connectFlag is connect for the URL of flag.
func connectFlag(ctx context.Context, flag, url string, maxConns int32) (*pgxpool.Pool, error) {
	return connectPool(ctx, flag, url, maxConns, false, connectHint(flag))
}

// connectPool opens and pings a pool on the URL of flag, its sessions
// read-only with readOnly; a failure exits 2 with hint.
func connectPool(ctx context.Context, flag, url string, maxConns int32, readOnly bool, hint string) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErr("%s is not a valid PostgreSQL URL: %v", flag, err)
	}
	if readOnly {
		config.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	config.MaxConns = maxConns
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pingCtx, config)
	if err == nil {
		err = pool.Ping(pingCtx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, usageErr("cannot reach the database at %s: %v (%s)", redact(config), err, hint)
	}
	return pool, nil
}

func redact(c *pgxpool.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.ConnConfig.User, c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Database)
}

func connectHint(flag string) string {
	if flag != "--database-url" {
		return "check " + flag
	}
	return "pass --database-url or set $DATABASE_URL; `make demo` and `make bench` start a local PostgreSQL and create their database"
}

// connectReadOnly is connect with every session read-only
// (default_transaction_read_only): the page cannot write, whatever it runs.
func connectReadOnly(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	return connectPool(ctx, "--database-url", url, maxConns, true, "pass --database-url or set $DATABASE_URL")
}
