package riverslotweb

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/riverslot/riverslot"
)

// Defaults and bounds of Config's fields.
const (
	// RefreshDefault is how often the page reloads itself by default.
	RefreshDefault = 10 * time.Second
	// RefreshMin is the shortest Refresh.
	RefreshMin = time.Second
	// TimeoutDefault bounds each request's queries by default.
	TimeoutDefault = 10 * time.Second
	// CyclesDefault is how many past cycles the page charts by default.
	CyclesDefault = 12
)

// Config configures the handlers New and NewShards return. A nil config
// means all defaults.
type Config struct {
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
	// lateness). Defaults to 12; at most riverslot.CyclesLimitMax.
	Cycles int

	// Logger receives the errors answered with 500, each under the request
	// id the answer gives. Defaults to the scheduler's logger
	// (riverslot.Scheduler.Logger; the first shard's for NewShards).
	Logger *slog.Logger
}

func (c *Config) withDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	out.Refresh = cmp.Or(out.Refresh, RefreshDefault)
	out.Timeout = cmp.Or(out.Timeout, TimeoutDefault)
	out.Cycles = cmp.Or(out.Cycles, CyclesDefault)
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if c.Refresh < RefreshMin {
		errs = append(errs, fmt.Errorf("Refresh must be at least %s, got %s", RefreshMin, c.Refresh))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout must be positive, got %s; leave it 0 for the default %s", c.Timeout, TimeoutDefault))
	}
	if c.Cycles < 0 || c.Cycles > riverslot.CyclesLimitMax {
		errs = append(errs, fmt.Errorf("Cycles must be between 1 and %d, got %d", riverslot.CyclesLimitMax, c.Cycles))
	}
	return errors.Join(errs...)
}

// serveMetrics serves /metrics: Config.Metrics, 404 without it.
func (c *Config) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if c.Metrics == nil {
		writeError(w, http.StatusNotFound, "no metrics handler: set riverslotweb.Config.Metrics to serve /metrics")
		return
	}
	c.Metrics.ServeHTTP(w, r)
}
