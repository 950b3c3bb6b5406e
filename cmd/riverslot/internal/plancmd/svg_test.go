package plancmd

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/slotplan"
)

// The circle's points are the accounts' due times: two opposite tasks put
// every sample account at least half a cycle minus one slot apart, and one
// task alone at its slot.
func TestPlanCircleAngles(t *testing.T) {
	t.Parallel()

	plan, err := slotplan.New(24 * time.Hour)
	require.NoError(t, err)
	a := Task{Name: "payments", Seed: slotplan.SeedFromName("payments")}
	b := Task{Name: "reports", Seed: slotplan.SeedFromName("reports"), Shift: plan.Slots / 2}
	slotAngle := 2 * math.Pi / float64(plan.Slots)
	for _, id := range circleAccounts(circleSample) {
		x, y := circleAngle(plan, a, id), circleAngle(plan, b, id)
		require.GreaterOrEqual(t, x, float64(plan.SlotOf(id))*slotAngle)
		require.Less(t, x, float64(plan.SlotOf(id)+1)*slotAngle)
		d := math.Abs(x - y)
		d = math.Min(d, 2*math.Pi-d)
		require.GreaterOrEqual(t, d, math.Pi-slotAngle, "account %s", id)
	}
}
