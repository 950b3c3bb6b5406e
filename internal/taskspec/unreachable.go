package taskspec

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says the database could not be reached
// or went away (connection refused or lost, a server shutting down or
// starting up, a connect timeout), as opposed to an error of the query
// itself. The tiers wait through such an error instead of using up a
// job's attempts: the database comes back, and a sync or a slot must not
// be lost to an outage of the accounts database.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var (
		connErr *pgconn.ConnectError
		netErr  net.Error
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: admin shutdown,
		// crash shutdown, cannot connect now.
		return len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03")
	case errors.Is(err, context.DeadlineExceeded):
		return false // the job's own timeout: an error of its own
	}
	return pgconn.SafeToRetry(err)
}

// UnreachableWait is how long a job waits (snoozes, without using an
// attempt) before trying an unreachable accounts database again.
const UnreachableWait = 5 * time.Second
