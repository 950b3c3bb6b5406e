package inspect

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/plotfile"
)

// slotStateColors are the colours of the slot states in --svg, in legend
// order.
var slotStateColors = []struct {
	state string
	color color.RGBA
}{
	{riverslot.SlotDone, color.RGBA{R: 0x2e, G: 0x9e, B: 0x44, A: 0xff}},
	{riverslot.SlotRunning, color.RGBA{R: 0x1f, G: 0x6f, B: 0xd1, A: 0xff}},
	{riverslot.SlotScheduled, color.RGBA{R: 0xb0, G: 0xb0, B: 0xb0, A: 0xff}},
	{riverslot.SlotFailed, color.RGBA{R: 0xd1, G: 0x24, B: 0x2f, A: 0xff}},
	{riverslot.SlotMissing, color.RGBA{R: 0xe3, G: 0x8b, B: 0x00, A: 0xff}},
}

// StateColor is the colour --svg draws slots in state in.
func StateColor(state string) (color.RGBA, bool) {
	for _, sc := range slotStateColors {
		if sc.state == state {
			return sc.color, true
		}
	}
	return color.RGBA{}, false
}

// WriteStatusSVG draws the current cycle: one bar per slot, coloured by its
// fan-out state (done and running slots show the accounts enqueued, the
// others the accounts they will select), a mark at each slot's expected
// accounts (under the cycle's placement), and the verdict, lateness,
// placement and syncs completed without calling Sync in the title.
func WriteStatusSVG(path string, st *riverslot.TaskStatus) error {
	p, err := statusPlot(st)
	if err != nil {
		return err
	}
	return plotfile.Save(p, 10*vg.Inch, 4*vg.Inch, path)
}

func statusPlot(st *riverslot.TaskStatus) (*plot.Plot, error) {
	c := st.Current
	p := plot.New()
	p.Title.Text = fmt.Sprintf("task %s, cycle %s: %s\nsync start lateness %s; %d of %d accounts enqueued",
		st.Task, c.CycleStart.UTC().Format(time.RFC3339), c.Verdict, latenessText(c), c.Enqueued, c.AccountsExpected)
	if c.Placement == riverslot.PlacementPinned {
		p.Title.Text += fmt.Sprintf(" (pinned placement: pins of task %s)", c.PinsTask)
	}
	if c.SkippedStale+c.SkippedUpstream > 0 {
		p.Title.Text += fmt.Sprintf("; completed without calling Sync: %d stale, %d without room with their upstream", c.SkippedStale, c.SkippedUpstream)
	}
	p.X.Label.Text = "slot"
	p.Y.Label.Text = "accounts"
	p.Legend.Top = true
	p.Legend.Left = true

	width := vg.Points(max(300/float64(max(c.Slots, 1)), 1))
	expected := make(plotter.XYs, len(c.PerSlot))
	for i, s := range c.PerSlot {
		expected[i] = plotter.XY{X: float64(s.Slot), Y: float64(s.Expected)}
	}
	for _, sc := range slotStateColors {
		values := make(plotter.Values, len(c.PerSlot))
		any := false
		for i, s := range c.PerSlot {
			if s.State != sc.state {
				continue
			}
			any = true
			values[i] = float64(s.Expected)
			if s.State == riverslot.SlotDone || s.State == riverslot.SlotRunning {
				values[i] = float64(s.Enqueued)
			}
		}
		if !any {
			continue
		}
		bars, err := plotter.NewBarChart(values, width)
		if err != nil {
			return nil, err
		}
		bars.Color = sc.color
		bars.LineStyle.Width = 0
		p.Add(bars)
		p.Legend.Add(sc.state, bars)
	}
	// Head room for the legend above the bars.
	var top float64
	for _, s := range c.PerSlot {
		top = max(top, float64(s.Expected), float64(s.Enqueued))
	}
	p.Y.Min, p.Y.Max = 0, max(top, 1)*1.6
	p.Legend.ThumbnailWidth = vg.Points(12)
	marks, err := plotter.NewScatter(expected)
	if err != nil {
		return nil, err
	}
	marks.GlyphStyle.Shape = draw.BoxGlyph{}
	marks.GlyphStyle.Radius = vg.Points(1.5)
	p.Add(marks)
	p.Legend.Add("expected", marks)
	return p, nil
}
