package inspect

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/riverslot/riverslot"
)

// InputError is bad input, found in the database or refused by the library
// (a task riverslot.New or Scheduler.Configure refuses): the commands exit 2
// for it, with its message.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErr(format string, args ...any) error {
	return &InputError{fmt.Errorf(format, args...)}
}

// Scheduler returns a scheduler of tasks over pool that only reads: its
// tasks' Sync is never called (one that is nil is set to a no-op), it logs
// nothing, and it is configured for River's tables in riverSchema. shard
// is riverslot.Config.Shard ("": unsharded). A task the library refuses is
// an *InputError.
func Scheduler(pool *pgxpool.Pool, shard, riverSchema string, tasks ...riverslot.Task) (*riverslot.Scheduler, error) {
	tasks = slices.Clone(tasks)
	for i := range tasks {
		if tasks[i].Sync == nil {
			tasks[i].Sync = func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
		}
	}
	s, err := riverslot.New(pool, &riverslot.Config{Shard: shard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tasks: tasks})
	if err != nil {
		return nil, &InputError{err}
	}
	if err := s.Configure(&river.Config{Schema: riverSchema}); err != nil {
		return nil, &InputError{err}
	}
	return s, nil
}
