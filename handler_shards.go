package riverslot

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/slotplan"
)

// shardsHandler serves the operator's page over a task's shards: the
// fleet's cycle, each shard's part of it, and each shard's own page.
type shardsHandler struct {
	shards []*Scheduler
	config *HandlerConfig
	mux    *http.ServeMux
}

// The states NewShardsHandler's page gives a slot besides a shard's own:
// SlotUnknown when no answering shard serves it (its shard did not
// answer), SlotConflict when more than one does (ShardsStatus.Conflicts).
const (
	SlotUnknown  = "unknown"
	SlotConflict = "conflict"
)

// NewShardsHandler returns the operator's page and its JSON API over a
// task spread over several databases (docs/shards.md): one Scheduler per
// shard, each with its Config.Shard and Configure'd with its River
// client's config, as StatusShards takes them. It serves:
//
//	GET /                              the fleet's page (?task=NAME, &account=UUID)
//	GET /api/status?task=NAME          StatusShards as JSON
//	GET /api/accounts/{id}?task=NAME   the account's shard and that shard's AccountStatus
//	GET /shards/{shard}/...            each shard's own page and API (NewHandler)
//	GET /metrics                       HandlerConfig.Metrics, when set
//
// The fleet's page shows the latest cycle any shard has made: its verdict
// over every shard, the totals, each shard's slots, syncs and lateness
// with a link to its own page, and one bar per slot coloured by the state
// of the shard that serves it. The shards are asked at once. A shard whose
// database does not answer is shown as such (its error only by a request
// id in the log) and its slots as unknown; the others are shown as usual.
// Slots served by two shards, or by none, are shown as such and keep the
// fleet off track (ShardsStatus.Conflicts, Unserved). Like NewHandler it only
// reads and serves no authentication. Every scheduler must have the same
// tasks.
func NewShardsHandler(config *HandlerConfig, shards ...*Scheduler) (http.Handler, error) {
	if len(shards) == 0 {
		return nil, errors.New("NewShardsHandler needs one Scheduler per shard")
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	h := &shardsHandler{shards: shards, config: config, mux: http.NewServeMux()}
	seen := map[string]bool{}
	perShard := *config
	perShard.Metrics = nil
	for i, s := range shards {
		switch {
		case s == nil:
			return nil, fmt.Errorf("shard %d: the Scheduler is nil", i)
		case s.shard == "":
			return nil, fmt.Errorf("shard %d: its Scheduler names no shard; set riverslot.Config.Shard to the shard's name in the map", i)
		case seen[s.shard]:
			return nil, fmt.Errorf("shard %q is given twice; give one Scheduler per shard", s.shard)
		}
		seen[s.shard] = true
		if got, want := s.taskNames(), shards[0].taskNames(); got != want {
			return nil, fmt.Errorf("shard %q has %s, shard %q %s: give every shard's Scheduler the same tasks", s.shard, got, shards[0].shard, want)
		}
		page, err := s.NewHandler(&perShard)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", s.shard, err)
		}
		prefix := "/shards/" + s.shard
		h.mux.Handle("GET "+prefix+"/", http.StripPrefix(prefix, page))
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/status", h.apiStatus)
	h.mux.HandleFunc("GET /api/accounts/{id}", h.apiAccount)
	h.mux.HandleFunc("GET /metrics", config.serveMetrics)
	return h, nil
}

func (h *shardsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// base is a handler over the first shard, for what NewHandler's handler
// already does (task lookup, errors by request id).
func (h *shardsHandler) base() *handler { return &handler{s: h.shards[0], config: h.config} }

// status is StatusShards as the page reads it: each shard's cycle by
// statusFromJobs (never counting an accounts table), its errors only by
// request id.
func (h *shardsHandler) status(ctx context.Context, r *http.Request, spec *taskspec.Spec) (*ShardsStatus, error) {
	base := h.base()
	return statusShards(ctx, spec.Name, h.shards, func(err error) string {
		return "did not answer: " + base.logged(r, err)
	}, func(ctx context.Context, s *Scheduler, at time.Time) (*TaskStatus, error) {
		ss, err := s.spec(spec.Name)
		if err != nil {
			return nil, err
		}
		st, err := s.statusFromJobs(ctx, ss, at)
		if errors.Is(err, ErrNoCycle) {
			// A shard that has not made the fleet's latest cycle yet
			// (its trigger a moment later, or a restart): the cycle as
			// it stands there, as Status shows a cycle not bootstrapped.
			return s.StatusAt(ctx, spec.Name, at)
		}
		return st, err
	})
}

func (h *shardsHandler) apiStatus(w http.ResponseWriter, r *http.Request) {
	base := h.base()
	spec, ok := base.task(w, r)
	if !ok {
		return
	}
	ctx, cancel := base.ctx(r)
	defer cancel()
	st, err := h.status(ctx, r, spec)
	if err != nil {
		base.fail(w, r, err)
		return
	}
	writeJSON(w, st)
}

// ShardAccount is an account of a sharded task: the shard the map in
// force gives it and that shard's AccountStatus.
type ShardAccount struct {
	Shard string
	// MapVersion is the version of the map in force now: the highest
	// any answering shard holds.
	MapVersion int64
	Account    *AccountStatus
}

// account returns the account's shard and its status there.
func (h *shardsHandler) account(ctx context.Context, spec *taskspec.Spec, r *http.Request, id uuid.UUID, now time.Time) (*ShardAccount, error) {
	// Every shard's copy of the map in force, at once, in the first half
	// of the request's time (a shard that never answers leaves the
	// account's own shard the second half); the highest version wins.
	findCtx, cancel := halfDeadline(ctx)
	defer cancel()
	maps := make([]*slotplan.ShardMap, len(h.shards))
	errs := make([]error, len(h.shards))
	eachShard(h.shards, func(i int, s *Scheduler) {
		sm, ok, err := s.ledger().ShardMapAt(findCtx, s.pool, spec.Name, now)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("shard %q: %w", s.shard, err)
		case ok:
			maps[i] = &sm.ShardMap
		}
	})
	var (
		m     slotplan.ShardMap
		found bool
	)
	for _, sm := range maps {
		if sm != nil && (!found || sm.Version > m.Version) {
			m, found = *sm, true
		}
	}
	if !found {
		if !slices.Contains(errs, nil) {
			return nil, errors.Join(errs...)
		}
		return nil, &noCycleError{msg: fmt.Sprintf("task %q has no shard map in force on the shards that answered: set one (riverslot shards set)", spec.Name)}
	}
	owner := m.OwnerOf(id)
	out := &ShardAccount{Shard: owner, MapVersion: m.Version}
	for _, s := range h.shards {
		if s.shard != owner {
			continue
		}
		ss, err := s.spec(spec.Name)
		if err != nil {
			return nil, &noCycleError{msg: err.Error()}
		}
		a, err := s.account(ctx, ss, id, now)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", owner, err)
		}
		out.Account = a
		return out, nil
	}
	return nil, &noCycleError{msg: fmt.Sprintf("the map (version %d) gives the account to shard %q, which this page was not given", m.Version, owner)}
}

