package riverslotweb

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/perslot"
)

// pageData is what the page template renders.
type pageData struct {
	Tasks      []string
	Task       string
	Refresh    int
	Now        string
	Error      string
	Status     *riverslot.TaskStatus
	Verdict    string
	VerdictCSS string
	NextSlot   string
	Bars       template.HTML
	Circle     template.HTML
	Coverage   template.HTML
	Lateness   template.HTML
	Cycles     []riverslot.CycleSummary
	Failures   []failure
	Account    string
	AccountErr string
	AccountRes *riverslot.AccountStatus
}

// failure is a failed per-slot or sync job as the page lists it.
type failure struct {
	Kind, Cycle, What, When, Error string
}

// failuresShown bounds the failures the page lists.
const failuresShown = 10

// templateFuncs format the model's values on both pages.
var templateFuncs = template.FuncMap{
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
}

//go:embed page.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Funcs(templateFuncs).Parse(pageHTML))

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.s)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	now := time.Now()
	d := &pageData{Task: task, Tasks: h.s.TaskNames(), Refresh: int(h.config.Refresh / time.Second), Now: now.UTC().Format("2006-01-02 15:04:05Z")}
	var errs []string
	shown := func(err error) string { return h.shown(r, err) }
	st, err := h.s.StatusFromLedger(ctx, task, time.Time{})
	if err != nil {
		errs = append(errs, shown(err))
	} else {
		d.Status = st
		c := st.Current
		d.Verdict, d.VerdictCSS = c.Verdict, verdictCSS(c)
		d.NextSlot = "every slot of the cycle has started"
		if c.NextSlot >= 0 {
			d.NextSlot = fmt.Sprintf("slot %d at %s (in %s)", c.NextSlot, c.NextSlotAt.UTC().Format("15:04:05Z"), c.NextSlotAt.Sub(now).Round(time.Second))
		}
		d.Bars = slotBarsSVG(c)
		d.Circle = slotCircleSVG(c, now)
	}
	if d.Cycles, err = h.s.Cycles(ctx, task, h.config.Cycles); err != nil {
		errs = append(errs, shown(err))
	}
	d.Coverage, d.Lateness = coverageSVG(d.Cycles), latenessSVG(d.Cycles)
	failed, err := h.s.RecentFailures(ctx, task, failuresShown)
	if err != nil {
		errs = append(errs, shown(err))
	}
	for _, f := range failed {
		d.Failures = append(d.Failures, toFailure(f))
	}
	if v := r.URL.Query().Get("account"); v != "" {
		d.Account = v
		if id, err := parseAccountID(v); err != nil {
			d.AccountErr = err.Error()
		} else if d.AccountRes, err = h.s.Account(ctx, task, id); err != nil {
			d.AccountErr = shown(err)
		}
	}
	d.Error = strings.Join(errs, "; ")
	h.render(w, r, pageTemplate, d)
}

// verdictCSS is the class of a cycle's verdict: ok, starting or bad.
func verdictCSS(c *riverslot.CycleStatus) string {
	switch {
	case c.OnTrack:
		return "ok"
	case c.Starting:
		return "starting"
	}
	return "bad"
}

// toFailure is how the page lists a failed job.
func toFailure(f riverslot.FailedJob) failure {
	out := failure{Kind: "sync", What: "account " + f.AccountID.String(), When: f.FinalizedAt.UTC().Format("2006-01-02 15:04:05Z"), Error: f.Error}
	if !f.CycleStart.IsZero() {
		out.Cycle = f.CycleStart.UTC().Format(time.RFC3339Nano)
	}
	if f.Kind == perslot.Kind {
		out.Kind, out.What = "per-slot", fmt.Sprintf("slot %d", f.Slot)
	}
	return out
}
