// Package plancmd is riverslot plan: a cycle's slots and an account's
// bucket, slot, offset and next sync times, read with its pins (a weighted
// task) and its upstreams' budgets when the command has a database.
//
// The command parses and checks its flags into a Config, connects the pool
// when --database-url asks for one, and calls Run, which prints the report:
//
//	err := plancmd.Run(ctx, &plancmd.Config{Plan: plan, Schedule: schedule, Anchor: "00:00", Now: time.Now(),
//		Tasks: []plancmd.Task{{Name: "transactions", Seed: slotplan.SeedFromName("transactions")}}}, os.Stdout)
//
// RunMonthly is plan --cycle monthly: a calendar month's days and an
// account's place in every month.
package plancmd
