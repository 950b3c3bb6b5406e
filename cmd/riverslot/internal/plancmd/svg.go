package plancmd

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/plotfile"
	"github.com/riverslot/riverslot/slotplan"
)

// circleSample is how many sample accounts --svg places on the circle.
const circleSample = 40

// circleAccounts are the sample accounts: fixed version 5 UUIDs, so the
// figure is the same on every run.
func circleAccounts(n int) []uuid.UUID {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.NewSHA1(uuid.NameSpaceOID, []byte("riverslot plan sample "+strconv.Itoa(i)))
	}
	return ids
}

// circleAngle is where an account is due on the cycle circle: its time
// after the cycle start as a fraction of the cycle, in radians clockwise
// from the top.
func circleAngle(plan slotplan.Plan, t Task, id uuid.UUID) float64 {
	start := time.Unix(0, 0).UTC()
	due := plan.ShiftedTarget(start, t.Seed, id, t.Shift).Sub(start)
	return 2 * math.Pi * float64(due) / float64(plan.Cycle)
}

func circleXY(angle, radius float64) plotter.XY {
	return plotter.XY{X: radius * math.Sin(angle), Y: radius * math.Cos(angle)}
}

var circleColors = []color.RGBA{{R: 0x1f, G: 0x6f, B: 0xd1, A: 0xff}, {R: 0xd1, G: 0x5f, B: 0x1f, A: 0xff}}

// writeSVG draws the slot circle: the cycle clockwise from the top,
// slot boundaries as spokes, and sample accounts at their due times, one
// ring per task; with two tasks each account's two syncs are joined by a
// chord. The file is written aside and renamed.
func writeSVG(path string, plan slotplan.Plan, tasks []Task, highlight *uuid.UUID) error {
	p := plot.New()
	p.HideAxes()
	p.Title.Text = fmt.Sprintf("slot circle: %s cycle, %d slots of %s, clockwise from the cycle start at the top", plan.Cycle, plan.Slots, plan.SlotDuration)
	if len(tasks) == 2 {
		p.Title.Text += fmt.Sprintf("\n%s (outer ring) and %s (inner ring, opposite): an account's two syncs joined", tasks[0].Name, tasks[1].Name)
	}
	p.Legend.Top = true

	every := max(plan.Slots/32, 1)
	for slot := 0; slot < plan.Slots; slot += every {
		a := 2 * math.Pi * float64(slot) / float64(plan.Slots)
		spoke, err := plotter.NewLine(plotter.XYs{circleXY(a, 0.55), circleXY(a, 1.08)})
		if err != nil {
			return err
		}
		spoke.Color = color.Gray{Y: 0xd8}
		p.Add(spoke)
	}
	ids := circleAccounts(circleSample)
	if highlight != nil {
		ids = append(ids, *highlight)
	}
	radii := []float64{1, 0.8}
	if len(tasks) == 2 {
		for _, id := range ids {
			chord, err := plotter.NewLine(plotter.XYs{
				circleXY(circleAngle(plan, tasks[0], id), radii[0]),
				circleXY(circleAngle(plan, tasks[1], id), radii[1]),
			})
			if err != nil {
				return err
			}
			chord.Color = color.Gray{Y: 0xa0}
			chord.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(chord)
		}
	}
	for ti, t := range tasks {
		ring := make(plotter.XYs, 361)
		for i := range ring {
			ring[i] = circleXY(2*math.Pi*float64(i)/360, radii[ti])
		}
		line, err := plotter.NewLine(ring)
		if err != nil {
			return err
		}
		line.Color = circleColors[ti]
		p.Add(line)
		pts := make(plotter.XYs, circleSample)
		for i, id := range ids[:circleSample] {
			pts[i] = circleXY(circleAngle(plan, t, id), radii[ti])
		}
		scatter, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		scatter.Color = circleColors[ti]
		scatter.Shape = draw.CircleGlyph{}
		scatter.Radius = vg.Points(3)
		p.Add(scatter)
		p.Legend.Add(fmt.Sprintf("%s: %d sample accounts at their due time", t.Name, circleSample), scatter)
		if highlight != nil {
			mark, err := plotter.NewScatter(plotter.XYs{circleXY(circleAngle(plan, t, *highlight), radii[ti])})
			if err != nil {
				return err
			}
			mark.Color = color.Black
			mark.Shape = draw.RingGlyph{}
			mark.Radius = vg.Points(6)
			p.Add(mark)
			if ti == 0 {
				p.Legend.Add("--account "+highlight.String(), mark)
			}
		}
	}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = -1.15, 1.15, -1.15, 1.35
	return plotfile.Save(p, 7*vg.Inch, 7.5*vg.Inch, path)
}
