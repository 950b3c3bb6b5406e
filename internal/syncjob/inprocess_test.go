package syncjob

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHoldInProcess: at most InProcessPerUpstream syncs of one task's
// upstream wait in process on a node; another upstream, or the same key
// of another task, has places of its own; a place given back (once, however
// often release runs) can be taken again.
func TestHoldInProcess(t *testing.T) {
	t.Parallel()
	w := &Worker{}
	var releases []func()
	for range InProcessPerUpstream {
		release, ok := w.holdInProcess("transactions", "bank-1")
		require.True(t, ok)
		releases = append(releases, release)
	}
	_, ok := w.holdInProcess("transactions", "bank-1")
	require.False(t, ok, "the upstream's places are taken")
	_, ok = w.holdInProcess("transactions", "bank-2")
	require.True(t, ok, "another upstream is not held back")
	_, ok = w.holdInProcess("statements", "bank-1")
	require.True(t, ok, "the same key of another task is another upstream")

	releases[0]()
	releases[0]() // twice: gives back one place only
	_, ok = w.holdInProcess("transactions", "bank-1")
	require.True(t, ok, "a place given back is taken again")
	_, ok = w.holdInProcess("transactions", "bank-1")
	require.False(t, ok, "a second release gave back nothing more")
}
