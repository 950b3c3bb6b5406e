package riverslot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// CensusStatus is where a weighted task's latest weight census stands.
type CensusStatus struct {
	CycleStart time.Time // the cycle whose pins it is for
	Steps      int       // steps taken
	NextBucket int       // the next bucket to count
	Finished   bool
	// Stalls is how many census attempts in a row took no step (each ran
	// out of time: a lock on the accounts table, a slow database), since
	// StalledSince; the census job backs off between them. 0 when the
	// last attempt made progress.
	Stalls       int
	StalledSince time.Time
}

// census reads the latest weight census of spec's task (nil when spec is
// not weighted or has none).
func (s *Scheduler) census(ctx context.Context, spec *taskspec.Spec) (*CensusStatus, error) {
	if !spec.Weighted() {
		return nil, nil
	}
	var (
		c     CensusStatus
		since *time.Time
	)
	err := spec.AccountsDB(s.pool).QueryRow(ctx, spec.Pins.CensusState, spec.Name, spec.PlanID).
		Scan(&c.CycleStart, &c.Steps, &c.NextBucket, &c.Finished, &c.Stalls, &since)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
			return nil, nil // no census table (yet) of this version: CreateIndexes makes it; Check says so
		}
		return nil, fmt.Errorf("error reading the weight census of task %q: %w", spec.Name, err)
	}
	c.CycleStart = c.CycleStart.UTC()
	if since != nil {
		c.StalledSince = since.UTC()
	}
	return &c, nil
}
