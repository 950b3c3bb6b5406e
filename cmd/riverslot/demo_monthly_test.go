package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemoMonthly: `riverslot demo --cycle monthly --location ZONE`, as
// worker takes it, exits 2 before anything runs, naming the flag, why (the
// demo runs its cycles live, and a calendar month takes a month) and what
// to use instead (worker and plan with --cycle monthly), not flag's "is
// not a duration". --location without it is refused too, not silently
// ignored or unknown.
func TestDemoMonthly(t *testing.T) {
	t.Parallel()

	// An unreachable database: the flags are refused before a connection
	// is tried.
	const unreachable = "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"
	for _, args := range [][]string{
		{"--cycle", "monthly", "--location", "Europe/Berlin"},
		{"--cycle=monthly"},
	} {
		code, stdout, stderr := runCmd(t, append([]string{"demo", "--database-url", unreachable}, args...)...)
		require.Equal(t, 2, code, "%v: stderr: %s", args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "--cycle monthly: the demo runs its cycles live and waits for each to end, and a calendar month takes a month")
		require.Contains(t, stderr, "`riverslot worker --cycle monthly --location ZONE`")
		require.Contains(t, stderr, "`riverslot plan --cycle monthly --location ZONE`")
		require.NotContains(t, stderr, "is not a duration")
		require.NotContains(t, stderr, "cannot reach the database", "refused before connecting")
	}

	code, _, stderr := runCmd(t, "demo", "--database-url", unreachable, "--cycle", "48s", "--location", "Europe/Berlin")
	require.Equal(t, 2, code, "stderr: %s", stderr)
	require.Contains(t, stderr, "--location names the time zone of a calendar-month task, which the demo does not run")

	// A bad duration still gets flag's units, and a month as a hint.
	code, _, stderr = runCmd(t, "demo", "--database-url", unreachable, "--cycle", "1mo")
	require.Equal(t, 2, code, "stderr: %s", stderr)
	require.Contains(t, stderr, `"1mo" is not a duration`)
	require.Contains(t, stderr, "or monthly")
}
