package riverslotweb

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/riverslot/riverslot"
)

// The families NewShards serves at /metrics, all gauges: each task's cycle
// running now over the fleet, as riverslot.StatusShards reads it from the
// shards' ledgers. Those named riverslot_cycle_* and riverslot_shard_* are
// per shard (labels task and shard); each count riverslot_cycle_X (slots
// and syncs) has its sum over the shards that answered as
// riverslot_fleet_cycle_X (label task), riverslot_fleet_cycle_X ==
// sum by (task) (riverslot_cycle_X); the fleet's lateness p99 is the
// worst shard's, its on_track the fleet's verdict.
var shardsMetricsHelp = map[string]string{
	"riverslot_shard_up":                   "1 when the shard's database answered this scrape's status read of the task, 0 when it did not (its error is logged under a request id). A shard that did not answer has no other series.",
	"riverslot_shard_map_version":          "Version of the shard map the shard's part of the task's cycle running now follows (0: no map).",
	"riverslot_cycle_slots":                "Slots of the task's cycle running now the shard serves (those the map does not give another shard).",
	"riverslot_cycle_slots_done":           "Slots of the task's cycle running now whose fan-out finished on the shard.",
	"riverslot_cycle_slots_failed":         "Slots of the task's cycle running now whose fan-out failed on the shard.",
	"riverslot_cycle_syncs_enqueued":       "Sync jobs the shard's fan-outs of the task's cycle running now enqueued, from its ledger.",
	"riverslot_cycle_syncs_synced":         "Sync jobs of the task's cycle running now that called Sync and returned without error, as the shard's nodes counted them in its ledger.",
	"riverslot_cycle_syncs_skipped":        "Syncs of the task's cycle running now skipped, by reason: late (the fan-out found the account's time past), stale (the job started past its NotAfter), upstream (no room with its upstream before its NotAfter), from the shard's ledger.",
	"riverslot_cycle_syncs_failed":         "Sync jobs of the task's cycle running now that failed their last attempt or were cancelled, as the shard's nodes counted them in its ledger.",
	"riverslot_cycle_lateness_p99_seconds": "99th percentile of the start minus the scheduled time of the synced syncs of the task's cycle running now on the shard, from its ledger's histogram; absent while none is counted.",
	"riverslot_cycle_on_track":             "1 when the shard's part of the task's cycle running now is on track, else 0 (behind, a failed slot, starting after a restart).",

	"riverslot_fleet_shards_up":                     "Shards whose database answered this scrape's status read of the task: sum of riverslot_shard_up.",
	"riverslot_fleet_cycle_start_timestamp_seconds": "Start of the task's cycle running now (the latest any shard has made that has started; before the first starts, the latest prepared), in Unix seconds: the cycle every other series of the task describes.",
	"riverslot_fleet_cycle_slots":                   "Sum of riverslot_cycle_slots over the shards that answered: the cycle's slots when the maps agree (a slot two shards serve counts twice).",
	"riverslot_fleet_cycle_slots_done":              "Sum of riverslot_cycle_slots_done over the shards that answered.",
	"riverslot_fleet_cycle_slots_failed":            "Sum of riverslot_cycle_slots_failed over the shards that answered.",
	"riverslot_fleet_cycle_syncs_enqueued":          "Sum of riverslot_cycle_syncs_enqueued over the shards that answered.",
	"riverslot_fleet_cycle_syncs_synced":            "Sum of riverslot_cycle_syncs_synced over the shards that answered.",
	"riverslot_fleet_cycle_syncs_skipped":           "Sum of riverslot_cycle_syncs_skipped over the shards that answered, by reason.",
	"riverslot_fleet_cycle_syncs_failed":            "Sum of riverslot_cycle_syncs_failed over the shards that answered.",
	"riverslot_fleet_cycle_lateness_p99_seconds":    "The highest riverslot_cycle_lateness_p99_seconds of the shards that answered (the worst shard's, not a percentile over the fleet); absent while none is counted.",
	"riverslot_fleet_cycle_on_track":                "1 when every shard answered, is on track and serves its own slots only, each slot by exactly one shard, else 0.",
	"riverslot_fleet_maps_agree":                    "1 when the shards that answered followed one shard map for the task's cycle running now (no slot served twice or by none, one map version), else 0: see riverslot shards show.",
	"riverslot_fleet_cycle_slots_conflicting":       "Slots of the task's cycle running now more than one shard serves.",
	"riverslot_fleet_cycle_slots_unserved":          "Slots of the task's cycle running now no shard serves, though every shard answered.",
}

