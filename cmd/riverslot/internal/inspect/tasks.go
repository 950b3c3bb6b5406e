package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/slotplan"
)

// TasksMax bounds the tasks FindTasks returns.
const TasksMax = 100

// FindTasks returns the tasks (at most TasksMax) the ledger in schema
// records cycles of, each with the cycle and grid of its latest cycle's
// plan; the rest of each task (seed, phase, placement) is read from the
// ledger when shown. It reads the ledger only: River may have deleted every
// job of the tasks. A schema without River's tables and the ledger, or
// without a task, is an *InputError.
func FindTasks(ctx context.Context, pool *pgxpool.Pool, schema string) ([]riverslot.Task, error) {
	if err := CheckRiverSchema(ctx, pool, schema); err != nil {
		return nil, err
	}
	led := ledger.New(schema)
	names, err := led.Tasks(ctx, pool, TasksMax)
	if err != nil {
		return nil, fmt.Errorf("error finding the tasks: %w", err)
	}
	var (
		tasks      []riverslot.Task
		unreadable []string
	)
	for _, name := range names {
		latest, plan, ok, err := led.LatestCycle(ctx, pool, name, "")
		if err != nil {
			return nil, fmt.Errorf("error finding the tasks: %w", err)
		}
		if !ok {
			continue
		}
		if err := plan.Err(); err != nil || plan.IsZero() {
			if err == nil {
				err = errors.New("no plan id")
			}
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		task := riverslot.Task{Name: name, Seed: plan.Seed, Buckets: plan.Buckets}
		if plan.Month != "" {
			// A calendar month: no fixed Cycle to take an offset of.
			loc, err := time.LoadLocation(plan.Month)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("%s (time zone %q: %v)", name, plan.Month, err))
				continue
			}
			task.Monthly, task.Location = true, loc
		} else {
			task.Cycle, task.TriggerOffset = plan.Cycle, slotplan.GridOffset(latest, plan.Cycle)
		}
		tasks = append(tasks, task)
	}
	if len(tasks) == 0 {
		msg := fmt.Sprintf("no riverslot task in --schema %q: its ledger records no cycle (run the app, or riverslot demo, first)", schema)
		if len(unreadable) > 0 {
			msg += "; unreadable plans: " + strings.Join(unreadable, ", ")
		}
		return nil, inputErr("%s", msg)
	}
	return tasks, nil
}

// WantedTasks returns the tasks FindTasks finds in schema, only those of
// wanted when it names any; a wanted task not found is an *InputError.
func WantedTasks(ctx context.Context, pool *pgxpool.Pool, schema string, wanted []string) ([]riverslot.Task, error) {
	tasks, err := FindTasks(ctx, pool, schema)
	if err != nil || len(wanted) == 0 {
		return tasks, err
	}
	var kept []riverslot.Task
	for _, name := range wanted {
		i := slices.IndexFunc(tasks, func(t riverslot.Task) bool { return t.Name == name })
		if i < 0 {
			return nil, inputErr("--task %q has no cycle in the ledger of --schema %q; tasks found: %s", name, schema, TaskList(tasks))
		}
		kept = append(kept, tasks[i])
	}
	return kept, nil
}

// TaskList names tasks, quoted: tasks "a", "b".
func TaskList(tasks []riverslot.Task) string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = fmt.Sprintf("%q", t.Name)
	}
	return "tasks " + strings.Join(names, ", ")
}
