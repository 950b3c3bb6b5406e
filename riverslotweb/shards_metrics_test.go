package riverslotweb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// TestShardsMetrics scrapes /metrics of the fleet's page over two shards
// (two schemas, each a database of its own as far as riverslot can tell)
// whose cycle ran: every fan-out, and every sync job, a quarter of them
// cancelled by the app's Sync. Each shard's series and the fleet's sums
// match what the test inserted: the accounts of each shard's own buckets,
// those Sync cancelled, the rest synced. Then a shard whose database does
// not answer is up 0 with no other series while the others are reported
// as before; the same database under two names makes the maps disagree; a
// fleet that has made no cycle yet still reports which shards answered;
// and Config.Metrics follows the fleet's families.
func TestShardsMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	const (
		task  = "transactions"
		cycle = 24 * time.Second // 8 slots of 8,192 two-byte buckets
	)
	names := []string{"a", "b"}
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535}}}
	owner := func(id uuid.UUID) string {
		if int(id[15])<<8|int(id[14]) <= 32767 {
			return "a"
		}
		return "b"
	}
	// The app's Sync cancels the job of a quarter of the accounts: each
	// counts as a failed sync.
	cancels := func(id uuid.UUID) bool { return id[0]%4 == 0 }
	var calls atomic.Int64
	syncFn := func(_ context.Context, id uuid.UUID, _ *river.Job[riverslot.SyncArgs]) error {
		calls.Add(1)
		if cancels(id) {
			return river.JobCancel(errors.New("account closed"))
		}
		return nil
	}

	schemas := map[string]string{}
	var shards []riverslot.Shard
	for _, name := range names {
		schemas[name] = riverslottest.Schema(ctx, t, pool)
		shards = append(shards, riverslot.Shard{Name: name, Pool: pool, Schema: schemas[name]})
	}
	require.NoError(t, riverslot.SetShardMap(ctx, shards, task, m, time.Time{}))
	newScheduler := func(pool *pgxpool.Pool, name, schema string) *riverslot.Scheduler {
		s, err := riverslot.New(pool, &riverslot.Config{Shard: name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
			{Name: task, Cycle: cycle, Schema: schema, Table: "accounts", Sync: syncFn},
		}})
		require.NoError(t, err)
		return s
	}

	// What each shard serves, worked out from the UUIDs inserted: the
	// accounts of its own buckets in its own table, and those of them
	// whose Sync cancels.
	own, failed := map[string]int64{}, map[string]int64{}
	scheds := map[string]*riverslot.Scheduler{}
	var start time.Time
	for _, name := range names {
		for _, id := range riverslottest.CreateAccounts(ctx, t, pool, schemas[name], "accounts", 160) {
			if owner(id) == name {
				own[name]++
				if cancels(id) {
					failed[name]++
				}
			}
		}
		require.Positive(t, failed[name], "some of shard %s's accounts fail", name)
		require.Less(t, failed[name], own[name], "some of shard %s's accounts sync", name)
		s := newScheduler(pool, name, schemas[name])
		require.NoError(t, s.CreateIndexes(ctx))
		config := &river.Config{Schema: schemas[name], Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
		require.NoError(t, s.Configure(config))
		config.PeriodicJobs = nil
		client, _ := riverslottest.StartClient(ctx, t, pool, config)
		info, err := s.Task(task)
		require.NoError(t, err)
		if start.IsZero() {
			start = info.Schedule.Next(time.Now().Add(time.Hour))
		}
		_, err = s.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
		scheds[name] = s
	}
	// Run each shard's fan-outs now (the cycle is an hour ahead), then
	// its sync jobs, and wait until its nodes have counted every one in
	// its ledger.
	for _, name := range names {
		jobs := pgx.Identifier{schemas[name], "river_job"}.Sanitize()
		riverslottest.WaitFor(t, 30*time.Second, "shard "+name+"'s bootstrap", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == 1
		})
		_, err := pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now() WHERE kind = 'riverslot_perslot'")
		require.NoError(t, err)
	}
	for _, name := range names {
		jobs := pgx.Identifier{schemas[name], "river_job"}.Sanitize()
		riverslottest.WaitFor(t, 30*time.Second, "shard "+name+"'s fan-outs", func() bool {
			return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobs+" WHERE kind = 'riverslot_perslot' AND state <> 'completed'") == 0
		})
		_, err := pool.Exec(ctx, "UPDATE "+jobs+" SET scheduled_at = now() WHERE kind = 'riverslot_sync'")
		require.NoError(t, err)
	}
	for _, name := range names {
		riverslottest.WaitFor(t, 60*time.Second, "shard "+name+"'s syncs counted in its ledger", func() bool {
			st, err := scheds[name].StatusFromLedger(ctx, task, start)
			require.NoError(t, err)
			return st.Current.Synced+st.Current.Cancelled+st.Current.Discarded == own[name]
		})
	}
	require.Equal(t, own["a"]+own["b"], calls.Load(), "Sync called once per account served")

	h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: riverslottest.Logger(t)}, scheds["a"], scheds["b"])
	require.NoError(t, err)

	// requireShard checks a shard's series against what the test
	// inserted: 4 slots of 8, all done, its own accounts enqueued, those
	// Sync cancelled failed, the rest synced, none skipped.
	requireShard := func(t *testing.T, sc *scrape, name string) {
		t.Helper()
		labels := []string{"task", task, "shard", name}
		require.InDelta(t, 1, sc.value(t, "riverslot_shard_up", labels...), 0)
		require.InDelta(t, 1, sc.value(t, "riverslot_shard_map_version", labels...), 0)
		require.InDelta(t, 4, sc.value(t, "riverslot_cycle_slots", labels...), 0)
		require.InDelta(t, 4, sc.value(t, "riverslot_cycle_slots_done", labels...), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_cycle_slots_failed", labels...), 0)
		require.InDelta(t, float64(own[name]), sc.value(t, "riverslot_cycle_syncs_enqueued", labels...), 0)
		require.InDelta(t, float64(own[name]-failed[name]), sc.value(t, "riverslot_cycle_syncs_synced", labels...), 0)
		require.InDelta(t, float64(failed[name]), sc.value(t, "riverslot_cycle_syncs_failed", labels...), 0)
		for _, reason := range []string{"late", "stale", "upstream"} {
			require.InDelta(t, 0, sc.value(t, "riverslot_cycle_syncs_skipped", append(labels, "reason", reason)...), 0, reason)
		}
		p99 := sc.value(t, "riverslot_cycle_lateness_p99_seconds", labels...)
		require.GreaterOrEqual(t, p99, 0.0)
		require.Less(t, p99, 60.0, "the syncs ran within a minute of being due")
	}
	// requireFleet checks that each riverslot_fleet_cycle_X is the sum of
	// riverslot_cycle_X over the shards given, and the lateness the
	// highest of theirs.
	requireFleet := func(t *testing.T, sc *scrape, names ...string) {
		t.Helper()
		for _, family := range []string{"slots", "slots_done", "slots_failed", "syncs_enqueued", "syncs_synced", "syncs_failed"} {
			var sum float64
			for _, name := range names {
				sum += sc.value(t, "riverslot_cycle_"+family, "task", task, "shard", name)
			}
			require.InDelta(t, sum, sc.value(t, "riverslot_fleet_cycle_"+family, "task", task), 0, family)
		}
		for _, reason := range []string{"late", "stale", "upstream"} {
			var sum float64
			for _, name := range names {
				sum += sc.value(t, "riverslot_cycle_syncs_skipped", "task", task, "shard", name, "reason", reason)
			}
			require.InDelta(t, sum, sc.value(t, "riverslot_fleet_cycle_syncs_skipped", "task", task, "reason", reason), 0, reason)
		}
		var worst float64
		for _, name := range names {
			worst = max(worst, sc.value(t, "riverslot_cycle_lateness_p99_seconds", "task", task, "shard", name))
		}
		require.InDelta(t, worst, sc.value(t, "riverslot_fleet_cycle_lateness_p99_seconds", "task", task), 0)
		require.InDelta(t, float64(start.Unix()), sc.value(t, "riverslot_fleet_cycle_start_timestamp_seconds", "task", task), 0)
	}

	t.Run("PerShardAndSummed", func(t *testing.T) {
		sc := scrapeMetrics(t, h, nil)
		for _, name := range names {
			requireShard(t, sc, name)
		}
		requireFleet(t, sc, names...)
		// The sums, worked out from what was inserted.
		require.InDelta(t, 8, sc.value(t, "riverslot_fleet_cycle_slots", "task", task), 0, "each slot served once")
		require.InDelta(t, 8, sc.value(t, "riverslot_fleet_cycle_slots_done", "task", task), 0)
		require.InDelta(t, float64(own["a"]+own["b"]), sc.value(t, "riverslot_fleet_cycle_syncs_enqueued", "task", task), 0)
		require.InDelta(t, float64(own["a"]+own["b"]-failed["a"]-failed["b"]), sc.value(t, "riverslot_fleet_cycle_syncs_synced", "task", task), 0)
		require.InDelta(t, float64(failed["a"]+failed["b"]), sc.value(t, "riverslot_fleet_cycle_syncs_failed", "task", task), 0)
		require.InDelta(t, 2, sc.value(t, "riverslot_fleet_shards_up", "task", task), 0)
		require.InDelta(t, 1, sc.value(t, "riverslot_fleet_maps_agree", "task", task), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_fleet_cycle_slots_conflicting", "task", task), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_fleet_cycle_slots_unserved", "task", task), 0)
		for _, family := range []string{
			"riverslot_shard_up", "riverslot_shard_map_version", "riverslot_cycle_slots", "riverslot_cycle_slots_done",
			"riverslot_cycle_syncs_enqueued", "riverslot_cycle_syncs_synced", "riverslot_cycle_syncs_skipped",
			"riverslot_cycle_syncs_failed", "riverslot_cycle_lateness_p99_seconds", "riverslot_cycle_on_track",
			"riverslot_fleet_cycle_on_track",
		} {
			require.Contains(t, sc.types, family, "every family is served")
		}
		// The same answer twice: stable ordering.
		require.Equal(t, sc.text, scrapeMetrics(t, h, nil).text)
	})

	t.Run("ShardDown", func(t *testing.T) {
		// Shard c's database does not answer (its pool closed), given
		// first: up 0 and nothing else of it; a and b as before, the
		// fleet's sums over them.
		closed, err := pgxpool.New(ctx, riverslottest.DatabaseURL())
		require.NoError(t, err)
		closed.Close()
		downC := newScheduler(closed, "c", schemas["a"])
		require.NoError(t, downC.Configure(&river.Config{Schema: schemas["a"]}))
		logger, records := riverslottest.RecordingLogger(slog.LevelError)
		h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: logger}, downC, scheds["a"], scheds["b"])
		require.NoError(t, err)
		sc := scrapeMetrics(t, h, nil)
		require.InDelta(t, 0, sc.value(t, "riverslot_shard_up", "task", task, "shard", "c"), 0)
		for _, s := range sc.samples {
			if s.name != "riverslot_shard_up" {
				require.NotEqual(t, "c", s.labels["shard"], "no series of a shard that did not answer but up: %s", s.line)
			}
		}
		for _, name := range names {
			requireShard(t, sc, name)
		}
		requireFleet(t, sc, names...)
		require.InDelta(t, 2, sc.value(t, "riverslot_fleet_shards_up", "task", task), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_fleet_cycle_on_track", "task", task), 0)
		require.InDelta(t, 1, sc.value(t, "riverslot_fleet_maps_agree", "task", task), 0, "the shards that answered agree")
		require.NotContains(t, sc.text, "closed pool", "the database's error stays in the log")
		require.NotEmpty(t, records.Find("riverslot handler: request failed"), "the cause is logged")
	})

	t.Run("MapsDisagree", func(t *testing.T) {
		// b's database under a second name: slots 4-7 served twice.
		twice := newScheduler(pool, "b2", schemas["b"])
		require.NoError(t, twice.Configure(&river.Config{Schema: schemas["b"]}))
		h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: riverslottest.Logger(t)}, scheds["a"], scheds["b"], twice)
		require.NoError(t, err)
		sc := scrapeMetrics(t, h, nil)
		require.InDelta(t, 0, sc.value(t, "riverslot_fleet_maps_agree", "task", task), 0)
		require.InDelta(t, 4, sc.value(t, "riverslot_fleet_cycle_slots_conflicting", "task", task), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_fleet_cycle_on_track", "task", task), 0)
		requireFleet(t, sc, "a", "b", "b2")
		require.InDelta(t, 12, sc.value(t, "riverslot_fleet_cycle_slots", "task", task), 0, "a slot two shards serve counts twice")
		require.InDelta(t, float64(own["a"]+2*own["b"]), sc.value(t, "riverslot_fleet_cycle_syncs_enqueued", "task", task), 0)
	})

	t.Run("NoCycleYet", func(t *testing.T) {
		// A fleet that has made no cycle of the task, one shard down: up
		// says which answered, and there is no cycle series.
		x, y := riverslottest.Schema(ctx, t, pool), riverslottest.Schema(ctx, t, pool)
		sx, sy := newScheduler(pool, "x", x), newScheduler(pool, "y", y)
		require.NoError(t, sx.Configure(&river.Config{Schema: x}))
		require.NoError(t, sy.Configure(&river.Config{Schema: y}))
		closed, err := pgxpool.New(ctx, riverslottest.DatabaseURL())
		require.NoError(t, err)
		closed.Close()
		sz := newScheduler(closed, "z", x)
		require.NoError(t, sz.Configure(&river.Config{Schema: x}))
		h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: riverslottest.Logger(t)}, sx, sz, sy)
		require.NoError(t, err)
		sc := scrapeMetrics(t, h, nil)
		require.InDelta(t, 1, sc.value(t, "riverslot_shard_up", "task", task, "shard", "x"), 0)
		require.InDelta(t, 0, sc.value(t, "riverslot_shard_up", "task", task, "shard", "z"), 0)
		require.InDelta(t, 1, sc.value(t, "riverslot_shard_up", "task", task, "shard", "y"), 0)
		require.InDelta(t, 2, sc.value(t, "riverslot_fleet_shards_up", "task", task), 0)
		require.Equal(t, []string{"riverslot_fleet_shards_up", "riverslot_shard_up"}, slices.Sorted(maps.Keys(sc.types)))
	})

	t.Run("AppMetricsFollow", func(t *testing.T) {
		// Config.Metrics (the app's Prometheus handler) follows the
		// fleet's families in the same answer, asked for the text format
		// whatever the scraper accepts.
		registry := prometheus.NewRegistry()
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app_widgets", Help: "Widgets."})
		g.Set(7)
		registry.MustRegister(g)
		h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: riverslottest.Logger(t), Metrics: promhttp.HandlerFor(registry, promhttp.HandlerOpts{})}, scheds["a"], scheds["b"])
		require.NoError(t, err)
		sc := scrapeMetrics(t, h, http.Header{"Accept": {"application/openmetrics-text;version=1.0.0"}, "Accept-Encoding": {"gzip"}})
		require.InDelta(t, 7, sc.value(t, "app_widgets"), 0)
		requireShard(t, sc, "a")
		requireFleet(t, sc, names...)
	})
}

