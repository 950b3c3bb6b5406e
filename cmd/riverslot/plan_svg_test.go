package main

import (
	"math"
	"path/filepath"
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
	a := planTask{name: "payments", seed: slotplan.SeedFromName("payments")}
	b := planTask{name: "reports", seed: slotplan.SeedFromName("reports"), shift: plan.Slots / 2}
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

func TestPlanSVG(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "circle.svg")
	code, stdout, stderr := runCmd(t, "plan", "--cycle", "120s", "--task", "payments", "--opposite", "reports",
		"--account", "6ba7b810-9dad-41d1-80b4-00c04fd430c8", "--svg", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "task           reports")
	text, fills := svgText(t, path)
	require.Contains(t, text, "payments (outer ring) and reports (inner ring, opposite)")
	require.Contains(t, text, "--account 6ba7b810-9dad-41d1-80b4-00c04fd430c8")
	require.True(t, fills["#1F6FD1"] && fills["#D15F1F"], "both rings' colours are drawn")

	code, _, stderr = runCmd(t, "plan", "--svg", filepath.Join(t.TempDir(), "missing", "c.svg"))
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "riverslot plan: --svg")
}
