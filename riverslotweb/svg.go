package riverslotweb

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
)

// slotColors are the colours of the slot states on the page.
var slotColors = map[string]string{
	riverslot.SlotDone:      "#2e9e44",
	riverslot.SlotRunning:   "#1f6fd1",
	riverslot.SlotScheduled: "#b0b0b0",
	riverslot.SlotFailed:    "#d1242f",
	riverslot.SlotMissing:   "#e38b00",
	slotUnknown:             "#e8c7ca",
	slotConflict:            "#7b1fa2",
}

// slotBarsSVG draws one bar per slot: its height the accounts it enqueued
// (done or running) or expects (the others), its colour its state, a tick
// at the expected accounts.
func slotBarsSVG(c *riverslot.CycleStatus) template.HTML {
	const width, height, top = 640.0, 180.0, 10.0
	var maxV int64 = 1
	for _, p := range c.PerSlot {
		maxV = max(maxV, p.Expected, p.Enqueued+p.Skipped)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="slot-bars" viewBox="0 0 %.0f %.0f" role="img" aria-label="accounts per slot">`, width, height+18)
	n := float64(max(len(c.PerSlot), 1))
	bw := width / n
	gap := math.Min(1, bw/4)
	for _, p := range c.PerSlot {
		v := p.Expected
		if p.State == riverslot.SlotDone || p.State == riverslot.SlotRunning {
			v = p.Enqueued + p.Skipped
		}
		hgt := (height - top) * float64(v) / float64(maxV)
		if p.State == slotUnknown || p.State == slotConflict {
			hgt = height - top // nothing known of it: full height, to be seen
		}
		x := float64(p.Slot) * bw
		fmt.Fprintf(&b, `<rect class="slot slot-%s" data-slot="%d" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>slot %d %s: %d enqueued, %d skipped late, %d expected%s</title></rect>`,
			p.State, p.Slot, x+gap/2, height-hgt, bw-gap, math.Max(hgt, 0.5), slotColors[p.State], p.Slot, p.State, p.Enqueued, p.Skipped, p.Expected, errSuffix(p.Error))
		ey := height - (height-top)*float64(p.Expected)/float64(maxV)
		fmt.Fprintf(&b, `<line x1="%.2f" x2="%.2f" y1="%.2f" y2="%.2f" stroke="#222" stroke-width="1"/>`, x+gap/2, x+bw-gap/2, ey, ey)
	}
	fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="11">slot 0</text><text x="%.0f" y="%.0f" font-size="11" text-anchor="end">slot %d</text><text x="%.0f" y="10" font-size="11" text-anchor="end">max %d accounts</text></svg>`,
		height+14, width, height+14, len(c.PerSlot)-1, width, maxV)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped text only
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return ": " + html.EscapeString(e)
}

// slotCircleSVG draws the cycle as a circle of slots, clockwise from the
// top, coloured by state, with a hand at now.
func slotCircleSVG(c *riverslot.CycleStatus, now time.Time) template.HTML {
	const size, r0, r1 = 220.0, 62.0, 100.0
	cx, cy := size/2, size/2
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="slot-circle" viewBox="0 0 %.0f %.0f" role="img" aria-label="slot circle">`, size, size)
	n := len(c.PerSlot)
	point := func(frac, r float64) (float64, float64) {
		a := 2*math.Pi*frac - math.Pi/2
		return cx + r*math.Cos(a), cy + r*math.Sin(a)
	}
	for _, p := range c.PerSlot {
		f0, f1 := float64(p.Slot)/float64(n), float64(p.Slot+1)/float64(n)
		x0, y0 := point(f0, r1)
		x1, y1 := point(f1, r1)
		x2, y2 := point(f1, r0)
		x3, y3 := point(f0, r0)
		large := 0
		if f1-f0 > 0.5 {
			large = 1
		}
		fmt.Fprintf(&b, `<path d="M%.2f %.2f A%.0f %.0f 0 %d 1 %.2f %.2f L%.2f %.2f A%.0f %.0f 0 %d 0 %.2f %.2f Z" fill="%s" stroke="#fff" stroke-width="%.2f"><title>slot %d: %s</title></path>`,
			x0, y0, r1, r1, large, x1, y1, x2, y2, r0, r0, large, x3, y3, slotColors[p.State], math.Min(1, 200/float64(n)), p.Slot, p.State)
	}
	if n > 0 {
		cycle := c.PerSlot[n-1].Start.Sub(c.CycleStart) * time.Duration(n) / time.Duration(max(n-1, 1))
		if n > 1 {
			cycle = c.PerSlot[1].Start.Sub(c.PerSlot[0].Start) * time.Duration(n)
		}
		if cycle > 0 {
			frac := float64(now.Sub(c.CycleStart)) / float64(cycle)
			if frac >= 0 && frac <= 1 {
				x, y := point(frac, r1+8)
				fmt.Fprintf(&b, `<line id="now-hand" x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="#222" stroke-width="2"/>`, cx, cy, x, y)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="13" text-anchor="middle">%d/%d done</text></svg>`, cx, cy+4, c.SlotsDone, n)
	return template.HTML(b.String()) //nolint:gosec // numbers only
}

