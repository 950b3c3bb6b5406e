package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/sqltext"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// selection times per-slot account selection on n accounts for a 24h cycle
// (128 slots): sqlbucket's indexed range predicate over every slot, against
// the talk's text predicate (no index possible) over TextSlotsSampled slots,
// extrapolated to the cycle.
func (r *Runner) selection(ctx context.Context) error {
	plan, err := slotplan.New(24 * time.Hour)
	if err != nil {
		return err
	}
	for _, n := range r.cfg.SelectionSizes {
		schema, drop, err := r.schema(ctx, "selection")
		if err != nil {
			return err
		}
		if err := r.seedAccounts(ctx, schema, n, 255); err != nil {
			drop()
			return err
		}
		table := pgx.Identifier{schema, "accounts"}.Sanitize()
		rangeSQL := "SELECT id FROM " + table + " WHERE " + sqlbucket.SlotPredicate("id", 1, 2)
		textSQL := "SELECT id FROM " + table + " WHERE " + sqltext.SlotPredicate("id", 1, 2)

		count := func(sql string, args ...any) (int, time.Duration, error) {
			begun := time.Now()
			rows, err := r.cfg.Pool.Query(ctx, sql, args...)
			if err != nil {
				return 0, 0, err
			}
			k := 0
			for rows.Next() {
				k++
			}
			rows.Close()
			return k, time.Since(begun), rows.Err()
		}

		// Warm the cache the same way for both: one full pass.
		if _, _, err := count("SELECT id FROM " + table); err != nil {
			drop()
			return err
		}

		r.logf("indexed selection over %d slots of %d accounts", plan.Slots, n)
		var indexedTotal time.Duration
		selected := 0
		for slot := range plan.Slots {
			lo, hi := plan.BucketRange(slot)
			k, d, err := count(rangeSQL, lo, hi)
			if err != nil {
				drop()
				return err
			}
			indexedTotal += d
			selected += k
		}
		if selected != n {
			drop()
			return fmt.Errorf("indexed selection returned %d of %d accounts", selected, n)
		}

		samples := min(r.cfg.TextSlotsSampled, plan.Slots)
		r.logf("text-predicate selection over %d sampled slots of %d accounts", samples, n)
		var textTotal time.Duration
		for i := range samples {
			slot := i * plan.Slots / samples
			lo, hi := plan.BucketRange(slot)
			want, _, err := count(rangeSQL, lo, hi)
			if err != nil {
				drop()
				return err
			}
			k, d, err := count(textSQL, plan.BucketsPerSlot, slot)
			if err != nil {
				drop()
				return err
			}
			if k != want {
				drop()
				return fmt.Errorf("slot %d: text predicate selected %d, range %d", slot, k, want)
			}
			textTotal += d
		}
		drop()

		indexedPerSlot := indexedTotal / time.Duration(plan.Slots)
		textPerSlot := textTotal / time.Duration(samples)
		r.row("selection per slot (24h cycle, 128 slots, ~"+human(n/plan.Slots)+" rows/slot)", human(n),
			ms(indexedPerSlot)+" indexed range", ms(textPerSlot)+" text predicate",
			fmt.Sprintf("%.1fx faster", float64(textPerSlot)/float64(indexedPerSlot)))
		r.row("selection per cycle (all 128 slots)", human(n),
			ms(indexedTotal)+" measured", ms(textPerSlot*time.Duration(plan.Slots))+fmt.Sprintf(" (%d slots measured × 128)", samples),
			fmt.Sprintf("%.1fx faster", float64(textPerSlot*time.Duration(plan.Slots))/float64(indexedTotal)))
	}
	return nil
}
