package riverslot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

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
		return out, nil
	}
	return nil, &noCycleError{msg: fmt.Sprintf("the map (version %d) gives the account to shard %q, which was not given", m.Version, owner)}
}
