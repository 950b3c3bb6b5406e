package workercmd

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/demo"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

// CheckSchema refuses, with an *inspect.InputError, a River schema that
// riverslot demo did not create (demo.SchemaComment), before the worker
// starts anything. The worker's built-in sync records a row or does
// nothing: its River client would fetch an app's queued riverslot_sync jobs
// and complete them without the app's Sync ever running.
func CheckSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) error {
	state, err := demo.QuerySchemaState(ctx, q, schema)
	if err != nil {
		return err
	}
	switch state {
	case demo.SchemaOwned:
		return nil
	case demo.SchemaAbsent:
		return &inspect.InputError{Err: fmt.Errorf("--schema %s: schema %q does not exist; nothing was started. "+
			"Create it with riverslot demo --schema %s (the worker runs only on a schema the demo created)", schema, schema, schema)}
	default:
		return &inspect.InputError{Err: fmt.Errorf("--schema %s: schema %q was not created by riverslot demo; nothing was started. "+
			"The worker's built-in sync only records syncs for the demo, so on an app's schema it would complete the app's sync jobs without running them. "+
			"Run the app's own workers (Scheduler.Configure) to work its jobs, and riverslot status --schema %s or the app's metrics to observe them", schema, schema, schema)}
	}
}
