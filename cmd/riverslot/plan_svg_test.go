package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

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
