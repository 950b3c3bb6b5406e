// Package riverslotweb serves riverslot's operator's page and its JSON API:
// an http.Handler an app mounts in its own mux, behind its own
// authentication.
//
// The page shows a task's current cycle (a bar per slot, the slot circle,
// the verdict and the next slot), the coverage and lateness of its last
// cycles, the failed jobs River keeps with their last error, and an
// account search. It refreshes itself, runs no script and loads nothing
// from outside. Every read is bounded by an index and a LIMIT and none
// counts the accounts table, so a page view costs the same at any fleet
// size.
//
// Build it after the scheduler's Configure, and mount it under a prefix
// with http.StripPrefix:
//
//	page, err := riverslotweb.New(scheduler, &riverslotweb.Config{
//		Metrics: promhttp.Handler(), // optional: /metrics on the same port
//	})
//	if err != nil {
//		return err
//	}
//	// requireOperator: the app's own authentication (the page serves none).
//	mux.Handle("/riverslot/", http.StripPrefix("/riverslot", requireOperator(page)))
//
// It serves:
//
//	GET /                             the page (?task=NAME, &account=UUID)
//	GET /api/status?task=NAME[&cycle_start=RFC3339]   riverslot.Scheduler.StatusFromLedger
//	GET /api/cycles?task=NAME[&limit=N]                riverslot.Scheduler.Cycles
//	GET /api/accounts/{id}?task=NAME                   riverslot.Scheduler.Account
//	GET /metrics                      Config.Metrics, when set
//
// The JSON is the model's own encoding (riverslot.TaskStatus,
// CycleSummary and AccountStatus implement json.Marshaler), the same as
// riverslot status --json prints. An error answers one line of JSON,
// {"error": "..."}: 400 for bad input, 404 for an unknown task or cycle,
// and 500, for any other error, with a request id only: the cause (a
// database's error names tables, schemas and SQL) goes to Config.Logger
// under that id, never to the client.
//
// For a task spread over several databases (riverslot.Config.Shard),
// NewShards serves the fleet's page over one Scheduler per shard, and each
// shard's own page under /shards/NAME/.
//
// The riverslot command's web subcommand serves the same page, read-only,
// for the tasks a schema's ledger records.
package riverslotweb
