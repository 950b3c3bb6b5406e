package riverslot_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// Example_prometheus exports riverslot's metrics to Prometheus through the
// OpenTelemetry exporter: Config.MeterProvider gets an SDK provider whose
// reader is the exporter, and promhttp serves the registry at /metrics. The
// example runs until the first account of a 16 s cycle is synced, scrapes
// /metrics once, and prints riverslot's metric families.
func Example_prometheus() {
	ctx := context.Background()
	tb := riverslottest.PanicTB() // test-only scaffolding: a throwaway schema with accounts
	dbPool := riverslottest.Pool(tb)
	schema := riverslottest.Schema(ctx, tb, dbPool)
	defer dropSchema(dbPool, schema)
	riverslottest.CreateAccounts(ctx, tb, dbPool, schema, "accounts", 500)

	// The app's wiring: an OpenTelemetry meter provider exporting to a
	// Prometheus registry.
	registry := prometheus.NewRegistry()
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry))
	if err != nil {
		panic(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(ctx) //nolint:errcheck // example

	var once sync.Once
	firstSync := make(chan struct{})
	scheduler, err := riverslot.New(dbPool, &riverslot.Config{
		MeterProvider: provider,
		Tasks: []riverslot.Task{{
			Name: "transactions", Cycle: 16 * time.Second, Schema: schema, Table: "accounts",
			Sync: func(ctx context.Context, accountID uuid.UUID, job *river.Job[riverslot.SyncArgs]) error {
				once.Do(func() { close(firstSync) })
				return nil
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	config := &river.Config{
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Schema: schema,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := scheduler.Configure(config); err != nil {
		panic(err)
	}
	client, err := river.NewClient(riverpgxv5.New(dbPool), config)
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	// In an app: http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	server := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer server.Close()

	select {
	case <-firstSync:
	case <-time.After(time.Minute):
		fmt.Println("timed out")
	}
	if err := client.Stop(ctx); err != nil {
		panic(err)
	}
	if err := scheduler.FlushOutcomes(ctx); err != nil { // the syncs' outcomes, before the schema goes
		panic(err)
	}

	resp, err := http.Get(server.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		// riverslot_late_spread_total and riverslot_late_skipped_total
		// appear once a fan-out meets late accounts, as when the app
		// starts mid-cycle; riverslot_slot_retries_total once a fan-out is
		// retried; riverslot_sync_skipped_total once a sync starts too
		// late (a busy machine). Left out here, where they depend on
		// timing.
		family, ok := strings.CutPrefix(scanner.Text(), "# TYPE riverslot_")
		if ok && !strings.HasPrefix(family, "late_") && !strings.HasPrefix(family, "slot_retries") && !strings.HasPrefix(family, "sync_skipped") {
			fmt.Println("riverslot_" + family)
		}
	}

	// Output:
	// riverslot_fanout_accounts histogram
	// riverslot_fanout_duration_seconds histogram
	// riverslot_slot_lag_seconds histogram
	// riverslot_sync_enqueued_total counter
	// riverslot_sync_lateness_seconds histogram
}
