// Package bootstrap is riverslot's top job tier: one River job per task and
// cycle that enqueues the cycle's per-slot jobs, each scheduled at
// cycle_start + slot * slot_duration.
//
// Bootstrap jobs are unique by args (task, cycle start, plan) in every
// state, and so are the per-slot jobs they insert (task, cycle start, slot,
// plan): a duplicate trigger, a manual re-run or two clients enqueueing the
// same cycle leave exactly one set of jobs, and a failed per-slot job is
// retried, never replaced. The per-slot jobs are inserted in the same
// transaction that completes the bootstrap job. A job made for another plan
// (Cycle or Seed changed) runs under the plan it was made for.
//
// For a weighted task the same transaction first pins the cycle's jumbo
// accounts (internal/pinning), at most once per (task, plan, cycle).
package bootstrap
