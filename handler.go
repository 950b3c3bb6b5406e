package riverslot

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/internal/taskspec"
)

// Defaults and bounds of HandlerConfig's fields.
const (
	HandlerRefreshDefault = 10 * time.Second
	HandlerRefreshMin     = time.Second
	HandlerTimeoutDefault = 10 * time.Second
	// HandlerCyclesDefault is how many past cycles the page charts.
	HandlerCyclesDefault = 12
)

// HandlerConfig configures the handler NewHandler returns. A nil config
// means all defaults.
type HandlerConfig struct {
	// Metrics, when set, is served at /metrics: the app's Prometheus
	// exporter handler (e.g. promhttp.Handler() over the registry its
	// MeterProvider's exporter writes to), so one port serves the page and
	// the metrics. Defaults to nil: /metrics answers 404.
	Metrics http.Handler

	// Refresh is how often the page reloads itself. Defaults to 10s; at
	// least 1s.
	Refresh time.Duration

	// Timeout bounds each request's queries. Defaults to 10s.
	Timeout time.Duration

	// Cycles is how many past cycles the page charts (coverage and
	// lateness). Defaults to 12; at most CyclesLimitMax.
	Cycles int

	// Logger receives the errors answered with 500. Defaults to the
	// scheduler's logger.
	Logger *slog.Logger
}

func (c *HandlerConfig) withDefaults() *HandlerConfig {
	out := HandlerConfig{}
	if c != nil {
		out = *c
	}
	out.Refresh = cmp.Or(out.Refresh, HandlerRefreshDefault)
	out.Timeout = cmp.Or(out.Timeout, HandlerTimeoutDefault)
	out.Cycles = cmp.Or(out.Cycles, HandlerCyclesDefault)
	return &out
}

func (c *HandlerConfig) validate() error {
	var errs []error
	if c.Refresh < HandlerRefreshMin {
		errs = append(errs, fmt.Errorf("Refresh must be at least %s, got %s", HandlerRefreshMin, c.Refresh))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout must be positive, got %s; leave it 0 for the default %s", c.Timeout, HandlerTimeoutDefault))
	}
	if c.Cycles < 0 || c.Cycles > CyclesLimitMax {
		errs = append(errs, fmt.Errorf("Cycles must be between 1 and %d, got %d", CyclesLimitMax, c.Cycles))
	}
	return errors.Join(errs...)
}

// handler serves the operator's page and its JSON API.
type handler struct {
	s      *Scheduler
	config *HandlerConfig
	mux    *http.ServeMux
}

// Handler returns NewHandler(nil): the operator's page and its JSON API
// for the scheduler's tasks, with defaults. Mount it in the app's own mux,
// under a prefix with http.StripPrefix:
//
//	mux.Handle("/riverslot/", http.StripPrefix("/riverslot", scheduler.Handler()))
//
// It panics when called before Configure.
func (s *Scheduler) Handler() http.Handler {
	h, err := s.NewHandler(nil)
	if err != nil {
		panic(err)
	}
	return h
}

// NewHandler returns the operator's page and its JSON API for the
// scheduler's tasks. It only reads (River's job table, and the pins tables
// for an account's pin) and never counts the accounts table: every query
// is bounded by an index and a LIMIT, so a page view costs the same at any
// fleet size. It serves:
//
//	GET /                             the page (?task=NAME, &account=UUID)
//	GET /api/status?task=NAME[&cycle_start=RFC3339]
//	GET /api/cycles?task=NAME[&limit=N]
//	GET /api/accounts/{id}?task=NAME
//	GET /metrics                      HandlerConfig.Metrics, when set
//
// task defaults to the scheduler's first task. Errors are one line of JSON,
// {"error": "..."}: 400 for bad input, 404 for an unknown task or cycle.
// It serves no authentication: mount it behind the app's own middleware.
// Call it after Configure.
func (s *Scheduler) NewHandler(config *HandlerConfig) (http.Handler, error) {
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	if !s.configured {
		return nil, errors.New("call Configure before NewHandler: the handler reads River's tables in river.Config.Schema")
	}
	h := &handler{s: s, config: config, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/status", h.apiStatus)
	h.mux.HandleFunc("GET /api/cycles", h.apiCycles)
	h.mux.HandleFunc("GET /api/accounts/{id}", h.apiAccount)
	h.mux.HandleFunc("GET /metrics", config.serveMetrics)
	return h, nil
}

// serveMetrics serves /metrics: HandlerConfig.Metrics, 404 without it.
func (c *HandlerConfig) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if c.Metrics == nil {
		writeError(w, http.StatusNotFound, "no metrics handler: set HandlerConfig.Metrics to serve /metrics")
		return
	}
	c.Metrics.ServeHTTP(w, r)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

func (h *handler) logger() *slog.Logger { return cmp.Or(h.config.Logger, h.s.log()) }

// task returns the spec named by ?task=, the first task when empty; it
// answers 404 itself when there is none.
func (h *handler) task(w http.ResponseWriter, r *http.Request) (*taskspec.Spec, bool) {
	name := r.URL.Query().Get("task")
	if name == "" {
		return h.s.specs[0], true
	}
	spec, ok := h.s.byName[name]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no task named %q; this scheduler has %s", name, h.s.taskNames()))
		return nil, false
	}
	return spec, true
}

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.config.Timeout)
}

func (h *handler) apiStatus(w http.ResponseWriter, r *http.Request) {
	spec, ok := h.task(w, r)
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
	st, err := h.s.statusFromJobs(ctx, spec, at)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, st)
}

func (h *handler) apiCycles(w http.ResponseWriter, r *http.Request) {
	spec, ok := h.task(w, r)
	if !ok {
		return
	}
	limit := CyclesLimitDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > CyclesLimitMax {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d, got %q", CyclesLimitMax, v))
			return
		}
		limit = n
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	cycles, err := h.s.cycleHistory(ctx, spec, limit, time.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, toCyclesJSON(spec.Name, cycles))
}

func (h *handler) apiAccount(w http.ResponseWriter, r *http.Request) {
	id, err := parseAccountID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	spec, ok := h.task(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	a, err := h.s.account(ctx, spec, id, time.Now())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, toAccountJSON(a))
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

// fail answers err: 404 when the asked cycle has no job, else 500. A 500
// is logged with the error and a request id; its body gives the id only,
// never the database's error (table names, schema, SQL): the page may be
// open to more people than the database is.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var noCycle *noCycleError
	switch {
	case errors.As(err, &noCycle):
		writeError(w, http.StatusNotFound, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, h.logged(r, err))
	}
}

// logged logs err with a new request id and returns what a response may
// say of it: the id, never the database's error.
func (h *handler) logged(r *http.Request, err error) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	h.logger().ErrorContext(r.Context(), "riverslot handler: request failed", slog.String("path", r.URL.Path),
		slog.String("request_id", id), slog.String("error", err.Error()))
	return "internal error reading the schedule (request " + id + "); the server's log has the cause under request_id " + id
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers one line of JSON: {"error": "..."}.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": strings.ReplaceAll(msg, "\n", " ")})
	_, _ = w.Write(append(b, '\n'))
}
