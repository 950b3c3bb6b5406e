package riverutil_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeQuickStart checks that the README's quick start is the code
// Example_quickStart runs: the first Go block of README.md equals the lines
// between startApp's "quick start" markers, with "return nil, err" written
// "return err" and one level of indentation removed.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()

	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "```go\n")
	require.True(t, ok, "README.md has no Go block")
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok)

	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	_, after, ok = strings.Cut(string(src), "\t// --- quick start ---\n")
	require.True(t, ok)
	code, _, ok := strings.Cut(after, "\t// --- end of quick start ---\n")
	require.True(t, ok)

	var want strings.Builder
	for _, line := range strings.SplitAfter(code, "\n") {
		line = strings.TrimPrefix(line, "\t")
		want.WriteString(strings.ReplaceAll(line, "return nil, err", "return err"))
	}
	require.Equal(t, want.String(), block)
}
