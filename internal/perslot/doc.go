// Package perslot is riverslot's middle tier: one River job per task, cycle
// and slot that selects the slot's accounts and enqueues one sync job each,
// scheduled at slot start + the account's fixed offset.
//
// The fan-out streams the slot's accounts in keyset-paginated batches over
// the bucket index, in (bucket, id) order. Each batch's sync jobs are inserted
// with River's InsertManyFastTx (COPY) in the same transaction that persists
// the position reached as a River resumable cursor, after checking (with a
// row lock) that this attempt still owns the job. A per-slot job that fails,
// times out or whose process dies is retried from the last committed batch:
// no account is enqueued twice and none is skipped. Memory holds one batch.
//
// A per-slot job runs the task's Lead before its slot, so its sync jobs are
// in the queue before River's scheduler must promote them. Times are computed
// from the cycle anchor, never from "now": a per-slot job that runs a little
// late schedules every account at its usual target (those already past are
// runnable at once). Accounts whose target is more than LateGrace in the past
// are handled by the task's LatePolicy: spread over a fresh catch-up window
// as long as the slot is late (the default) or skipped until the next cycle;
// a late sync that would land less than half a cycle before the account's
// regular time in the next cycle is skipped under either policy.
//
// For a weighted task (Task.Weight) the fan-out has two phases: the slot's
// bucket range, leaving out the accounts pinned in the cycle (loaded once
// per attempt: a cycle's pins never change after its bootstrap commits),
// then the accounts pinned to this slot, by id. The cursor records the
// phase, so a retry resumes inside either one.
//
// Every page of accounts must advance strictly past the cursor inside the
// slot's bucket range (ErrKeysetStalled otherwise, and the batch inserts
// nothing), and a per-slot job made for another plan (cycle, slots, seed)
// than the node's is cancelled with a warning.
package perslot
