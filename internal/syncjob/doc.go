// Package syncjob is the lowest tier of riverslot: one River job per account
// per cycle that runs the application's own work for that account.
//
// Its args carry the task name, the account id and the cycle start under the
// JSON names "task", "account_id" and "cycle_start" (RFC 3339). Before calling
// the application's SyncFunc the worker checks that the account still exists
// and still matches the task's filter; an account deleted (or filtered out)
// between fan-out and sync completes the job without calling SyncFunc and
// without an error.
//
// Users normally do not use this package directly: riverslot.Scheduler
// registers its Worker, and riverslot.SyncArgs and riverslot.SyncFunc alias
// Args and SyncFunc.
package syncjob
