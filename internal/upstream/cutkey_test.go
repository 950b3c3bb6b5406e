package upstream_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestCutKey: a key over MaxKeyLen bytes is cut on a character boundary,
// whatever the width (1 to 4 bytes) of the character at the limit, and
// PostgreSQL's CutKeySQL cuts every key the same way (a byte cut inside a
// character would make PostgreSQL reject the fan-out's whole page).
func TestCutKey(t *testing.T) {
	t.Parallel()
	n := upstream.MaxKeyLen
	keys := map[string]string{ // key → what must be kept
		"":                           "",
		"bank":                       "bank",
		strings.Repeat("a", n):       strings.Repeat("a", n),
		strings.Repeat("a", n+1):     strings.Repeat("a", n),
		strings.Repeat("é", n/2):     strings.Repeat("é", n/2),
		strings.Repeat("é", n):       strings.Repeat("é", n/2),
		"a" + strings.Repeat("é", n): "a" + strings.Repeat("é", n/2-1), // é at bytes 127-128
	}
	// A 2-, 3- and 4-byte character starting at each byte that makes it
	// straddle the limit.
	for _, r := range []string{"é", "€", "😀"} {
		for start := n - len(r) + 1; start < n; start++ {
			prefix := strings.Repeat("x", start)
			keys[prefix+r+"tail"] = prefix
		}
		// Ending exactly at the limit: kept whole.
		prefix := strings.Repeat("x", n-len(r))
		keys[prefix+r+"tail"] = prefix + r
	}

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	for key, want := range keys {
		got := upstream.CutKey(key)
		require.Equal(t, want, got, "CutKey(%q)", key)
		require.LessOrEqual(t, len(got), n)
		require.True(t, utf8.ValidString(got))

		var inSQL string
		require.NoError(t, pool.QueryRow(ctx, "SELECT "+upstream.CutKeySQL("$1::text"), key).Scan(&inSQL), "CutKeySQL(%q)", key)
		require.Equal(t, want, inSQL, "CutKeySQL(%q)", key)
	}
	var null string
	require.NoError(t, pool.QueryRow(ctx, "SELECT "+upstream.CutKeySQL("NULL::text")).Scan(&null))
	require.Empty(t, null)
}
