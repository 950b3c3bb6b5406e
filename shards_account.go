package riverslot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// ShardAccount is an account of a sharded task: the shard the map in
// force gives it and that shard's AccountStatus.
type ShardAccount struct {
	Shard string
	// MapVersion is the version of the map in force now: the highest
	// any answering shard holds.
	MapVersion int64
	Account    *AccountStatus
	// CurrentShard and PreviousShard name the shard that served the
	// account's slot in the cycle of Account.Current and Account.Previous,
	// by the map that cycle's bootstrap followed there; each sync is read
	// from that shard. After a move, the cycle before it is the old
	// shard's: the account's sync there, never a slot "missing" on the new
	// one. Previous is the latest cycle before Current that any answering
	// shard recorded (a shard that joined has no earlier cycle of its
	// own). "" when no answering shard records serving it (the owner's
	// own view is kept).
	CurrentShard, PreviousShard string
}

// AccountOnShards returns the shard of a sharded task that the shard map in
// force gives the account, and where the account stands there (Account on
// that shard's Scheduler). shards are the task's schedulers, one per shard
// as StatusShards takes them. Every shard's copy of the map is read at
// once, within the first half of ctx's time when it has a deadline (a shard
// that never answers leaves the account's own shard the second half); the
// highest version wins. It fails with an error wrapping ErrNoCycle when no
// answering shard holds a map in force, or when the map gives the account
// to a shard that is not among shards.
func AccountOnShards(ctx context.Context, task string, id uuid.UUID, shards ...*Scheduler) (*ShardAccount, error) {
	if len(shards) == 0 {
		return nil, errors.New("AccountOnShards needs one Scheduler per shard")
	}
	if _, err := shards[0].spec(task); err != nil {
		return nil, err
	}
	now := time.Now()
	findCtx, cancel := halfDeadline(ctx)
	defer cancel()
	maps := make([]*slotplan.ShardMap, len(shards))
	errs := make([]error, len(shards))
	eachShard(shards, func(i int, s *Scheduler) {
		if !s.configured {
			errs[i] = fmt.Errorf("shard %q: %w", s.shard, errNoRiverSchema)
			return
		}
		sm, ok, err := s.ledger().ShardMapAt(findCtx, s.pool, task, now)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("shard %q: %w", s.shard, err)
		case ok:
			maps[i] = &sm.ShardMap
		}
	})
	var (
		m     slotplan.ShardMap
		found bool
	)
	for _, sm := range maps {
		if sm != nil && (!found || sm.Version > m.Version) {
			m, found = *sm, true
		}
	}
	if !found {
		if !slices.Contains(errs, nil) {
			return nil, errors.Join(errs...)
		}
		return nil, &noCycleError{msg: fmt.Sprintf("task %q has no shard map in force on the shards that answered: set one (riverslot shards set)", task)}
	}
	owner := m.OwnerOf(id)
	out := &ShardAccount{Shard: owner, MapVersion: m.Version}
	for _, s := range shards {
		if s.shard != owner {
			continue
		}
		spec, err := s.spec(task)
		if err != nil {
			return nil, &noCycleError{msg: err.Error()}
		}
		a, err := s.account(ctx, spec, id, now)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", owner, err)
		}
		out.Account = a
		if err := servedSyncs(ctx, spec, id, s, shards, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, &noCycleError{msg: fmt.Sprintf("the map (version %d) gives the account to shard %q, which was not given", m.Version, owner)}
}

// servedSyncs sets out's Current and Previous syncs to those of the shard
// that served the account's slot in each cycle (owner first, then the
// others), and names it. The other shards are asked at once, within half
// the time ctx has left: one that does not answer is passed over.
func servedSyncs(ctx context.Context, spec *taskspec.Spec, id uuid.UUID, owner *Scheduler, shards []*Scheduler, out *ShardAccount) error {
	a := out.Account
	if a.Current == nil {
		return nil
	}
	others := slices.DeleteFunc(slices.Clone(shards), func(s *Scheduler) bool { return s == owner || !s.configured })
	if a.Previous == nil && len(others) > 0 {
		// The owner records no cycle before Current (it joined the fleet
		// since): the latest any other shard records before it.
		found := make([]*ledger.Cycle, len(others))
		askCtx, cancel := halfDeadline(ctx)
		eachShard(others, func(i int, s *Scheduler) {
			if cycles, err := s.ledger().Cycles(askCtx, s.pool, spec.Name, time.Time{}, a.Current.CycleStart, 1); err == nil && len(cycles) > 0 {
				found[i] = &cycles[0]
			}
		})
		cancel()
		var prev *ledger.Cycle
		for _, c := range found {
			if c != nil && (prev == nil || c.Start.After(prev.Start)) {
				prev = c
			}
		}
		if prev != nil {
			cs, err := planSpec(spec, prev.Plan, prev.Start)
			if err != nil {
				return err
			}
			slot := cs.SlotOf(prev.Start, id)
			a.Previous = &AccountSync{Source: "ledger", CycleStart: prev.Start.UTC(), Plan: cs.PlanID, Slot: slot, State: SlotMissing,
				ScheduledAt: cs.Regular(prev.Start, slot, id).UTC()}
		}
	}
	for _, c := range []struct {
		sync  **AccountSync
		shard *string
	}{{&a.Current, &out.CurrentShard}, {&a.Previous, &out.PreviousShard}} {
		if *c.sync == nil {
			continue
		}
		if served, err := servesSlot(ctx, spec, owner, *c.sync); err != nil {
			return err
		} else if served != nil {
			*c.shard = owner.shard // the owner's own sync, as Account read it
			continue
		}
		recs := make([]*ledger.Cycle, len(others))
		askCtx, cancel := halfDeadline(ctx)
		eachShard(others, func(i int, s *Scheduler) {
			recs[i], _ = servesSlot(askCtx, spec, s, *c.sync) // one that does not answer is passed over
		})
		cancel()
		for i, rec := range recs {
			if rec == nil {
				continue
			}
			s := others[i]
			cs, err := planSpec(spec, rec.Plan, rec.Start)
			if err != nil {
				return err
			}
			sync, err := s.accountSync(ctx, s.riverTable(cs), cs, id, rec.Start, (*c.sync).Slot)
			if err != nil {
				return fmt.Errorf("shard %q: %w", s.shard, err)
			}
			*c.sync, *c.shard = sync, s.shard
			break
		}
	}
	return nil
}

// servesSlot returns s's ledger record of the cycle of sync when s made
// it with the account's slot its own, by the map it followed (a cycle of
// an unsharded task: its own); nil when it did not.
func servesSlot(ctx context.Context, spec *taskspec.Spec, s *Scheduler, sync *AccountSync) (*ledger.Cycle, error) {
	rec, ok, err := s.ledger().CycleRecord(ctx, s.pool, spec.Name, sync.Plan, sync.CycleStart)
	if err != nil || !ok {
		return nil, err
	}
	if rec.Shard == "" {
		return &rec, nil
	}
	cs, err := planSpec(spec, rec.Plan, rec.Start)
	if err != nil {
		return nil, err
	}
	m, ok, err := s.ledger().ShardMapVersion(ctx, s.pool, spec.Name, rec.ShardVersion)
	if err != nil || !ok || m.SlotOwner(cs.Plan, cs.Shift, sync.Slot) != rec.Shard {
		return nil, err
	}
	return &rec, nil
}
