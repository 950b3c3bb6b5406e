// Package upstreamcmd is the logic of riverslot upstream: a task's
// upstreams and their limits, read and set at run time, and the budget of
// each upstream against its rate limit, which riverslot plan --upstreams
// prints too.
//
// The command parses and checks its flags, connects the pool and calls
// these functions; it maps their errors to its exit codes:
//
//	err := upstreamcmd.List(ctx, &upstreamcmd.ListConfig{Pool: pool, Schema: "app", Limit: 100}, os.Stdout)
//
// Set stores an upstream's overrides; Budgets and WriteBudgets are
// upstream check (and plan --upstreams):
//
//	budgets, err := upstreamcmd.Budgets(ctx, pool, riverSchema, task)
//	if err == nil {
//		err = upstreamcmd.WriteBudgets(os.Stdout, budgets, false)
//	}
package upstreamcmd
