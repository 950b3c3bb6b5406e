// Package demo is riverslot demo: compressed live cycles of slot scheduling
// against Postgres, measured from the database and reported.
//
// The command parses its flags into a Config, connects the pools it names
// and calls Run, which prepares the demo's own schema (marked with
// SchemaComment), seeds the accounts, runs River with riverslot's tasks
// through the cycles while it shows progress, and returns the Report the
// command prints:
//
//	report, err := demo.Run(ctx, &demo.Config{Pool: pool, Monitor: monitor, Accounts: 10_000, ...}, os.Stderr, false)
//	if report != nil {
//		_ = report.WriteText(os.Stdout)
//	}
//
// With Config.ShardPools the task runs over several databases, one River
// client per shard, and the Report holds each shard's figures and all.
package demo
