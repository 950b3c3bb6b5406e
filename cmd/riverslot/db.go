package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultDatabaseURL is the database `make demo` prepares.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/riverslot_demo?sslmode=disable"

// connect opens a pool and pings it; failures exit 2 with a hint.
func connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErr("--database-url is not a valid PostgreSQL URL: %v", err)
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
		return nil, usageErr("cannot reach the database at %s: %v (run `make demo`, which starts PostgreSQL, or pass --database-url)", redact(config), err)
	}
	return pool, nil
}

func redact(c *pgxpool.Config) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.ConnConfig.User, c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.Database)
}
