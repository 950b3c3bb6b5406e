package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

// runStatusShards is riverslot status --shard: the task's latest cycle
// over all its shards (riverslot.StatusShards).
func runStatusShards(ctx context.Context, tf *taskFlags, accountsSchemaGiven bool, specs []shardSpec, asJSON bool, watch time.Duration, stdout, stderr io.Writer) error {
	schedulers := make([]*riverslot.Scheduler, 0, len(specs))
	for _, sp := range specs {
		pool, down, err := openShard(ctx, sp, 4, true)
		if err != nil {
			return err
		}
		defer pool.Close()
		if down == nil {
			if err := inspect.CheckRiverSchema(ctx, pool, sp.schema); err != nil {
				var ie *inspect.InputError
				if errors.As(err, &ie) {
					return shardErr(sp.name, inputErr(err)) // a wrong NAME@SCHEMA is bad input, not an outage
				}
				down = fmt.Errorf("shard %q: %w", sp.name, err)
			}
		}
		if down != nil {
			fmt.Fprintf(stderr, "warning: %v; shown as not answering\n", down)
		}
		rt := tf.riverTask()
		if !accountsSchemaGiven {
			rt.Schema = sp.schema // the shard's accounts beside its River tables
		}
		s, err := inspect.Scheduler(pool, sp.name, sp.schema, rt)
		if err != nil {
			return inputErr(err)
		}
		schedulers = append(schedulers, s)
	}
	for {
		// Each round within inspect.ShardsTimeout: a shard that answers
		// the first ping and then hangs is shown as not answering.
		roundCtx, cancel := context.WithTimeout(ctx, inspect.ShardsTimeout)
		st, err := riverslot.StatusShards(roundCtx, *tf.task, schedulers...)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, msg: "interrupted"}
			}
			return &exitError{code: 1, msg: err.Error()}
		}
		if asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(st); err != nil {
				return err
			}
		} else {
			if watch > 0 {
				fmt.Fprint(stdout, "\033[H\033[2J")
			}
			inspect.WriteShardsStatus(stdout, st)
		}
		if watch == 0 {
			if !inspect.ShardsFine(st) {
				return &exitError{code: 1}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return &exitError{code: 130, msg: "interrupted"}
		case <-time.After(watch):
		}
	}
}
