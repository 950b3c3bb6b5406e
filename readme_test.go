package riverslot_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// TestReadmeQuickStart checks that the README's quick start is the program
// the test suite runs: the first Go block of README.md is
// examples/quickstart/main.go, byte for byte (TestQuickStart runs it
// against Postgres).
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "```go\n")
	require.True(t, ok, "README.md has no Go block")
	block, _, ok := strings.Cut(after, "```")
	require.True(t, ok)

	program, err := os.ReadFile("examples/quickstart/main.go")
	require.NoError(t, err)
	require.Equal(t, string(program), block, "README.md's quick start must be examples/quickstart/main.go word for word")
}

// pendingDocs are pages the README links to that may not be in this tree
// yet; a link to one is checked only once the file exists. None now.
var pendingDocs = map[string]bool{}

// TestDocsLinks checks that every relative link and image of README.md and
// docs/*.md resolves: the file exists and, with a #fragment, the target
// Markdown file has a heading of that anchor (GitHub's rule).
func TestDocsLinks(t *testing.T) {
	t.Parallel()

	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	files = append([]string{"README.md"}, files...)
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, link := range markdownLinks(string(src)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
			}
			rel, err := filepath.Rel(".", target)
			require.NoError(t, err)
			if _, err := os.Stat(target); err != nil {
				if pendingDocs[filepath.ToSlash(rel)] {
					continue
				}
				t.Errorf("%s: link %q: %s does not exist", file, link, rel)
				continue
			}
			checked++
			if fragment == "" {
				continue
			}
			require.True(t, strings.HasSuffix(target, ".md"), "%s: link %q has a fragment on a file that is not Markdown", file, link)
			if anchors[target] == nil {
				md, err := os.ReadFile(target)
				require.NoError(t, err)
				anchors[target] = headingAnchors(string(md))
			}
			if !anchors[target][fragment] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", file, link, rel, fragment)
			}
		}
	}
	require.Greater(t, checked, 20, "the link scanner found too few links; is it broken?")
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	headingLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// markdownLinks returns the targets of the links and images of a Markdown
// document outside code blocks and inline code.
func markdownLinks(md string) []string {
	var links []string
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = inlineCodeRE.ReplaceAllString(line, "code")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives a document's headings:
// lowercased, punctuation other than '-' and '_' dropped, spaces made
// '-', and -1, -2, ... appended to repeats.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		text = headingLink.ReplaceAllString(text, "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors[anchor+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}
