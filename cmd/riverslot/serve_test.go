package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeFlags: serve refuses bad flags (exit 2, naming the flag and the
// fix) before it listens or connects.
func TestServeFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--periods", "1h,7s"}, `--periods "7s": 7s is too short: a period is at least 16s`},
		{[]string{"--periods", "1h0m1s"}, "cannot be spread evenly"},
		{[]string{"--periods", "monthly", "--month-location", "Mars/Olympus"}, `--month-location "Mars/Olympus" is not a time zone name`},
		{[]string{"--periods", "1h,weekly"}, `--periods "weekly": must be a duration such as "32s", "1h" or "24h", or "monthly"`},
		{[]string{"--workers", "0"}, "--workers must be between 1 and"},
		{[]string{"--history", "10m"}, "--history must be at least 1h"},
		{[]string{"--host-rate", "-1"}, "must not be negative"},
		{[]string{"--addr", "not-an-address"}, "--addr"},
		{[]string{"--tenant-max-schedules", "-2"}, "--tenant-max-schedules must be between -1 (no quota)"},
		{[]string{"--tenant-max-calls-per-second", "-1"}, "--tenant-max-calls-per-second must be between 0 (no quota)"},
	} {
		code, _, stderr := runCmd(t, append([]string{"serve", "--database-url", "postgres://nobody@127.0.0.1:1/none"}, tt.args...)...)
		require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
		require.Contains(t, stderr, tt.want, tt.args)
	}
}
