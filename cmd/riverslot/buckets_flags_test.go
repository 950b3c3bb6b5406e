package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// worker and status describe the task they serve with --buckets too, and
// refuse any count but 256 and 65536 before touching a database.
func TestTaskFlagsBuckets(t *testing.T) {
	t.Parallel()

	for _, cmd := range []string{"worker", "status"} {
		code, stdout, stderr := runCmd(t, cmd, "--buckets", "3", "--database-url", "postgres://nobody@127.0.0.1:1/none")
		require.Equal(t, 2, code, "%s: %s", cmd, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "riverslot "+cmd+": --buckets must be 256 or 65536 (Task.Buckets), got 3")
	}
	fs := newFlagSet("worker", "", io.Discard)
	f := addTaskFlags(fs)
	require.NoError(t, parseFlags(fs, []string{"--buckets", "65536"}))
	require.NoError(t, f.check())
	require.Equal(t, 65536, f.riverTask().Buckets)
}