func (h *shardsHandler) apiAccount(w http.ResponseWriter, r *http.Request) {
	base := h.base()
	spec, ok := base.task(w, r)
	if !ok {
		return
	}
	id, err := parseAccountID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := base.ctx(r)
	defer cancel()
	a, err := h.account(ctx, spec, r, id, time.Now())
	if err != nil {
		base.fail(w, r, err)
		return
	}
	writeJSON(w, a)
}

// shardRow is one shard's line on the fleet's page.
type shardRow struct {
	Shard      string
	Link       string
	Error      string
	Status     *CycleStatus
	VerdictCSS string
}

type shardsPageData struct {
	Tasks      []string
	Task       string
	Refresh    int
	Now        string
	Error      string
	Status     *ShardsStatus
	VerdictCSS string
	Rows       []shardRow
	Bars       template.HTML
	Owners     template.HTML
	Account    string
	AccountErr string
	AccountRes *ShardAccount
	AccountURL string
}

var shardsPageTemplate = template.Must(template.New("shards").Funcs(template.FuncMap{
	"secs": func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) },
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>riverslot: {{.Task}} over its shards</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:12px;color:#222;background:#fafafa;max-width:1100px}
h1{font-size:1.3em;margin:0 0 6px} h2{font-size:1.05em;margin:18px 0 6px}
nav a{margin-right:10px} .verdict{font-size:1.2em;font-weight:600;padding:8px 10px;border-radius:6px;display:inline-block}
.ok{background:#dff3e3;color:#135c24}.bad{background:#fbe0e2;color:#8a1119}.starting{background:#fff3d6;color:#6b4a00}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px;margin-top:16px}
svg{max-width:100%;height:auto} table{border-collapse:collapse;font-size:.9em} td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
th{text-align:left} .l{text-align:left} .err{color:#8a1119;white-space:pre-wrap;word-break:break-word;text-align:left}
.scroll{overflow-x:auto} input[type=text]{width:min(100%,330px);font-family:monospace} .muted{color:#777;font-size:.85em}
</style>
</head>
<body>
<h1>riverslot: task <span id="task">{{.Task}}</span> over {{len .Rows}} shards</h1>
{{if gt (len .Tasks) 1}}<nav>{{range .Tasks}}<a href="?task={{.}}">{{.}}</a>{{end}}</nav>{{end}}
<p class="muted">{{.Now}} · refreshes every {{.Refresh}}s · <a href="api/status?task={{.Task}}">status JSON</a></p>
{{if .Error}}<p class="verdict bad" id="error">{{.Error}}</p>{{end}}
{{with .Status}}
<p><span class="verdict {{$.VerdictCSS}}" id="verdict">{{.Verdict}}</span></p>
<p id="cycle">cycle <b id="cycle-start">{{ts .CycleStart}}</b> · {{.Slots}} slots served by the shards that answered{{if .Unreachable}} · <span class="err" id="unreachable">{{.Unreachable}} shards did not answer</span>{{end}}</p>
{{if or .Conflicts .Unserved .MapVersions}}<p class="err" id="map-conflict">the shards' maps disagree:{{if .Conflicts}} slots {{.Conflicts}} are served by more than one shard;{{end}}{{if .Unserved}} slots {{.Unserved}} by none;{{end}}{{if .MapVersions}} the shards followed map versions {{.MapVersions}};{{end}} see riverslot shards show, and set the map again on every shard</p>{{end}}
<div class="card"><h2>Slots of this cycle over all shards</h2>{{$.Bars}}{{$.Owners}}
<p class="muted">one bar per slot, in the state of the shard that serves it (unknown, full height: its shard did not answer, or no shard serves it; conflict: more than one shard serves it); the strip below names that shard</p></div>
<div class="card scroll"><h2>Shards</h2>
<table id="shards"><tr><th>shard</th><th class="l">verdict</th><th>map</th><th>slots</th><th>done</th><th>failed</th><th>behind</th><th>expected</th><th>enqueued</th><th>synced</th><th>gone</th><th>stale</th><th>no room</th><th>pending</th><th>running</th><th>p50</th><th>p99</th></tr>
{{range $row := $.Rows}}<tr class="shard" data-shard="{{.Shard}}"><td class="l"><a href="{{.Link}}">{{.Shard}}</a></td>{{if .Error}}<td class="err" colspan="16">{{.Error}}</td>{{else}}{{with .Status}}<td class="l {{$row.VerdictCSS}}">{{.Verdict}}</td><td>v{{.ShardVersion}}</td><td>{{.Slots}}{{if .SlotsElsewhere}} <span class="muted">({{.SlotsElsewhere}} elsewhere)</span>{{end}}</td><td>{{.SlotsDone}}</td><td>{{.SlotsFailed}}</td><td>{{.BehindSlots}}</td><td>{{.AccountsExpected}}</td><td>{{.Enqueued}}</td><td>{{.Synced}}</td><td>{{.Gone}}</td><td>{{.SkippedStale}}</td><td>{{.SkippedUpstream}}</td><td>{{.Pending}}</td><td>{{.Running}}</td>{{if .LatenessKnown}}<td>{{secs .LatenessP50}}</td><td>{{secs .LatenessP99}}</td>{{else}}<td class="muted">unknown</td><td class="muted">unknown</td>{{end}}{{end}}{{end}}</tr>
{{end}}<tr id="shards-total"><th>all</th><td class="l"></td><td></td><td>{{.Slots}}</td><td>{{.SlotsDone}}</td><td>{{.SlotsFailed}}</td><td>{{.BehindSlots}}</td><td>{{.AccountsExpected}}</td><td>{{.Enqueued}}</td><td>{{.Synced}}</td><td>{{.Gone}}</td><td>{{.SkippedStale}}</td><td>{{.SkippedUpstream}}</td><td>{{.Pending}}</td><td>{{.Running}}</td><td></td><td></td></tr></table>
<p class="muted">each shard's counts are of its own slots (its ledger and River's jobs in its database); "all" sums the shards that answered. A shard's name opens its own page: its slots, last cycles, failures and accounts.</p></div>
{{end}}
<div class="card"><h2>Account</h2>
<form method="get" action=""><input type="hidden" name="task" value="{{.Task}}"><input type="text" name="account" placeholder="account UUID" value="{{.Account}}" aria-label="account UUID"> <button type="submit">Find its shard</button></form>
{{if .AccountErr}}<p class="err" id="account-error">{{.AccountErr}}</p>{{end}}
{{with .AccountRes}}<p id="account">shard <b id="account-shard">{{.Shard}}</b> (map v{{.MapVersion}}){{with .Account}}: bucket {{.Bucket}}, slot {{.Slot}}, offset {{secs .Offset}}{{end}} · <a href="{{$.AccountURL}}">its page on shard {{.Shard}}</a></p>{{end}}
</div>
</body>
</html>
`))

// shardColors tell the shards apart in the page's owner strip.
var shardColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#e15759", "#9c755f", "#ff9da7", "#bab0ac"}

func (h *shardsHandler) page(w http.ResponseWriter, r *http.Request) {
	base := h.base()
	spec, ok := base.task(w, r)
	if !ok {
		return
	}
	ctx, cancel := base.ctx(r)
	defer cancel()
	now := time.Now()
	d := &shardsPageData{Task: spec.Name, Refresh: int(h.config.Refresh / time.Second), Now: now.UTC().Format("2006-01-02 15:04:05Z")}
	for _, s := range h.shards[0].specs {
		d.Tasks = append(d.Tasks, s.Name)
	}
	var errs []string
	shown := func(err error) string { return base.shown(r, err) }
	st, err := h.status(ctx, r, spec)
	if err != nil {
		errs = append(errs, shown(err))
	} else {
		d.Status = st
		d.VerdictCSS = "bad"
		switch {
		case st.OnTrack:
			d.VerdictCSS = "ok"
		case st.Starting:
			d.VerdictCSS = "starting"
		}
		merged, owners := mergeShardSlots(st)
		d.Bars = slotBarsSVG(merged)
		d.Owners = slotOwnersSVG(owners, st)
		for _, sc := range st.Shards {
			row := shardRow{Shard: sc.Shard, Link: "shards/" + sc.Shard + "/?task=" + spec.Name, Error: sc.Error, Status: sc.Status, VerdictCSS: "bad"}
			switch {
			case sc.Status == nil:
			case sc.Status.OnTrack:
				row.VerdictCSS = "ok"
			case sc.Status.Starting:
				row.VerdictCSS = "starting"
			}
			d.Rows = append(d.Rows, row)
		}
	}
	if v := r.URL.Query().Get("account"); v != "" {
		d.Account = v
		if id, err := parseAccountID(v); err != nil {
			d.AccountErr = err.Error()
		} else if d.AccountRes, err = h.account(ctx, spec, r, id, now); err != nil {
			d.AccountErr = shown(err)
		} else {
			d.AccountURL = "shards/" + d.AccountRes.Shard + "/?task=" + spec.Name + "&account=" + id.String()
		}
	}
	d.Error = strings.Join(errs, "; ")
	base.render(w, r, shardsPageTemplate, d)
}

// mergeShardSlots lays the fleet's cycle out as one cycle: each slot as
// the shard that serves it reports it (the one where it is not
// SlotElsewhere), SlotUnknown where no answering shard serves it,
// SlotConflict where several do. owners is ShardsStatus.SlotShards.
func mergeShardSlots(st *ShardsStatus) (*CycleStatus, []string) {
	owners := st.SlotShards()
	merged := &CycleStatus{CycleStart: st.CycleStart, Slots: len(owners), PerSlot: make([]SlotStatus, len(owners))}
	for i, o := range owners {
		merged.PerSlot[i] = SlotStatus{Slot: i, State: SlotUnknown}
		if strings.Contains(o, "+") {
			merged.PerSlot[i] = SlotStatus{Slot: i, State: SlotConflict,
				Error: "served by more than one shard: the shards' maps disagree (riverslot shards show)"}
		}
	}
	for _, sc := range st.Shards {
		if sc.Status == nil {
			continue
		}
		for _, p := range sc.Status.PerSlot {
			if p.Slot >= 0 && p.Slot < len(owners) && owners[p.Slot] == sc.Shard {
				merged.PerSlot[p.Slot] = p
			}
		}
	}
	return merged, owners
}

// slotOwnersSVG draws a strip under the slot bars, each slot in its
// shard's colour, with a legend.
func slotOwnersSVG(owners []string, st *ShardsStatus) template.HTML {
	const width, height = 640.0, 12.0
	color := map[string]string{"": "#eeeeee"}
	conflict := "#7b1fa2"
	for i, sc := range st.Shards {
		color[sc.Shard] = shardColors[i%len(shardColors)]
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="slot-owners" viewBox="0 0 %.0f %.0f" role="img" aria-label="shard of each slot">`, width, height+16)
	bw := width / float64(max(len(owners), 1))
	for i, o := range owners {
		name := o
		if name == "" {
			name = "unknown"
		}
		fill, ok := color[o]
		if !ok {
			fill = conflict // "a+b"
		}
		fmt.Fprintf(&b, `<rect class="owner" data-slot="%d" data-shard="%s" x="%.2f" y="0" width="%.2f" height="%.0f" fill="%s"><title>slot %d: shard %s</title></rect>`,
			i, template.HTMLEscapeString(name), float64(i)*bw, bw, height, fill, i, template.HTMLEscapeString(name))
	}
	x := 0.0
	for _, sc := range st.Shards {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f" font-size="11">%s</text>`,
			x, height+5, color[sc.Shard], x+13, height+14, template.HTMLEscapeString(sc.Shard))
		x += 20 + 7*float64(len(sc.Shard))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped text only
}
