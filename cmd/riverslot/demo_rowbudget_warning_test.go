package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestDemoFirstRunNoRowBudgetWarning runs `make demo`'s command (the
// demo's defaults: 10,000 accounts, a 120 s cycle) on a new schema through
// Scheduler.Check, the step that warns about the row budget, and stops it
// as River starts: its output has no RowBudget warning. With River's 24 h
// retention (--completed-retention 0) the same run prints it, so the
// warning would show if the demo's default retention did not keep it away.
func TestDemoFirstRunNoRowBudgetWarning(t *testing.T) {
	t.Parallel()

	pool := riverslottest.Pool(t)
	const warning = "riverslot: this configuration keeps more rows in river_job than RowBudgetWarn"
	// Logged once Check has passed: River starts now, or waits for the
	// first cycle's trigger lead.
	afterCheck := regexp.MustCompile(`riverslot demo: (starting River at |\d+ cycle\(s\) from )`)

	runUntilChecked := func(t *testing.T, flags ...string) string {
		t.Helper()
		schema := newDemoSchemaName(t, pool)
		args := append([]string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}, flags...)
		defer reserveCmdConns(t, args)()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var stdout bytes.Buffer
		stderr := &cancelOnMatch{re: afterCheck, cancel: cancel}
		code := run(ctx, args, &stdout, stderr)
		require.True(t, stderr.matched(), "the demo stopped before Check passed (exit %d); stderr:\n%s", code, stderr.String())
		require.Equal(t, 130, code, "stderr:\n%s", stderr.String())
		require.Contains(t, stderr.String(), "seeded 10000/10000 accounts", "the defaults' fleet")
		return stderr.String()
	}

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		require.NotContains(t, runUntilChecked(t), warning)
	})
	t.Run("RiversDefaultRetentionWarns", func(t *testing.T) {
		t.Parallel()
		out := runUntilChecked(t, "--completed-retention", "0")
		require.Contains(t, out, warning)
		require.Contains(t, out, "accounts_estimate=10000")
	})
}