// scrape is a /metrics answer as the test parsed it.
type scrape struct {
	text    string
	help    map[string]string
	types   map[string]string
	samples []sample
}

type sample struct {
	name   string
	labels map[string]string
	value  float64
	line   string
}

// scrapeMetrics GETs /metrics from h and parses the Prometheus text
// format (0.0.4), checking as it goes that every sample's family has its
// HELP and TYPE before it, each family's samples are together, and no
// series appears twice.
func scrapeMetrics(t *testing.T, h http.Handler, header http.Header) *scrape {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "/metrics", nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4"), rec.Header().Get("Content-Type"))
	out := &scrape{text: rec.Body.String(), help: map[string]string{}, types: map[string]string{}}
	seen := map[string]bool{}
	done := map[string]bool{} // families whose samples have ended
	current := ""
	lines := bufio.NewScanner(strings.NewReader(out.text))
	for lines.Scan() {
		line := lines.Text()
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# HELP "):
			name, text, ok := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			require.True(t, ok, line)
			require.NotContains(t, out.help, name, "HELP of %s twice", name)
			require.NotEmpty(t, text, line)
			out.help[name] = text
			continue
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, ok := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			require.True(t, ok, line)
			require.NotContains(t, out.types, name, "TYPE of %s twice", name)
			require.Contains(t, []string{"gauge", "counter", "untyped", "summary", "histogram"}, typ, line)
			out.types[name] = typ
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		s := parseSample(t, line)
		family := s.name
		if _, ok := out.types[family]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(s.name, suffix); ok {
					family = f
				}
			}
		}
		require.Contains(t, out.help, family, "HELP before %s", line)
		require.Contains(t, out.types, family, "TYPE before %s", line)
		if family != current {
			require.False(t, done[family], "the samples of %s are not together", family)
			done[current], current = true, family
		}
		key := s.name + fmt.Sprint(sortedLabels(s.labels))
		require.False(t, seen[key], "series twice: %s", line)
		seen[key] = true
		out.samples = append(out.samples, s)
	}
	require.NoError(t, lines.Err())
	return out
}

