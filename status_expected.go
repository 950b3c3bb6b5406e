package riverslot

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/sqlbucket"
)

// expectedTTL is how long Status reuses its count of the accounts per slot
// and of the accounts a cycle's pins move: counting a million accounts takes
// a few hundred milliseconds, and the counts move slowly.
const expectedTTL = time.Minute

type expectedCount struct {
	at     time.Time
	counts []int64
}

// cachedCounts returns the counts stored under key less than expectedTTL
// ago, else those of count, stored. Expired entries are dropped on the way,
// so the cache holds the few tasks and cycles of the last minute.
func (s *Scheduler) cachedCounts(key string, count func() ([]int64, error)) ([]int64, error) {
	s.expectedMu.Lock()
	cached, ok := s.expected[key]
	s.expectedMu.Unlock()
	if ok && time.Since(cached.at) < expectedTTL {
		return cached.counts, nil
	}
	counts, err := count()
	if err != nil {
		return nil, err
	}
	s.expectedMu.Lock()
	defer s.expectedMu.Unlock()
	if s.expected == nil {
		s.expected = make(map[string]expectedCount)
	}
	for k, c := range s.expected {
		if time.Since(c.at) >= expectedTTL {
			delete(s.expected, k)
		}
	}
	s.expected[key] = expectedCount{at: time.Now(), counts: counts}
	return counts, nil
}

// hashCounts counts the accounts of each hash slot (the bucket slot
// shifted by the plan's shift) of the cycle starting at cycleStart,
// through the bucket index, at most once per expectedTTL per task and
// plan (and month). A calendar month's day counts the buckets that start
// on it (a bucket on the boundary of two days counts whole on the first).
func (s *Scheduler) hashCounts(ctx context.Context, spec *taskspec.Spec, cycleStart time.Time) ([]int64, error) {
	key, per := "hash\x00"+spec.Name+"\x00"+spec.PlanID, spec.Plan.BucketsPerSlot
	if spec.Monthly() {
		key, per = key+"\x00"+cycleStart.UTC().Format(time.RFC3339), 1
	}
	return s.cachedCounts(key, func() ([]int64, error) {
		rows, err := spec.AccountsDB(s.pool).Query(ctx, "SELECT "+spec.BucketExpr()+" / $1 AS bucket_slot, count(*) FROM "+spec.QualifiedTable+
			" WHERE true"+spec.FilterClause+" GROUP BY 1", per)
		if err != nil {
			return nil, fmt.Errorf("error counting accounts per slot: %w", err)
		}
		out := make([]int64, spec.Slots(cycleStart))
		var slot int
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&slot, &n}, func() error {
			if spec.Monthly() {
				out[spec.Month.BucketDay(cycleStart, slot)] += n
				return nil
			}
			out[spec.Plan.Shift(slot, spec.Shift)] = n
			return nil
		}); err != nil {
			return nil, fmt.Errorf("error counting accounts per slot: %w", err)
		}
		return out, nil
	})
}

// pinMovesSQL counts, by bucket and pinned slot, the accounts pinned in a
// cycle ($1 task, $2 plan, $3 cycle start) in the pins tables of schema that
// the task's filter still selects: each pin looked up by (bucket, id) in
// the bucket index in a subquery of its own (LIMIT 1 keeps it a lookup per
// pin, never a merge join along the whole index), as the per-slot job's
// pinned pages do, so the count costs one index lookup per pin and never
// scans the accounts table.
//
//	SELECT p.bucket, p.slot, count(*) FROM riverslot_pins p
//	CROSS JOIN LATERAL (SELECT 1 FROM accounts
//	    WHERE get_byte(uuid_send(id), 15) = p.bucket AND id = p.account_id AND (filter) LIMIT 1) a
//	WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3
//	GROUP BY 1, 2
func pinMovesSQL(spec *taskspec.Spec, schema string) string {
	return "SELECT p.bucket, p.slot, count(*) FROM " + sqlbucket.QualifiedTable(schema, taskspec.PinsTable) + " p" +
		" CROSS JOIN LATERAL (SELECT 1 FROM " + spec.QualifiedTable + " WHERE " + spec.BucketExpr() + " = p.bucket AND " +
		spec.QuotedID + " = p.account_id" + spec.FilterClause + " LIMIT 1) a" +
		" WHERE p.task = $1 AND p.plan = $2 AND p.cycle_start = $3" +
		" GROUP BY 1, 2"
}

// pinMoves returns, per slot of the task's cycle at cycleStart that
// follows the pins ref, the accounts pinned to it (in) and those of its
// hash slot pinned in the cycle (out; an account pinned to its own hash
// slot is in both), as the cycle's per-slot jobs serve them: an account
// pinned to slot p is served in slot p + ref.Shift, and one pinned to a
// slot out of range is served nowhere. Nil slices for hash placement.
func (s *Scheduler) pinMoves(ctx context.Context, spec *taskspec.Spec, ref *taskspec.PinsRef, cycleStart time.Time) (in, out []int64, err error) {
	if ref == nil {
		return nil, nil, nil
	}
	slots := spec.Plan.Slots
	key := strings.Join([]string{"pins", spec.Name, spec.PlanID, ref.Schema, ref.Task, ref.Plan, strconv.Itoa(ref.Shift), ref.PinsCycle(cycleStart).Format(time.RFC3339Nano)}, "\x00")
	counts, err := s.cachedCounts(key, func() ([]int64, error) {
		rows, err := spec.AccountsDB(s.pool).Query(ctx, pinMovesSQL(spec, ref.Schema), ref.Task, ref.Plan, ref.PinsCycle(cycleStart))
		if err != nil {
			return nil, fmt.Errorf("error counting the accounts pinned in the cycle (pins of task %q, plan %s): %w", ref.Task, ref.Plan, err)
		}
		counts := make([]int64, 2*slots) // in, then out
		var (
			bucket, slot int
			n            int64
		)
		if _, err := pgx.ForEachRow(rows, []any{&bucket, &slot, &n}, func() error {
			if bucket < 0 || bucket >= spec.Plan.Buckets {
				return nil
			}
			counts[slots+spec.Plan.Shift(bucket/spec.Plan.BucketsPerSlot, spec.Shift)] += n
			if slot >= 0 && slot < slots {
				counts[spec.Plan.Shift(slot, ref.Shift)] += n
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("error counting the accounts pinned in the cycle (pins of task %q, plan %s): %w", ref.Task, ref.Plan, err)
		}
		return counts, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return counts[:slots], counts[slots:], nil
}
