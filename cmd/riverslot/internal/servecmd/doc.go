// Package servecmd is riverslot serve: River, riverslot and the serve
// package's HTTP API in one process, until the context ends.
//
// The command parses and checks its flags, binds the API's address,
// connects the pool and calls Run, mapping an *inspect.InputError to its
// exit code for bad input:
//
//	err := servecmd.Run(ctx, &servecmd.Config{Pool: pool, Listener: ln, Schema: "riverslot_serve",
//		TokenFile: "riverslot-serve.token", Periods: []time.Duration{time.Minute}, PeriodsText: "1m",
//		MonthLocation: time.UTC, Workers: 100, History: serve.DefaultHistory}, os.Stdout, os.Stderr)
package servecmd
