package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsExport is riverslot's OpenTelemetry metrics (and Go's runtime
// metrics) exported in Prometheus' format: provider goes to
// riverslot.Config.MeterProvider, handler serves /metrics.
type metricsExport struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

func newMetricsExport() (*metricsExport, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector())
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	return &metricsExport{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		handler:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
	}, nil
}

func (m *metricsExport) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.provider.Shutdown(ctx)
}

// httpListener is a listener bound when the command starts (so a bad
// address is refused before anything runs) and served once the command is
// ready.
type httpListener struct {
	listener net.Listener
	server   *http.Server
}

// listenHTTP binds addr, given by flag (e.g. "--metrics-addr"); example
// is a good value for the error message.
func listenHTTP(flag, addr, example string) (*httpListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageErr("%s %q: %v; give host:port, e.g. %s", flag, addr, err, example)
	}
	return &httpListener{listener: ln}, nil
}

// openWarning returns the warning to print when a page without
// authentication listens on addr beyond this machine ("" on loopback).
func openWarning(flag string, addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return ""
	}
	return fmt.Sprintf("riverslot: warning: %s listens on %s, beyond this machine, and the operator's page has no authentication: whoever reaches the port reads task names, account ids and sync errors; keep it on 127.0.0.1 or behind a proxy that authenticates\n", flag, addr)
}

func (l *httpListener) url(path string) string { return "http://" + l.listener.Addr().String() + path }

func (l *httpListener) serve(handler http.Handler) {
	l.server = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := l.server.Serve(l.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err) // Serve on a bound listener fails only on a programming error
		}
	}()
}

func (l *httpListener) close() {
	if l.server == nil {
		_ = l.listener.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.server.Shutdown(ctx)
}
