package perslot_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// oldArgs are per-slot args as the version before the typed plan key wrote
// them: the plan a plain string.
type oldArgs struct {
	Task       string    `json:"task" river:"unique"`
	CycleStart time.Time `json:"cycle_start" river:"unique"`
	Slot       int       `json:"slot" river:"unique"`
	Plan       string    `json:"plan" river:"unique"`
}

func (oldArgs) Kind() string { return perslot.Kind }

// TestArgsWireCompatible: a per-slot job made by a node of the previous
// version and one made now for the same slot and plan are one job to River
// (the second is a duplicate by its unique args), and the old job's args
// decode to the plan the new node runs; very old jobs without a plan
// decode to the zero key (the node's own plan).
func TestArgsWireCompatible(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	require.NoError(t, err)
	spec := riverslottest.SpecBuckets(t, "transactions", schema, "accounts", "", 24*time.Hour, 100, 65536)
	spec.SetKey(taskspec.KeyOf(spec.Plan, spec.Seed, 5))
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	opts := &river.InsertOpts{Queue: "parked", UniqueOpts: taskspec.UniqueEveryState()}

	old, err := client.Insert(ctx, oldArgs{Task: spec.Name, CycleStart: start, Slot: 3, Plan: spec.PlanID}, opts)
	require.NoError(t, err)
	require.False(t, old.UniqueSkippedAsDuplicate)
	now, err := client.Insert(ctx, perslot.NewArgs(spec, start, 3), opts)
	require.NoError(t, err)
	require.True(t, now.UniqueSkippedAsDuplicate, "the same slot of the same plan, made by two versions: one job")
	require.Equal(t, old.Job.ID, now.Job.ID)

	// The old job's args, as a new node's worker decodes them.
	var args perslot.Args
	require.NoError(t, json.Unmarshal(old.Job.EncodedArgs, &args))
	require.NoError(t, args.Plan.Err())
	require.Equal(t, spec.Key, args.Plan)
	got, err := spec.ForPlan(args.Plan, start)
	require.NoError(t, err)
	require.Same(t, spec, got, "the node's own plan")

	for _, raw := range []string{`{"task":"t","cycle_start":"2030-01-01T00:00:00Z","slot":0}`, `{"task":"t","cycle_start":"2030-01-01T00:00:00Z","slot":0,"plan":""}`, `{"task":"t","cycle_start":"2030-01-01T00:00:00Z","slot":0,"plan":null}`} {
		var a perslot.Args
		require.NoError(t, json.Unmarshal([]byte(raw), &a), raw)
		require.True(t, a.Plan.IsZero(), raw)
	}
}
