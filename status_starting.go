package riverslot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/sqlbucket"
)

// StartingGrace is how long after River's leader is elected (or, with no
// leader, after a slot passed its middle) a cycle whose slots wait for
// their fan-out is said to be starting rather than behind: River's leader
// promotes scheduled jobs every few seconds once elected.
const StartingGrace = 30 * time.Second

// checkStarting turns c's "behind" verdict into "starting" while River is
// starting (see CycleStatus.Starting). It reads River's one-row
// river_leader table.
func (s *Scheduler) checkStarting(ctx context.Context, spec *taskspec.Spec, c *CycleStatus, now time.Time) error {
	if c.BehindSlots == 0 || c.FailedSlot >= 0 {
		return nil
	}
	// Only slots whose per-slot jobs River would run at once can be
	// starting: not missing, retrying or held for later.
	var behind []int
	for _, p := range c.PerSlot {
		if p.State == SlotMissing {
			return nil
		}
		if open(p) && !now.Before(p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot)/2)) {
			behind = append(behind, p.Slot)
		}
	}
	var ids []int64
	for _, slot := range behind {
		if id := c.PerSlot[slot].jobID; id != 0 {
			ids = append(ids, id)
		}
	}
	var held int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.riverTable(spec)+
		" WHERE id = ANY($1) AND (state IN ('retryable', 'pending') OR (state IN ('scheduled', 'available') AND scheduled_at > now()))",
		ids).Scan(&held); err != nil {
		return fmt.Errorf("error reading the cycle's waiting per-slot jobs: %w", err)
	}
	if held > 0 {
		return nil
	}
	var elected float64
	err := s.pool.QueryRow(ctx, "SELECT extract(epoch FROM now() - elected_at)::float8 FROM "+
		sqlbucket.QualifiedTable(s.riverSchema, "river_leader")+" LIMIT 1").Scan(&elected)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		for _, p := range c.PerSlot {
			mid := p.Start.Add(spec.SlotLen(c.CycleStart, p.Slot) / 2)
			if open(p) && now.Sub(mid) >= StartingGrace {
				return nil
			}
		}
		c.Starting = true
		c.Verdict = fmt.Sprintf("starting: no River leader elected yet (%d slots wait for their fan-out)", c.BehindSlots)
	case err != nil:
		return fmt.Errorf("error reading River's leader: %w", err)
	case time.Duration(elected*float64(time.Second)) < StartingGrace:
		c.Starting = true
		c.Verdict = fmt.Sprintf("starting: River's leader was elected %.0fs ago (%d slots wait for their fan-out)", elected, c.BehindSlots)
	}
	return nil
}