// metricsContentType is the Prometheus text exposition format, version
// 0.0.4.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metrics serves /metrics: the fleet's families (shardsMetricsHelp), then
// Config.Metrics's, when set. Each scrape reads every task's status once
// (riverslot.StatusShards from the ledgers, the tasks at once, the shards
// at once) within Config.Timeout, or Prometheus's scrape timeout when
// shorter. A shard whose database does not answer is riverslot_shard_up 0,
// not an error.
func (h *shardsHandler) metrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.scrapeCtx(r)
	defer cancel()
	tasks := slices.Sorted(slices.Values(h.shards[0].TaskNames()))
	reads := make([]shardsRead, len(tasks))
	var wg sync.WaitGroup
	for i, task := range tasks {
		wg.Go(func() { reads[i] = h.readShards(ctx, r, task) })
	}
	wg.Wait()

	g := gauges{}
	for _, rd := range reads {
		h.addShardsMetrics(g, rd)
	}
	var buf bytes.Buffer
	g.write(&buf)
	if h.config.Metrics != nil {
		buf.Write(h.appMetrics(r))
	}
	w.Header().Set("Content-Type", metricsContentType)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// scrapeCtx is the request's context bounded by Config.Timeout, or by the
// scrape timeout Prometheus sends (X-Prometheus-Scrape-Timeout-Seconds)
// when shorter, so that the answer comes before Prometheus gives up.
func (h *shardsHandler) scrapeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	timeout := h.config.Timeout
	if v, err := strconv.ParseFloat(r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64); err == nil && v > 0 && !math.IsInf(v, 0) {
		// Leave a tenth of it to write the answer.
		if d := time.Duration(v * 0.9 * float64(time.Second)); d > 0 && d < timeout {
			timeout = d
		}
	}
	return context.WithTimeout(r.Context(), timeout)
}

// shardsRead is one task's status over the shards, as a scrape read it.
type shardsRead struct {
	task string
	st   *riverslot.ShardsStatus // nil when err is set
	err  error
	// up says, per shard name, whether its database answered; a shard
	// missing from it is unknown (a read that failed otherwise).
	up map[string]bool
}

// readShards reads the task's cycle running now over the shards from their
// ledgers, and which shards answered: those whose error DescribeError
// was asked to describe did not.
func (h *shardsHandler) readShards(ctx context.Context, r *http.Request, task string) shardsRead {
	var (
		mu        sync.Mutex
		described []string // each unique: it carries a new request id
	)
	describe := func(err error) string {
		d := "did not answer: " + h.logged(r, err)
		mu.Lock()
		defer mu.Unlock()
		described = append(described, d)
		return d
	}
	st, err := riverslot.StatusShardsWithOpts(ctx, task, &riverslot.StatusShardsOpts{DescribeError: describe, FromLedger: true}, h.shards...)
	rd := shardsRead{task: task, st: st, err: err, up: map[string]bool{}}
	switch {
	case err == nil:
		for _, sc := range st.Shards {
			rd.up[sc.Shard] = sc.Status != nil || !slices.Contains(described, sc.Error)
		}
	case errors.Is(err, riverslot.ErrNoCycle):
		// No shard that answered has made a cycle of the task: its text
		// names each shard that did not ("NAME: " and its description).
		msg := err.Error()
		for _, s := range h.shards {
			rd.up[s.Shard()] = !slices.ContainsFunc(described, func(d string) bool { return strings.Contains(msg, s.Shard()+": "+d) })
		}
	default:
		h.logged(r, err)
	}
	return rd
}

