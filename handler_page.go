package riverslot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/taskspec"
)

// slotColors are the colours of the slot states on the page.
var slotColors = map[string]string{
	SlotDone:      "#2e9e44",
	SlotRunning:   "#1f6fd1",
	SlotScheduled: "#b0b0b0",
	SlotFailed:    "#d1242f",
	SlotMissing:   "#e38b00",
	SlotUnknown:   "#e8c7ca",
	SlotConflict:  "#7b1fa2",
}

// pageData is what the page template renders.
type pageData struct {
	Tasks      []string
	Task       string
	Refresh    int
	Now        string
	Error      string
	Status     *TaskStatus
	Verdict    string
	VerdictCSS string
	NextSlot   string
	Bars       template.HTML
	Circle     template.HTML
	Coverage   template.HTML
	Lateness   template.HTML
	Cycles     []CycleSummary
	Failures   []failure
	Account    string
	AccountErr string
	AccountRes *AccountStatus
}

// failure is a failed per-slot or sync job shown on the page.
type failure struct {
	Kind, Cycle, What, When, Error string
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct":  func(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) },
	"secs": func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"ints": func(s []int) string {
		if len(s) == 0 {
			return "-"
		}
		return strings.Trim(fmt.Sprint(s), "[]")
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>riverslot: {{.Task}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:12px;color:#222;background:#fafafa;max-width:1100px}
h1{font-size:1.3em;margin:0 0 6px} h2{font-size:1.05em;margin:18px 0 6px}
nav a{margin-right:10px} .verdict{font-size:1.2em;font-weight:600;padding:8px 10px;border-radius:6px;display:inline-block}
.ok{background:#dff3e3;color:#135c24}.bad{background:#fbe0e2;color:#8a1119}.starting{background:#fff3d6;color:#6b4a00}
.row{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start} .card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px;flex:1 1 320px;min-width:0}
svg{max-width:100%;height:auto} #slot-circle{max-width:260px;display:block;margin:auto} #coverage-chart,#lateness-chart{max-height:180px} table{border-collapse:collapse;font-size:.9em} td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
th{text-align:left} .l{text-align:left} .err{color:#8a1119;white-space:pre-wrap;word-break:break-word;text-align:left}
.scroll{overflow-x:auto} input[type=text]{width:min(100%,330px);font-family:monospace} .muted{color:#777;font-size:.85em}
.legend span{display:inline-block;margin-right:10px;font-size:.85em} .legend i{display:inline-block;width:10px;height:10px;margin-right:3px}
</style>
</head>
<body>
<h1>riverslot: task <span id="task">{{.Task}}</span></h1>
{{if gt (len .Tasks) 1}}<nav>{{range .Tasks}}<a href="?task={{.}}">{{.}}</a>{{end}}</nav>{{end}}
<p class="muted">{{.Now}} · refreshes every {{.Refresh}}s · <a href="api/status?task={{.Task}}">status JSON</a> · <a href="api/cycles?task={{.Task}}">cycles JSON</a></p>
{{if .Error}}<p class="verdict bad" id="error">{{.Error}}</p>{{end}}
{{with .Status}}{{with .Census}}{{if gt .Stalls 0}}<p class="err" id="census-stalled">weight census of the cycle at {{ts .CycleStart}}: no step in its last {{.Stalls}} attempts since {{ts .StalledSince}} (each step ran out of time: a lock on the accounts table, or a slow database); it backs off and tries again</p>{{end}}{{end}}{{end}}
{{with .Status}}{{with .Current}}
<p><span class="verdict {{$.VerdictCSS}}" id="verdict">{{$.Verdict}}</span></p>{{if .AccountsError}}
<p class="err" id="accounts-error">{{.AccountsError}}</p>{{end}}
<p id="cycle">cycle <b id="cycle-start">{{ts .CycleStart}}</b> · {{.Slots}} slots · plan {{.Plan}} · placement {{.Placement}}{{if .PinsTask}} (pins of {{.PinsTask}}){{end}}{{if .PinsFallback}} <span class="err">(pins not computed in time: fell back to {{.PinsFallback}})</span>{{end}} · next slot: <span id="next-slot">{{$.NextSlot}}</span></p>
<div class="row">
<div class="card"><h2>Slots of this cycle</h2>{{$.Bars}}
<div class="legend"><span><i style="background:#2e9e44"></i>done</span><span><i style="background:#1f6fd1"></i>running</span><span><i style="background:#b0b0b0"></i>scheduled</span><span><i style="background:#d1242f"></i>failed</span><span><i style="background:#e38b00"></i>missing</span><span>▔ expected</span></div>
<p class="muted">{{.SlotsDone}} of {{.Slots}} slots done, {{.SlotsFailed}} failed; expected: what the slot's fan-out counted in an earlier cycle (riverslot's ledger), else this or the previous cycle's fan-out</p></div>
<div class="card"><h2>Slot circle</h2>{{$.Circle}}</div>
</div>
<div class="card" style="margin-top:16px"><h2>Sync jobs of this cycle</h2>
<table id="syncs"><tr><th>enqueued</th><th>skipped late</th><th>pending</th><th>running</th><th>retryable</th><th>completed</th><th>failed</th><th>cancelled</th><th>synced</th><th>gone</th><th>stale</th><th>no room upstream</th><th>lateness p50</th><th>p99</th></tr>
<tr><td>{{.Enqueued}}</td><td>{{.Skipped}}</td><td>{{.Pending}}</td><td>{{.Running}}</td><td>{{.Retryable}}</td><td>{{.Completed}}</td><td>{{.Discarded}}</td><td>{{.Cancelled}}</td><td>{{.Synced}}</td><td>{{.Gone}}</td><td>{{.SkippedStale}}</td><td>{{.SkippedUpstream}}</td>{{if .LatenessKnown}}<td>{{secs .LatenessP50}}</td><td>{{secs .LatenessP99}}</td>{{else}}<td class="muted">unknown</td><td class="muted">unknown</td>{{end}}</tr></table>
<p class="muted">failed, completed, synced, gone, stale and no room: as the nodes counted them in riverslot's ledger (kept after River deletes the jobs); pending, running, retryable: River's unfinished jobs</p></div>
{{end}}{{with .Upstreams}}
<div class="card scroll" style="margin-top:16px"><h2>Upstreams</h2>
<p class="muted">{{.Keys}} upstreams, {{.NotClosed}} with a breaker open or half-open; the {{len .Top}} that most need a look (all of them: riverslot upstream list)</p>
<table id="upstreams"><tr><th class="l">upstream</th><th>breaker</th><th>rate now</th><th>limit</th><th>in flight</th><th>limit</th><th>waiting</th><th>calls</th><th>failed</th><th>throttled</th><th>deferred</th><th>skipped</th><th>probes</th><th class="l">paused until</th></tr>
{{range .Top}}<tr><td class="l">{{.Key}}</td><td class="{{if eq .Breaker "closed"}}ok{{else}}err{{end}}">{{.Breaker}}</td><td>{{printf "%.1f/s" .RateNow}}</td><td>{{if .RateLimit}}{{printf "%g/s" .RateLimit}}{{else}}-{{end}}</td><td>{{.InFlight}}</td><td>{{if .ConcurrencyLimit}}{{.ConcurrencyLimit}}{{else}}-{{end}}</td><td>{{.Waiting}}</td><td>{{.Calls}}</td><td>{{.Failed}}</td><td>{{.Throttled}}</td><td>{{.Deferred}}</td><td>{{.Skipped}}</td><td>{{.Probes}}</td><td class="l">{{tsp .PausedUntil}}</td></tr>
{{end}}</table></div>
{{end}}{{end}}
<div class="row" style="margin-top:16px">
<div class="card"><h2>Coverage of the last cycles</h2>{{.Coverage}}<p class="muted">share of the accounts synced within their cycle, oldest left</p></div>
<div class="card"><h2>Lateness of the last cycles</h2>{{.Lateness}}<p class="muted">sync start after its scheduled time: <span style="color:#1f6fd1">p50</span>, <span style="color:#d1242f">p99</span></p></div>
</div>
<div class="card scroll" style="margin-top:16px"><h2>Last cycles</h2>
<table id="cycles"><tr><th>cycle</th><th>coverage</th><th>synced</th><th>missed</th><th>duplicates</th><th>p50</th><th>p99</th><th>failed slots</th><th></th></tr>
{{range .Cycles}}<tr><td class="l">{{ts .CycleStart}}</td><td>{{pct .Coverage}}</td><td>{{.Synced}}{{if .Uncounted}} <span class="muted">({{.Uncounted}} ended uncounted)</span>{{end}}</td><td>{{.Missed}}</td><td>{{.Duplicates}}</td>{{if .LatenessKnown}}<td>{{secs .LatenessP50}}</td><td>{{secs .LatenessP99}}</td>{{else}}<td class="muted">unknown</td><td class="muted">unknown</td>{{end}}<td>{{ints .FailedSlots}}</td><td class="l">{{if .Finished}}finished{{else}}in progress{{end}}</td></tr>
{{else}}<tr><td class="l" colspan="9">no cycle in River's job table</td></tr>{{end}}</table></div>
<div class="card scroll" style="margin-top:16px"><h2>Failures</h2>
{{if .Failures}}<table id="failures"><tr><th>job</th><th>cycle</th><th>what</th><th>finalized</th><th class="l">last error</th></tr>
{{range .Failures}}<tr><td class="l">{{.Kind}}</td><td class="l">{{.Cycle}}</td><td class="l">{{.What}}</td><td class="l">{{.When}}</td><td class="err">{{.Error}}</td></tr>{{end}}</table>
{{else}}<p id="failures">no failed per-slot or sync job among those River keeps</p>{{end}}</div>
<div class="card" style="margin-top:16px"><h2>Account</h2>
<form method="get" action=""><input type="hidden" name="task" value="{{.Task}}"><input type="text" name="account" placeholder="account UUID" value="{{.Account}}" aria-label="account UUID"> <button type="submit">Look up</button></form>
{{if .AccountErr}}<p class="err" id="account-error">{{.AccountErr}}</p>{{end}}
{{with .AccountRes}}<table id="account">
<tr><th>bucket</th><td class="l">{{.Bucket}}</td></tr><tr><th>slot</th><td class="l">{{.Slot}}{{if .Pinned}}, pinned to slot {{.PinnedSlot}} (weight {{.PinWeight}}){{end}}</td></tr>
<tr><th>offset in slot</th><td class="l">{{secs .Offset}}</td></tr>
<tr><th>next syncs</th><td class="l">{{range .NextSyncs}}{{ts .}}<br>{{end}}</td></tr>
{{with .Current}}<tr><th>this cycle</th><td class="l">{{if eq .Source "river"}}job {{.JobID}} {{.State}}, scheduled {{ts .ScheduledAt}}, attempted {{tsp .AttemptedAt}}, {{.Attempts}} attempts{{else}}slot {{.Slot}} {{.State}}{{if .FanOutAt}} (fan-out {{tsp .FanOutAt}}){{end}}, regular time {{ts .ScheduledAt}}{{end}}{{if .LastError}}<br><span class="err">{{.LastError}}</span>{{end}}</td></tr>{{else}}<tr><th>this cycle</th><td class="l">no cycle recorded</td></tr>{{end}}
{{with .Previous}}<tr><th>previous cycle</th><td class="l">{{if eq .Source "river"}}job {{.JobID}} {{.State}}, scheduled {{ts .ScheduledAt}}, attempted {{tsp .AttemptedAt}}, {{.Attempts}} attempts{{else}}slot {{.Slot}} {{.State}}{{if .FanOutAt}} (fan-out {{tsp .FanOutAt}}){{end}}, regular time {{ts .ScheduledAt}}{{end}}{{if .LastError}}<br><span class="err">{{.LastError}}</span>{{end}}</td></tr>{{else}}<tr><th>previous cycle</th><td class="l">no cycle recorded</td></tr>{{end}}
</table>{{end}}
</div>
</body>
</html>
`))

// failuresShown bounds the failures the page lists.
const failuresShown = 10

// recentFailuresSQL lists the task's most recently failed per-slot and sync
// jobs through River's (state, finalized_at) index.
const recentFailuresSQL = `SELECT kind, coalesce(args->>'cycle_start', ''), coalesce(args->>'slot', ''), coalesce(args->>'account_id', ''), finalized_at, errors
	FROM %s WHERE state IN ('discarded', 'cancelled') AND finalized_at IS NOT NULL AND kind = ANY($1) AND args->>'task' = $2
	ORDER BY finalized_at DESC LIMIT $3`

func (h *handler) recentFailures(ctx context.Context, spec *taskspec.Spec) ([]failure, error) {
	rows, err := h.s.pool.Query(ctx, fmt.Sprintf(recentFailuresSQL, h.s.riverTable(spec)), []string{perslot.Kind, syncjob.Kind}, spec.Name, failuresShown)
	if err != nil {
		return nil, fmt.Errorf("error listing failed jobs: %w", err)
	}
	defer rows.Close()
	var out []failure
	for rows.Next() {
		var (
			kind, cycle, slot, account string
			finalized                  time.Time
			errs                       []json.RawMessage
		)
		if err := rows.Scan(&kind, &cycle, &slot, &account, &finalized, &errs); err != nil {
			return nil, fmt.Errorf("error listing failed jobs: %w", err)
		}
		f := failure{Kind: "sync", Cycle: cycle, What: "account " + account, When: finalized.UTC().Format("2006-01-02 15:04:05Z")}
		if kind == perslot.Kind {
			f.Kind, f.What = "per-slot", "slot "+slot
		}
		if len(errs) > 0 {
			var last struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(errs[len(errs)-1], &last) == nil {
				f.Error = last.Error
			}
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error listing failed jobs: %w", err)
	}
	return out, nil
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	spec, ok := h.task(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	now := time.Now()
	d := &pageData{Task: spec.Name, Refresh: int(h.config.Refresh / time.Second), Now: now.UTC().Format("2006-01-02 15:04:05Z")}
	for _, s := range h.s.specs {
		d.Tasks = append(d.Tasks, s.Name)
	}
	var errs []string
	shown := func(err error) string { return h.shown(r, err) }
	st, err := h.s.statusFromJobs(ctx, spec, time.Time{})
	if err != nil {
		errs = append(errs, shown(err))
	} else {
		d.Status = st
		c := st.Current
		d.Verdict, d.VerdictCSS = c.Verdict, "bad"
		switch {
		case c.OnTrack:
			d.VerdictCSS = "ok"
		case c.Starting:
			d.VerdictCSS = "starting"
		}
		d.NextSlot = "every slot of the cycle has started"
		if c.NextSlot >= 0 {
			d.NextSlot = fmt.Sprintf("slot %d at %s (in %s)", c.NextSlot, c.NextSlotAt.UTC().Format("15:04:05Z"), c.NextSlotAt.Sub(now).Round(time.Second))
		}
		d.Bars = slotBarsSVG(c)
		d.Circle = slotCircleSVG(c, now)
	}
	if d.Cycles, err = h.s.cycleHistory(ctx, spec, h.config.Cycles, now); err != nil {
		errs = append(errs, shown(err))
	}
	d.Coverage, d.Lateness = coverageSVG(d.Cycles), latenessSVG(d.Cycles)
	if d.Failures, err = h.recentFailures(ctx, spec); err != nil {
		errs = append(errs, shown(err))
	}
	if v := r.URL.Query().Get("account"); v != "" {
		d.Account = v
		if id, err := parseAccountID(v); err != nil {
			d.AccountErr = err.Error()
		} else if d.AccountRes, err = h.s.account(ctx, spec, id, now); err != nil {
			d.AccountErr = shown(err)
		}
	}
	d.Error = strings.Join(errs, "; ")
	h.render(w, r, pageTemplate, d)
}

// shown says what a page shows of err: a task without a cycle as it is,
// any other error (the database's) only by a request id, logged with its
// cause as fail logs it.
func (h *handler) shown(r *http.Request, err error) string {
	var noCycle *noCycleError
	if errors.As(err, &noCycle) {
		return err.Error()
	}
	return h.logged(r, err)
}

// render writes the page tmpl makes of data, with the headers that keep
// it self-contained (no script, no outside resource).
func (h *handler) render(w http.ResponseWriter, r *http.Request, tmpl *template.Template, data any) {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		h.fail(w, r, fmt.Errorf("error rendering the page: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

// slotBarsSVG draws one bar per slot: its height the accounts it enqueued
// (done or running) or expects (the others), its colour its state, a tick
// at the expected accounts.
func slotBarsSVG(c *CycleStatus) template.HTML {
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
		if p.State == SlotDone || p.State == SlotRunning {
			v = p.Enqueued + p.Skipped
		}
		hgt := (height - top) * float64(v) / float64(maxV)
		if p.State == SlotUnknown || p.State == SlotConflict {
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
func slotCircleSVG(c *CycleStatus, now time.Time) template.HTML {
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
func coverageSVG(cycles []CycleSummary) template.HTML {
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
func latenessSVG(cycles []CycleSummary) template.HTML {
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
		get   func(CycleSummary) time.Duration
	}{{"#1f6fd1", func(c CycleSummary) time.Duration { return c.LatenessP50 }}, {"#d1242f", func(c CycleSummary) time.Duration { return c.LatenessP99 }}} {
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
