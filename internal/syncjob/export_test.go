package syncjob

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/upstream"
)

// NewTestWorker is a Worker with only its pool, for tests of its upstream
// decisions.
func NewTestWorker(pool *pgxpool.Pool) *Worker { return &Worker{pool: pool} }

// Acquire is acquire, for the external tests.
func (w *Worker) Acquire(ctx context.Context, lim *upstream.Limiter, req upstream.Request, inProcess bool) (upstream.Decision, error) {
	return w.acquire(ctx, &taskspec.Spec{Name: req.Task}, lim, req, inProcess)
}
