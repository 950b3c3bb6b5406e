package riverslotweb

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot"
)

// handler serves the operator's page and its JSON API over one scheduler.
type handler struct {
	responder
	s   *riverslot.Scheduler
	mux *http.ServeMux
}

// New returns the operator's page and its JSON API for the scheduler's
// tasks. It only reads (riverslot's ledger, River's job table for what is
// queued or running, and the pins tables for an account's pin) and never
// counts the accounts table: every query is bounded by an index and a
// LIMIT, so a page view costs the same at any fleet size. It serves:
//
//	GET /                             the page (?task=NAME, &account=UUID)
//	GET /api/status?task=NAME[&cycle_start=RFC3339]
//	GET /api/cycles?task=NAME[&limit=N]
//	GET /api/accounts/{id}?task=NAME
//	GET /metrics                      Config.Metrics, when set
//
// task defaults to the scheduler's first task. Errors are one line of JSON,
// {"error": "..."}: 400 for bad input, 404 for an unknown task or cycle,
// 500 with a request id only (the cause goes to Config.Logger under it).
// It serves no authentication: mount it behind the app's own middleware.
// Call it after the scheduler's Configure.
func New(scheduler *riverslot.Scheduler, config *Config) (http.Handler, error) {
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if scheduler == nil {
		return nil, errors.New("scheduler must not be nil")
	}
	if !scheduler.Configured() {
		return nil, errors.New("call the scheduler's Configure before riverslotweb.New: the page reads River's tables in river.Config.Schema")
	}
	h := &handler{
		responder: responder{config: config, logger: cmp.Or(config.Logger, scheduler.Logger())},
		s:         scheduler,
		mux:       http.NewServeMux(),
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/status", h.apiStatus)
	h.mux.HandleFunc("GET /api/cycles", h.apiCycles)
	h.mux.HandleFunc("GET /api/accounts/{id}", h.apiAccount)
	h.mux.HandleFunc("GET /metrics", config.serveMetrics)
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

func (h *handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.s)
	if !ok {
		return
	}
	var at time.Time
	if v := r.URL.Query().Get("cycle_start"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cycle_start must be RFC 3339, e.g. 2026-11-22T10:00:00Z, got %q", v))
			return
		}
		at = t
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.s.StatusFromLedger(ctx, task, at)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, r, st)
}

// cyclesJSON is /api/cycles: the task's cycles, each as
// riverslot.CycleSummary encodes it.
type cyclesJSON struct {
	Task   string                   `json:"task"`
	Source string                   `json:"source"` // "ledger": riverslot's, whatever River deleted
	Cycles []riverslot.CycleSummary `json:"cycles"`
}

func (h *handler) apiCycles(w http.ResponseWriter, r *http.Request) {
	task, ok := h.task(w, r, h.s)
	if !ok {
		return
	}
	limit := riverslot.CyclesLimitDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > riverslot.CyclesLimitMax {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d, got %q", riverslot.CyclesLimitMax, v))
			return
		}
		limit = n
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	cycles, err := h.s.Cycles(ctx, task, limit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if cycles == nil {
		cycles = []riverslot.CycleSummary{} // [], not null
	}
	h.writeJSON(w, r, &cyclesJSON{Task: task, Source: "ledger", Cycles: cycles})
}

func (h *handler) apiAccount(w http.ResponseWriter, r *http.Request) {
	id, err := parseAccountID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	task, ok := h.task(w, r, h.s)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	a, err := h.s.Account(ctx, task, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeJSON(w, r, a)
}

// parseAccountID parses an account id, saying what is expected.
func parseAccountID(v string) (uuid.UUID, error) {
	id, err := uuid.Parse(strings.TrimSpace(v))
	if err != nil {
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return uuid.UUID{}, fmt.Errorf("account id must be a UUID, e.g. 0b6f3c1e-2a4d-4f8e-9c1a-7d2e5b8f4a10, got %q", v)
	}
	return id, nil
}