// addShardsMetrics adds one task's series to g.
func (h *shardsHandler) addShardsMetrics(g gauges, rd shardsRead) {
	task := rd.task
	up := 0
	for _, s := range h.shards {
		if answered, known := rd.up[s.Shard()]; known {
			g.add("riverslot_shard_up", boolGauge(answered), "task", task, "shard", s.Shard())
			if answered {
				up++
			}
		}
	}
	if len(rd.up) == len(h.shards) {
		g.add("riverslot_fleet_shards_up", float64(up), "task", task)
	}
	st := rd.st
	if st == nil {
		return
	}
	var (
		sum         [6]int64 // the fleet's slots, slots_done, slots_failed, syncs_enqueued, syncs_synced, syncs_failed
		skipped     = map[string]int64{"late": 0, "stale": 0, "upstream": 0}
		p99, p99Any = 0.0, false
	)
	for _, sc := range st.Shards {
		c := sc.Status
		if c == nil {
			continue
		}
		shard := sc.Shard
		served := 0
		for _, p := range c.PerSlot {
			if p.State != riverslot.SlotElsewhere {
				served++
			}
		}
		failed := c.Discarded + c.Cancelled
		g.add("riverslot_shard_map_version", float64(c.ShardVersion), "task", task, "shard", shard)
		g.add("riverslot_cycle_slots", float64(served), "task", task, "shard", shard)
		g.add("riverslot_cycle_slots_done", float64(c.SlotsDone), "task", task, "shard", shard)
		g.add("riverslot_cycle_slots_failed", float64(c.SlotsFailed), "task", task, "shard", shard)
		g.add("riverslot_cycle_syncs_enqueued", float64(c.Enqueued), "task", task, "shard", shard)
		g.add("riverslot_cycle_syncs_synced", float64(c.Synced), "task", task, "shard", shard)
		g.add("riverslot_cycle_syncs_failed", float64(failed), "task", task, "shard", shard)
		for reason, n := range map[string]int64{"late": c.Skipped, "stale": c.SkippedStale, "upstream": c.SkippedUpstream} {
			g.add("riverslot_cycle_syncs_skipped", float64(n), "task", task, "shard", shard, "reason", reason)
			skipped[reason] += n
		}
		if c.LatenessKnown {
			g.add("riverslot_cycle_lateness_p99_seconds", c.LatenessP99.Seconds(), "task", task, "shard", shard)
			p99, p99Any = max(p99, c.LatenessP99.Seconds()), true
		}
		g.add("riverslot_cycle_on_track", boolGauge(c.OnTrack), "task", task, "shard", shard)
		for i, n := range []int64{int64(served), int64(c.SlotsDone), int64(c.SlotsFailed), c.Enqueued, c.Synced, failed} {
			sum[i] += n
		}
	}
	g.add("riverslot_fleet_cycle_start_timestamp_seconds", float64(st.CycleStart.Unix()), "task", task)
	for i, name := range []string{"slots", "slots_done", "slots_failed", "syncs_enqueued", "syncs_synced", "syncs_failed"} {
		g.add("riverslot_fleet_cycle_"+name, float64(sum[i]), "task", task)
	}
	for reason, n := range skipped {
		g.add("riverslot_fleet_cycle_syncs_skipped", float64(n), "task", task, "reason", reason)
	}
	if p99Any {
		g.add("riverslot_fleet_cycle_lateness_p99_seconds", p99, "task", task)
	}
	g.add("riverslot_fleet_cycle_on_track", boolGauge(st.OnTrack), "task", task)
	g.add("riverslot_fleet_maps_agree", boolGauge(len(st.Conflicts) == 0 && len(st.Unserved) == 0 && len(st.MapVersions) == 0), "task", task)
	g.add("riverslot_fleet_cycle_slots_conflicting", float64(len(st.Conflicts)), "task", task)
	g.add("riverslot_fleet_cycle_slots_unserved", float64(len(st.Unserved)), "task", task)
}

// appMetrics returns what Config.Metrics serves at /metrics, asked for the
// text format, to follow the fleet's families; nothing (and a warning in
// the log) when it does not answer 200 in that format.
func (h *shardsHandler) appMetrics(r *http.Request) []byte {
	req := r.Clone(r.Context())
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	req.Header.Del("Accept-Encoding")
	rec := &bufferedResponse{header: http.Header{}, code: http.StatusOK}
	h.config.Metrics.ServeHTTP(rec, req)
	if ct := rec.header.Get("Content-Type"); rec.code != http.StatusOK || !strings.HasPrefix(ct, "text/plain") {
		h.logger.WarnContext(r.Context(), "riverslot handler: Config.Metrics answered no text metrics; /metrics serves the fleet's only",
			"status", rec.code, "content_type", ct)
		return nil
	}
	return rec.body.Bytes()
}

// bufferedResponse is an http.ResponseWriter that keeps the answer.
type bufferedResponse struct {
	header http.Header
	code   int
	wrote  bool
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if !b.wrote {
		b.code, b.wrote = code, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// gauges are the series of a scrape, by family name.
type gauges map[string][]gaugeSeries

type gaugeSeries struct {
	labels []string // name, value, name, value, ...
	value  float64
}

// add adds a series of the family name (one of shardsMetricsHelp's) with
// labels given as name, value pairs.
func (g gauges) add(name string, value float64, labels ...string) {
	g[name] = append(g[name], gaugeSeries{labels: labels, value: value})
}

// write writes g in the text format: the families by name, each with its
// HELP and TYPE, its series by their label values.
func (g gauges) write(buf *bytes.Buffer) {
	for _, name := range slices.Sorted(maps.Keys(g)) {
		series := g[name]
		slices.SortFunc(series, func(a, b gaugeSeries) int { return slices.Compare(a.labels, b.labels) })
		buf.WriteString("# HELP " + name + " " + helpEscaper.Replace(shardsMetricsHelp[name]) + "\n")
		buf.WriteString("# TYPE " + name + " gauge\n")
		for _, s := range series {
			buf.WriteString(name)
			for i := 0; i+1 < len(s.labels); i += 2 {
				if i == 0 {
					buf.WriteByte('{')
				} else {
					buf.WriteByte(',')
				}
				buf.WriteString(s.labels[i] + `="` + labelEscaper.Replace(s.labels[i+1]) + `"`)
			}
			if len(s.labels) > 0 {
				buf.WriteByte('}')
			}
			buf.WriteString(" " + strconv.FormatFloat(s.value, 'g', -1, 64) + "\n")
		}
	}
}

// The text format's escapes: a HELP text escapes \ and newline, a label
// value " as well.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)
