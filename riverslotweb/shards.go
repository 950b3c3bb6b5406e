package riverslotweb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/riverslot/riverslot"
)

// shardsHandler serves the operator's page over a task's shards: the
// fleet's cycle, each shard's part of it, and each shard's own page.
type shardsHandler struct {
	responder
	shards []*riverslot.Scheduler
	mux    *http.ServeMux
}

// NewShards returns the operator's page and its JSON API over a task
// spread over several databases (docs/shards.md): one Scheduler per shard,
// each with its riverslot.Config.Shard and Configure'd with its River
// client's config, as riverslot.StatusShards takes them. It serves:
//
//	GET /                              the fleet's page (?task=NAME, &account=UUID)
//	GET /api/status?task=NAME          riverslot.StatusShards as JSON
//	GET /api/accounts/{id}?task=NAME   the account's shard and that shard's AccountStatus
//	GET /shards/{shard}/...            each shard's own page and API (New)
//	GET /metrics                       the fleet's metrics, then Config.Metrics's
//
// The fleet's page shows the fleet's cycle running now (the latest any
// shard has made that has started, riverslot.ShardsStatus.CycleStart):
// its verdict over every shard, the totals, each shard's slots, syncs and
// lateness with a link to its own page, and one bar per slot coloured by
// the state of the shard that serves it. The shards are asked at once. A
// shard whose database does not answer is shown as such (its error only
// by a request id in the log) and its slots as unknown; the others are
// shown as usual.
// Slots served by two shards, or by none, are shown as such and keep the
// fleet off track (ShardsStatus.Conflicts, Unserved). Like New it only
// reads and serves no authentication. Every scheduler must have the same
// tasks.
//
// /metrics answers in Prometheus's text format (0.0.4), so that one scrape
// sees the fleet: for each task's cycle running now, per shard (labels
// task and shard) whether its database answered (riverslot_shard_up), the
// map version it follows, its slots, slots done and syncs enqueued, synced,
// skipped, failed (riverslot_cycle_*, from its ledger) and lateness p99;
// the same summed over the shards that answered (riverslot_fleet_cycle_*,
// label task) and whether their maps agree (riverslot_fleet_maps_agree).
// Each scrape reads each task's status once, within Config.Timeout. A
// shard that does not answer is riverslot_shard_up 0 and has no other
// series. Config.Metrics, when set, follows in the same answer, asked for
// the text format.
func NewShards(config *Config, shards ...*riverslot.Scheduler) (http.Handler, error) {
	if len(shards) == 0 {
		return nil, errors.New("riverslotweb.NewShards needs one Scheduler per shard")
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	perShard := *config
	perShard.Metrics = nil
	mux := http.NewServeMux()
	for i, s := range shards {
		switch {
		case s == nil:
			return nil, fmt.Errorf("shard %d: the Scheduler is nil", i)
		case s.Shard() == "":
			return nil, fmt.Errorf("shard %d: its Scheduler names no shard; set riverslot.Config.Shard to the shard's name in the map", i)
		case seen[s.Shard()]:
			return nil, fmt.Errorf("shard %q is given twice; give one Scheduler per shard", s.Shard())
		}
		seen[s.Shard()] = true
		if got, want := s.TaskNames(), shards[0].TaskNames(); !slices.Equal(got, want) {
			return nil, fmt.Errorf("shard %q has tasks %q, shard %q %q: give every shard's Scheduler the same tasks", s.Shard(), got, shards[0].Shard(), want)
		}
		page, err := New(s, &perShard)
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", s.Shard(), err)
		}
		prefix := "/shards/" + s.Shard()
		mux.Handle("GET "+prefix+"/", http.StripPrefix(prefix, page))
	}
	h := &shardsHandler{
		responder: responder{config: config, logger: cmp.Or(config.Logger, shards[0].Logger())},
		shards:    shards,
		mux:       mux,
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/status", h.apiStatus)
	h.mux.HandleFunc("GET /api/accounts/{id}", h.apiAccount)
	h.mux.HandleFunc("GET /metrics", h.metrics)
	return h, nil
}

func (h *shardsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

// status is riverslot.StatusShards as the page reads it: each shard's
// cycle from its ledger (never counting an accounts table), a shard's
// database error only by request id.
func (h *shardsHandler) status(ctx context.Context, r *http.Request, task string) (*riverslot.ShardsStatus, error) {
	return riverslot.StatusShardsWithOpts(ctx, task, &riverslot.StatusShardsOpts{
		DescribeError: func(err error) string { return "did not answer: " + h.logged(r, err) },
		FromLedger:    true,
	}, h.shards...)
}

func (h *shardsHandler) apiStatus(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.shards[0])
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.status(ctx, r, task)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, r, st)
}

func (h *shardsHandler) apiAccount(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.shards[0])
	if !ok {
		return
	}
	id, err := parseAccountID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	a, err := riverslot.AccountOnShards(ctx, task, id, h.shards...)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, r, a)
}