// parseSample parses name{l="v",...} value, unescaping label values.
func parseSample(t *testing.T, line string) sample {
	t.Helper()
	s := sample{labels: map[string]string{}, line: line}
	i := strings.IndexAny(line, "{ ")
	require.Positive(t, i, line)
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for rest[0] != '}' {
			eq := strings.Index(rest, `="`)
			require.Positive(t, eq, line)
			name := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for {
				require.NotEmpty(t, rest, "unterminated label value: %s", line)
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' {
					require.NotEmpty(t, rest, line)
					switch rest[0] {
					case '\\', '"':
						v.WriteByte(rest[0])
					case 'n':
						v.WriteByte('\n')
					default:
						t.Fatalf("bad escape in %s", line)
					}
					rest = rest[1:]
					continue
				}
				require.NotEqual(t, byte('\n'), c, line)
				v.WriteByte(c)
			}
			require.NotContains(t, s.labels, name, "label %s twice: %s", name, line)
			s.labels[name] = v.String()
			rest = strings.TrimPrefix(rest, ",")
			require.NotEmpty(t, rest, line)
		}
		rest = rest[1:]
	}
	fields := strings.Fields(rest)
	require.NotEmpty(t, fields, line)
	v, err := strconv.ParseFloat(fields[0], 64)
	require.NoError(t, err, line)
	s.value = v
	return s
}

// value returns the value of the one series of family name with exactly
// the labels given as name, value pairs.
func (sc *scrape) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, s := range sc.samples {
		if s.name == name && fmt.Sprint(sortedLabels(s.labels)) == fmt.Sprint(sortedLabels(want)) {
			return s.value
		}
	}
	t.Fatalf("no series %s%v in:\n%s", name, want, sc.text)
	return 0
}

func sortedLabels(labels map[string]string) []string {
	var out []string
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}
