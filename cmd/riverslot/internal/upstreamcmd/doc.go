// Package upstreamcmd is the logic of riverslot upstream: a task's
// upstreams and their limits, read and set at run time, and the budget of
// each upstream against what its limits let through, min(Rate,
// Concurrency / latency), which riverslot plan --upstreams prints too.
//
// The command parses and checks its flags, connects the pool and calls
// these functions; it maps their errors to its exit codes:
//
//	err := upstreamcmd.List(ctx, &upstreamcmd.ListConfig{Pool: pool, Schema: "app", Limit: 100}, os.Stdout)
//
// Set stores an upstream's overrides. Check and WriteCheck are upstream
// check and plan --upstreams: Check counts the task's accounts per upstream
// and slot and weighs each upstream's need against its Rate and its
// Concurrency over CheckConfig.Latency (an operator's overrides win);
// WriteCheck prints the budgets and returns an error naming the upstreams
// that cannot fit in a cycle, the bound that binds and what to raise:
//
//	budgets, err := upstreamcmd.Check(ctx, &upstreamcmd.CheckConfig{Pool: pool, RiverSchema: "app", Task: task, Latency: 800 * time.Millisecond})
//	if err == nil {
//		err = upstreamcmd.WriteCheck(os.Stdout, budgets, false)
//	}
package upstreamcmd
