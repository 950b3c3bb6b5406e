package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricsServer serves riverslot's OpenTelemetry metrics (and Go's runtime
// metrics) in Prometheus' format at /metrics.
type metricsServer struct {
	listener net.Listener
	provider *sdkmetric.MeterProvider
	server   *http.Server
}

// listenMetrics binds addr (so a bad --metrics-addr is refused before
// anything runs) and prepares the provider to hand to riverutil.Config.
func listenMetrics(addr string) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageErr("--metrics-addr %q: %v; give host:port, e.g. :9090 or 127.0.0.1:0", addr, err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector())
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry))
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return &metricsServer{
		listener: ln,
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		server:   &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}, nil
}

func (m *metricsServer) url() string { return "http://" + m.listener.Addr().String() + "/metrics" }

func (m *metricsServer) serve() {
	go func() {
		if err := m.server.Serve(m.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err) // Serve on a bound listener fails only on a programming error
		}
	}()
}

func (m *metricsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.server.Shutdown(ctx)
	_ = m.listener.Close()
	_ = m.provider.Shutdown(ctx)
}
