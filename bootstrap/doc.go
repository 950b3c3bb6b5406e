// Package bootstrap is riverslot's top job tier: one River job per task and
// cycle that enqueues the cycle's per-slot jobs, each scheduled at
// cycle_start + slot * slot_duration.
//
// Bootstrap jobs are unique by args (task, cycle start), and so are the
// per-slot jobs they insert (task, cycle start, slot): a duplicate trigger, a
// manual re-run or two clients enqueueing the same cycle leave exactly one
// set of jobs. The per-slot jobs are inserted in the same transaction that
// completes the bootstrap job.
package bootstrap