// coverageSVG draws the coverage of the cycles, oldest left, as bars.
func coverageSVG(cycles []riverslot.CycleSummary) template.HTML {
	const width, height = 320.0, 120.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="coverage-chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="coverage per cycle">`, width, height+14)
	fmt.Fprintf(&b, `<line x1="0" x2="%.0f" y1="10" y2="10" stroke="#ccc"/><text x="%.0f" y="9" font-size="10" text-anchor="end">100%%</text>`, width, width)
	n := len(cycles)
	for i := range cycles {
		c := cycles[n-1-i]
		bw := width / float64(max(n, 1))
		hgt := (height - 10) * math.Max(0, math.Min(c.Coverage, 1))
		color := "#2e9e44"
		if c.Coverage < 0.999 {
			color = "#e38b00"
		}
		if c.Coverage < 0.95 {
			color = "#d1242f"
		}
		fmt.Fprintf(&b, `<rect class="coverage" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>%s: %.2f%% (%d synced, %d missed)</title></rect>`,
			float64(i)*bw+1, height-hgt, bw-2, math.Max(hgt, 0.5), color, c.CycleStart.UTC().Format(time.RFC3339), 100*c.Coverage, c.Synced, c.Missed)
	}
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="12" text-anchor="middle">no cycle yet</text>`, width/2, height/2)
	}
	fmt.Fprintf(&b, `<text x="0" y="%.0f" font-size="10">%d cycles</text></svg>`, height+12, n)
	return template.HTML(b.String()) //nolint:gosec // numbers only
}

// latenessSVG draws the lateness p50 and p99 of the cycles, oldest left.
func latenessSVG(cycles []riverslot.CycleSummary) template.HTML {
	const width, height = 320.0, 120.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="lateness-chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="lateness per cycle">`, width, height+14)
	n := len(cycles)
	top := 0.001
	for _, c := range cycles {
		top = math.Max(top, c.LatenessP99.Seconds())
	}
	x := func(i int) float64 {
		if n <= 1 {
			return width / 2
		}
		return 6 + (width-12)*float64(i)/float64(n-1)
	}
	y := func(s float64) float64 { return height - (height-12)*s/top }
	for _, line := range []struct {
		color string
		get   func(riverslot.CycleSummary) time.Duration
	}{{"#1f6fd1", func(c riverslot.CycleSummary) time.Duration { return c.LatenessP50 }}, {"#d1242f", func(c riverslot.CycleSummary) time.Duration { return c.LatenessP99 }}} {
		var pts []string
		for i := range cycles {
			c := cycles[n-1-i]
			if !c.LatenessKnown {
				continue // River deleted its sync jobs: no point, not a zero
			}
			pts = append(pts, fmt.Sprintf("%.2f,%.2f", x(i), y(line.get(c).Seconds())))
			fmt.Fprintf(&b, `<circle cx="%.2f" cy="%.2f" r="2.5" fill="%s"><title>%s: %.2fs</title></circle>`, x(i), y(line.get(c).Seconds()), line.color, c.CycleStart.UTC().Format(time.RFC3339), line.get(c).Seconds())
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.Join(pts, " "), line.color)
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="10" font-size="10">%.2fs</text><text x="0" y="%.0f" font-size="10">0s · %d cycles</text></svg>`, top, height+12, n)
	return template.HTML(b.String()) //nolint:gosec // numbers only
}
