package upstreamcmd

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

// Budgets counts task's accounts per upstream and slot in the database of
// pool (Scheduler.UpstreamBudgets), each weighed against its limits:
// operators' overrides read from River's tables in riverSchema ("":
// search_path), else task.Limits (the concurrency limit at
// task.Limits.Latency a call). task.Sync is not called and may be nil; a task the library refuses
// is an *inspect.InputError.
func Budgets(ctx context.Context, pool *pgxpool.Pool, riverSchema string, task riverslot.Task) ([]riverslot.UpstreamBudget, error) {
	scheduler, err := inspect.Scheduler(pool, "", riverSchema, task)
	if err != nil {
		return nil, err
	}
	return scheduler.UpstreamBudgets(ctx, task.Name)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
