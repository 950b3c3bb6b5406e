package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCycleInDays: --cycle 1d (days are not a Go duration unit) exits 2 on
// every command that takes --cycle, before anything runs, saying which
// units are accepted and what a day is, not flag's bare "parse error".
func TestCycleInDays(t *testing.T) {
	t.Parallel()

	for _, cmd := range []string{"demo", "worker", "status", "plan", "simulate"} {
		t.Run(strings.ToUpper(cmd[:1])+cmd[1:], func(t *testing.T) {
			t.Parallel()
			args := []string{cmd, "--cycle", "1d"}
			if cmd != "plan" && cmd != "simulate" {
				// An unreachable database: the flag is refused before a
				// connection is tried.
				args = append(args, "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
			}
			code, stdout, stderr := runCmd(t, args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, `invalid value "1d" for flag -cycle: "1d" is not a duration (days are not a unit: 24h is a day); write a number with a unit of s, m or h, e.g. 24h, 90m, 120s`)
			require.NotContains(t, stderr, "parse error")
			require.NotContains(t, stderr, "cannot reach the database", "refused before connecting")
		})
	}

	// Another bad duration gets the units without the day hint.
	code, _, stderr := runCmd(t, "plan", "--cycle", "fortnight")
	require.Equal(t, 2, code, "stderr: %s", stderr)
	require.Contains(t, stderr, `"fortnight" is not a duration; write a number with a unit of s, m or h`)
	require.NotContains(t, stderr, "days are not a unit")
}
