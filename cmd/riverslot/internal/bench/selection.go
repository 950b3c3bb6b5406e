package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/sqltext"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// textIndex is the name of the expression index on the text form that the
// selection benchmark builds to compare with the bucket index.
const textIndex = "accounts_id_text_bucket_idx"

// selection times per-slot account selection on each of SelectionSizes for a
// 24h cycle (128 slots); see selectionAt.
func (r *Runner) selection(ctx context.Context) error {
	plan, err := slotplan.New(24 * time.Hour)
	if err != nil {
		return err
	}
	for _, n := range r.cfg.SelectionSizes {
		if err := r.selectionAt(ctx, plan, n); err != nil {
			return err
		}
	}
	return nil
}

// selectionAt times, on n accounts:
//
//   - sqlbucket's range predicate on the bucket index over every slot,
//     against the talk's text predicate (expr / k = slot, which no index
//     serves) over TextSlotsSampled slots, extrapolated to the cycle;
//   - then what an index on the text form costs: it builds an expression
//     index on the text form, reports both indexes' size and build time, and
//     times every slot with each form's range predicate on its own index,
//     alternating, with the same rows selected.
func (r *Runner) selectionAt(ctx context.Context, plan slotplan.Plan, n int) error {
	schema, drop, err := r.schema(ctx, "selection")
	if err != nil {
		return err
	}
	defer drop()
	if err := r.seedAccounts(ctx, schema, n, 255); err != nil {
		return err
	}
	table := pgx.Identifier{schema, "accounts"}.Sanitize()
	rangeSQL := "SELECT id FROM " + table + " WHERE " + sqlbucket.SlotPredicate("id", 1, 2)
	textSQL := "SELECT id FROM " + table + " WHERE " + sqltext.SlotPredicate("id", 1, 2)
	textRangeSQL := "SELECT id FROM " + table + " WHERE " + sqltext.Expr("id") + " BETWEEN $1 AND $2"

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
		return err
	}

	r.logf("indexed selection over %d slots of %d accounts", plan.Slots, n)
	var indexedTotal time.Duration
	selected := 0
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		k, d, err := count(rangeSQL, lo, hi)
		if err != nil {
			return err
		}
		indexedTotal += d
		selected += k
	}
	if selected != n {
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
			return err
		}
		k, d, err := count(textSQL, plan.BucketsPerSlot, slot)
		if err != nil {
			return err
		}
		if k != want {
			return fmt.Errorf("slot %d: text predicate selected %d, range %d", slot, k, want)
		}
		textTotal += d
	}

	indexedPerSlot := indexedTotal / time.Duration(plan.Slots)
	textPerSlot := textTotal / time.Duration(samples)
	r.row("selection per slot (24h cycle, 128 slots, ~"+human(n/plan.Slots)+" rows/slot)", human(n),
		ms(indexedPerSlot)+" indexed range", ms(textPerSlot)+" text predicate",
		fmt.Sprintf("%.1fx faster", float64(textPerSlot)/float64(indexedPerSlot)))
	r.row("selection per cycle (all 128 slots)", human(n),
		ms(indexedTotal)+" measured", ms(textPerSlot*time.Duration(plan.Slots))+fmt.Sprintf(" (%d slots measured × 128)", samples),
		fmt.Sprintf("%.1fx faster", float64(textPerSlot*time.Duration(plan.Slots))/float64(indexedTotal)))

	// An index on the text form. Both builds are timed the same way: the
	// bucket index is rebuilt with REINDEX, the text one created; then
	// ANALYZE gathers the text expression's statistics for the planner.
	r.logf("building an expression index on the text form of %d accounts", n)
	timeExec := func(sql string) (time.Duration, error) {
		if _, err := r.cfg.Pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return 0, err
		}
		begun := time.Now()
		_, err := r.cfg.Pool.Exec(ctx, sql)
		return time.Since(begun), err
	}
	bucketBuild, err := timeExec("REINDEX INDEX " + pgx.Identifier{schema, bucketIndex}.Sanitize())
	if err != nil {
		return err
	}
	textBuild, err := timeExec("CREATE INDEX " + pgx.Identifier{textIndex}.Sanitize() + " ON " + table + " ((" + sqltext.Expr("id") + "), id)")
	if err != nil {
		return fmt.Errorf("error creating the text-form index: %w", err)
	}
	if _, err := r.cfg.Pool.Exec(ctx, "ANALYZE "+table); err != nil {
		return err
	}
	var bucketSize, textSize int64
	if err := r.cfg.Pool.QueryRow(ctx, "SELECT pg_relation_size($1::regclass), pg_relation_size($2::regclass)",
		pgx.Identifier{schema, bucketIndex}.Sanitize(), pgx.Identifier{schema, textIndex}.Sanitize()).Scan(&bucketSize, &textSize); err != nil {
		return err
	}

	// Each range predicate must be served by its own index, or the timing
	// below compares something else.
	lo, hi := plan.BucketRange(plan.Slots / 2)
	for sql, index := range map[string]string{rangeSQL: bucketIndex, textRangeSQL: textIndex} {
		rows, err := r.cfg.Pool.Query(ctx, "EXPLAIN "+sql, lo, hi)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if explained := strings.Join(lines, "\n"); !strings.Contains(explained, index) {
			return fmt.Errorf("%s does not use %s:\n%s", sql, index, explained)
		}
	}

	r.logf("selection with each form on its own index over %d slots of %d accounts", plan.Slots, n)
	var bucketTotal, textIndexedTotal time.Duration
	for slot := range plan.Slots {
		lo, hi := plan.BucketRange(slot)
		want, d, err := count(rangeSQL, lo, hi)
		if err != nil {
			return err
		}
		bucketTotal += d
		k, d, err := count(textRangeSQL, lo, hi)
		if err != nil {
			return err
		}
		if k != want {
			return fmt.Errorf("slot %d: text-form range selected %d, bucket range %d", slot, k, want)
		}
		textIndexedTotal += d
	}

	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	r.row("text form on its own expression index: index size, build time", human(n),
		fmt.Sprintf("%s, %.2f s (bucket index)", mib(bucketSize), bucketBuild.Seconds()),
		fmt.Sprintf("%s, %.2f s (index on the text form)", mib(textSize), textBuild.Seconds()),
		fmt.Sprintf("%.2fx the size, %.2fx the build time", float64(textSize)/float64(bucketSize), textBuild.Seconds()/bucketBuild.Seconds()))
	r.row("selection per slot, each form's range predicate on its own index (all 128 slots, alternating)", human(n),
		ms(bucketTotal/time.Duration(plan.Slots))+" bucket index", ms(textIndexedTotal/time.Duration(plan.Slots))+" text-form index",
		fmt.Sprintf("text form %.2fx the time", float64(textIndexedTotal)/float64(bucketTotal)))
	return nil
}
