// Package shutdown stops what riverslot's commands run (River's client and
// riverslot's scheduler) in order, each step within a bound of its own:
//
//	stopErr, flushErr := shutdown.StopThenFlush(client.Stop, scheduler.FlushOutcomes)
package shutdown

import (
	"context"
	"time"
)

// StopThenFlush stops River's client with stop (Client.Stop, or
// StopAndCancel for an interrupted run) within 30 s, then writes the sync
// outcomes its jobs counted and did not write yet with flush
// (Scheduler.FlushOutcomes), with 10 s of its own whatever stop returned.
func StopThenFlush(stop, flush func(context.Context) error) (stopErr, flushErr error) {
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopErr = stop(stopCtx)
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelFlush()
	return stopErr, flush(flushCtx)
}
