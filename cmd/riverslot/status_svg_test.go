package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
)

// svgText parses an SVG file (failing the test when it is not well-formed)
// and returns its text content and the fill colours it uses.
func svgText(t *testing.T, path string) (text string, fills map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	fills = map[string]bool{}
	var sb strings.Builder
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s is not well-formed XML", path)
		switch tok := tok.(type) {
		case xml.CharData:
			sb.Write(tok)
			sb.WriteByte(' ')
		case xml.StartElement:
			for _, a := range tok.Attr {
				if a.Name.Local == "style" || a.Name.Local == "fill" {
					for _, part := range strings.Split(a.Value, ";") {
						if v, ok := strings.CutPrefix(strings.TrimSpace(part), "fill:"); ok {
							fills[v] = true
						} else if a.Name.Local == "fill" {
							fills[a.Value] = true
						}
					}
				}
			}
		}
	}
	return sb.String(), fills
}

// fillOf is the fill gonum's SVG canvas writes for a state's colour.
func fillOf(t *testing.T, state string) string {
	t.Helper()
	c, ok := inspect.StateColor(state)
	if !ok {
		t.Fatalf("no colour for %s", state)
	}
	return fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B)
}

// A failed slot is drawn in the failed colour with a legend entry, the
// verdict is in the title, and slots in no other state add no colour.
func TestStatusSVG(t *testing.T) {
	t.Parallel()

	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	st := &riverslot.TaskStatus{Task: "transactions", Current: &riverslot.CycleStatus{
		CycleStart: start, Slots: 4, Verdict: "failed slot 2: upstream table is broken", FailedSlot: 2,
		LatenessP50: 120 * time.Millisecond, LatenessP99: 480 * time.Millisecond, LatenessSample: 40, LatenessKnown: true,
		Enqueued: 50, AccountsExpected: 100,
		PerSlot: []riverslot.SlotStatus{
			{Slot: 0, State: riverslot.SlotDone, Expected: 25, Enqueued: 25},
			{Slot: 1, State: riverslot.SlotDone, Expected: 25, Enqueued: 25},
			{Slot: 2, State: riverslot.SlotFailed, Expected: 25, Error: "upstream table is broken"},
			{Slot: 3, State: riverslot.SlotScheduled, Expected: 25},
		},
	}}
	dir := t.TempDir()
	path := filepath.Join(dir, "cycle.svg")
	require.NoError(t, inspect.WriteStatusSVG(path, st))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the SVG, no temporary file left")
	text, fills := svgText(t, path)
	require.Contains(t, text, "failed slot 2: upstream table is broken")
	require.Contains(t, text, "p50 0.12s p99 0.48s (40 synced)")
	for _, legend := range []string{"done", "failed", "scheduled", "expected"} {
		require.Contains(t, text, legend)
	}
	require.NotContains(t, text, "running")
	require.True(t, fills[fillOf(t, riverslot.SlotFailed)], "the failed slot's colour is drawn")
	require.True(t, fills[fillOf(t, riverslot.SlotDone)])
	require.False(t, fills[fillOf(t, riverslot.SlotRunning)], "no running slot, no running colour")
}

func TestStatusSVGBadPath(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct{ path, want string }{
		{filepath.Join(t.TempDir(), "no", "such", "dir", "c.svg"), "does not exist; create it or write the file elsewhere"},
		{filepath.Join(t.TempDir(), "cycle.png"), "must end in .svg"},
	} {
		// Refused before connecting: the database URL is never tried.
		code, _, stderr := runCmd(t, "status", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "--svg", tt.path)
		require.Equal(t, 2, code)
		require.Contains(t, stderr, "riverslot status: --svg")
		require.Contains(t, stderr, tt.want)
		require.NotContains(t, stderr, "cannot reach the database")
	}
}

func TestStatusSVGDirectory(t *testing.T) {
	t.Parallel()

	dir := filepath.Join(t.TempDir(), "x.svg")
	require.NoError(t, os.Mkdir(dir, 0o755))
	code, _, stderr := runCmd(t, "status", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "--svg", dir)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "is a directory; give a file name")
}
