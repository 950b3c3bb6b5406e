package riverslotweb

import (
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/riverslot/riverslot"
)

// The states the fleet's page gives a slot besides a shard's own:
// slotUnknown when no answering shard serves it (its shard did not
// answer), slotConflict when more than one does (ShardsStatus.Conflicts).
const (
	slotUnknown  = "unknown"
	slotConflict = "conflict"
)

// shardRow is one shard's line on the fleet's page.
type shardRow struct {
	Shard      string
	Link       string
	Error      string
	Status     *riverslot.CycleStatus
	VerdictCSS string
}

type shardsPageData struct {
	Tasks      []string
	Task       string
	Refresh    int
	Now        string
	Error      string
	Status     *riverslot.ShardsStatus
	VerdictCSS string
	Rows       []shardRow
	Bars       template.HTML
	Owners     template.HTML
	Account    string
	AccountErr string
	AccountRes *riverslot.ShardAccount
	AccountURL string
}

//go:embed shards.html
var shardsHTML string

var shardsPageTemplate = template.Must(template.New("shards").Funcs(templateFuncs).Parse(shardsHTML))

// shardColors tell the shards apart in the page's owner strip.
var shardColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#e15759", "#9c755f", "#ff9da7", "#bab0ac"}

func (h *shardsHandler) page(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.shards[0])
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	now := time.Now()
	d := &shardsPageData{Task: task, Tasks: h.shards[0].TaskNames(), Refresh: int(h.config.Refresh / time.Second), Now: now.UTC().Format("2006-01-02 15:04:05Z")}
	var errs []string
	shown := func(err error) string { return h.shown(r, err) }
	st, err := h.status(ctx, r, task)
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
			row := shardRow{Shard: sc.Shard, Link: "shards/" + sc.Shard + "/?task=" + task, Error: sc.Error, Status: sc.Status, VerdictCSS: "bad"}
			if sc.Status != nil {
				row.VerdictCSS = verdictCSS(sc.Status)
			}
			d.Rows = append(d.Rows, row)
		}
	}
	if v := r.URL.Query().Get("account"); v != "" {
		d.Account = v
		if id, err := parseAccountID(v); err != nil {
			d.AccountErr = err.Error()
		} else if d.AccountRes, err = riverslot.AccountOnShards(ctx, task, id, h.shards...); err != nil {
			d.AccountErr = shown(err)
		} else {
			d.AccountURL = "shards/" + d.AccountRes.Shard + "/?task=" + task + "&account=" + id.String()
		}
	}
	d.Error = strings.Join(errs, "; ")
	h.render(w, r, shardsPageTemplate, d)
}

// mergeShardSlots lays the fleet's cycle out as one cycle: each slot as
// the shard that serves it reports it (the one where it is not
// riverslot.SlotElsewhere), slotUnknown where no answering shard serves it,
// slotConflict where several do. owners is ShardsStatus.SlotShards.
func mergeShardSlots(st *riverslot.ShardsStatus) (*riverslot.CycleStatus, []string) {
	owners := st.SlotShards()
	merged := &riverslot.CycleStatus{CycleStart: st.CycleStart, Slots: len(owners), PerSlot: make([]riverslot.SlotStatus, len(owners))}
	for i, o := range owners {
		merged.PerSlot[i] = riverslot.SlotStatus{Slot: i, State: slotUnknown}
		if strings.Contains(o, "+") {
			merged.PerSlot[i] = riverslot.SlotStatus{Slot: i, State: slotConflict,
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
func slotOwnersSVG(owners []string, st *riverslot.ShardsStatus) template.HTML {
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
