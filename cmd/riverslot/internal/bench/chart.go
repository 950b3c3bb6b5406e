package bench

import (
	"fmt"
	"strings"
	"time"
)

// chart draws pending sync jobs over time for each strategy as an SVG.
func chart(strategies []*strategy, accounts int, cycle time.Duration) string {
	const (
		w, h                     = 920, 380
		left, right, top, bottom = 70, 250, 40, 50
	)
	var maxY int64 = 1
	first, last := strategies[0].series[0].second, strategies[0].series[len(strategies[0].series)-1].second
	for _, s := range strategies {
		maxY = max(maxY, s.peak)
	}
	maxY = niceCeil(maxY)
	x := func(sec int) float64 {
		return left + float64(sec-first)/float64(last-first)*float64(w-left-right)
	}
	y := func(v int64) float64 { return float64(h-bottom) - float64(v)/float64(maxY)*float64(h-top-bottom) }

	colors := map[string]string{"naive": "#d62728", "slot": "#2ca02c", "lrs": "#1f77b4"}
	labels := map[string]string{"naive": "naive (all at cycle start)", "slot": "riverslot", "lrs": "least recently synced first"}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">Pending sync jobs over one %s cycle, %d accounts</text>`+"\n", left, cycle, accounts)
	// Axes and grid.
	for i := 0; i <= 5; i++ {
		v := maxY * int64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), w-right, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y(v)+4, v)
	}
	step := max(10, (last-first)/10/10*10)
	for sec := 0; sec <= last; sec += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x(sec), top, x(sec), h-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x(sec), h-bottom+16, sec)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">seconds since cycle start</text>`+"\n", (left+w-right)/2, h-10)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, h-bottom)
	for i, s := range strategies {
		var pts []string
		for _, p := range s.series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.second), y(p.pending)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[s.name], strings.Join(pts, " "))
		ly := top + 20 + i*40
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", w-right+10, ly, w-right+30, ly, colors[s.name])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", w-right+35, ly+4, labels[s.name])
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">peak %d</text>`+"\n", w-right+35, ly+17, s.peak)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceCeil(v int64) int64 {
	p := int64(1)
	for p*10 < v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return v
}
