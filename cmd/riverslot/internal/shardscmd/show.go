package shardscmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/ledger"
)

// shardView is one shard in show's output.
type shardView struct {
	Shard         string    `json:"shard"`
	MapVersion    int64     `json:"map_version"`
	Map           string    `json:"map"`
	EffectiveFrom time.Time `json:"effective_from,omitzero"`
	CycleStart    time.Time `json:"cycle_start,omitzero"`
	CycleMap      int64     `json:"cycle_map_version,omitempty"`
	Slots         int64     `json:"slots"`
	SlotsDone     int64     `json:"slots_done"`
	Synced        int64     `json:"synced"`
	Skipped       int64     `json:"skipped"`
}

// Show prints each shard's latest map and its latest cycle of task (the
// map version it followed, its slots, its syncs as the ledger counts them)
// and the total over the shards for the latest cycle start, and the ranges
// the latest changes moved away from a shard, with when that shard's
// copies of their accounts may be deleted (movedAway), as a table or
// JSON, to stdout. Shards whose latest maps disagree are an error, after
// the report.
func Show(ctx context.Context, stdout io.Writer, shards []riverslot.Shard, task string, asJSON bool) error {
	var (
		views  []shardView
		latest time.Time
	)
	for _, s := range shards {
		v, err := shardOf(ctx, s, task)
		if err != nil {
			return err
		}
		if v.CycleStart.After(latest) {
			latest = v.CycleStart
		}
		views = append(views, v)
	}
	// Each distinct latest map (version, ranges and start) and its shards.
	maps := map[string][]string{}
	var order []string
	var total shardView
	total.Shard, total.CycleStart = "all", latest
	for _, v := range views {
		key := "no map"
		if v.Map != "" {
			key = v.Map + " from " + fromText(v.EffectiveFrom)
		}
		if maps[key] == nil {
			order = append(order, key)
		}
		maps[key] = append(maps[key], v.Shard)
		if v.CycleStart.Equal(latest) {
			total.Slots += v.Slots
			total.SlotsDone += v.SlotsDone
			total.Synced += v.Synced
			total.Skipped += v.Skipped
		}
	}
	moved, err := movedAway(ctx, shards, task, views, time.Now())
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"task": task, "shards": views, "all": total, "maps_agree": len(maps) == 1, "moved": moved}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARD\tMAP\tLATEST CYCLE\tCYCLE'S MAP\tSLOTS DONE\tSYNCED\tSKIPPED")
		for _, v := range append(views, total) {
			cycle := "-"
			if !v.CycleStart.IsZero() {
				cycle = v.CycleStart.UTC().Format(time.RFC3339)
			}
			m := v.Map
			if v.Shard == "all" {
				m = ""
			}
			cm := ""
			if v.CycleMap != 0 {
				cm = "v" + strconv.FormatInt(v.CycleMap, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\n", v.Shard, m, cycle, cm, v.SlotsDone, v.Slots, v.Synced, v.Skipped)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if err := printMoved(stdout, moved); err != nil {
			return err
		}
	}
	if len(maps) > 1 {
		var held []string
		for _, key := range order {
			held = append(held, strings.Join(maps[key], ", ")+": "+key)
		}
		return fmt.Errorf("the shards' latest maps of task %s disagree (%s): a change was made on some shards only, or a shard is new; riverslot shards repair brings every shard to one map (the highest version's, or --ranges and --at), riverslot shards add joins a new shard",
			task, strings.Join(held, "; "))
	}
	return nil
}

func fromText(from time.Time) string {
	if from.IsZero() {
		return "every cycle"
	}
	return from.UTC().Format(time.RFC3339)
}

// shardOf reads one shard's latest map and latest cycle of the task.
func shardOf(ctx context.Context, s riverslot.Shard, task string) (shardView, error) {
	v := shardView{Shard: s.Name}
	m, ok, err := riverslot.ShardMapOf(ctx, s, task)
	if err != nil {
		return v, err
	}
	if ok {
		v.MapVersion, v.Map, v.EffectiveFrom = m.Version, m.String(), m.EffectiveFrom
	}
	return v, latestShardCycle(ctx, s.Pool, ledger.New(s.Schema).QualifiedTable(), task, &v)
}

// latestShardCycle reads into v the task's latest cycle in the ledger table
// of one shard.
func latestShardCycle(ctx context.Context, pool *pgxpool.Pool, table, task string, v *shardView) error {
	err := pool.QueryRow(ctx, `SELECT c.cycle_start, coalesce(c.shard_version, 0),
	coalesce(c.synced, 0), coalesce(c.gone, 0) + coalesce(c.stale, 0) + coalesce(c.upstream_skipped, 0),
	(SELECT count(*) FROM `+table+` s WHERE s.task = c.task AND s.cycle_start = c.cycle_start AND s.plan = c.plan AND s.slot >= 0),
	(SELECT count(*) FROM `+table+` s WHERE s.task = c.task AND s.cycle_start = c.cycle_start AND s.plan = c.plan AND s.slot >= 0 AND s.finished_at IS NOT NULL)
FROM `+table+` c WHERE c.task = $1 AND c.slot = -1 ORDER BY c.cycle_start DESC LIMIT 1`, task).
		Scan(&v.CycleStart, &v.CycleMap, &v.Synced, &v.Skipped, &v.Slots, &v.SlotsDone)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shard %q: error reading its latest cycle: %w", v.Shard, err)
	}
	v.CycleStart = v.CycleStart.UTC()
	return nil
}
