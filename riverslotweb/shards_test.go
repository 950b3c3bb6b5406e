package riverslotweb_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/riverslotweb"
)

// TestShardsHandler serves the fleet's page over three shards (three
// schemas, each a database of its own as far as riverslot can tell) whose
// cycle's fan-outs ran: every slot is shown once, in the state of the
// shard the map gives it; the totals and each shard's counts match the
// accounts each schema holds in its own buckets; an account is found on
// its shard; each shard's own page is served under /shards/NAME/. Then a
// database given under two names (its slots served twice) and a shard
// left out (its slots served by none) are reported as such. Then one
// shard's database does not answer, given first: the page and the API
// still answer for the others within the request's timeout, say which
// shard did not answer (by request id, the cause in the log) and show its
// slots as unknown.
func TestShardsHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	const (
		task  = "transactions"
		cycle = 24 * time.Second // 8 slots of 8,192 two-byte buckets
	)
	m := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "a", Lo: 0, Hi: 16383}, {Shard: "b", Lo: 16384, Hi: 40959}, {Shard: "c", Lo: 40960, Hi: 65535}}}
	owner := func(bucket int) string {
		switch {
		case bucket <= 16383:
			return "a"
		case bucket <= 40959:
			return "b"
		}
		return "c"
	}
	names := []string{"a", "b", "c"}
	schemas := map[string]string{}
	var shards []riverslot.Shard
	for _, name := range names {
		schemas[name] = riverslottest.Schema(ctx, t, pool)
		shards = append(shards, riverslot.Shard{Name: name, Pool: pool, Schema: schemas[name]})
	}
	require.NoError(t, riverslot.SetShardMap(ctx, shards, task, m, time.Time{}))
	noop := func(context.Context, uuid.UUID, *river.Job[riverslot.SyncArgs]) error { return nil }
	newScheduler := func(pool *pgxpool.Pool, name string) *riverslot.Scheduler {
		s, err := riverslot.New(pool, &riverslot.Config{Shard: name, Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
			{Name: task, Cycle: cycle, Schema: schemas[name], Table: "accounts", Sync: noop},
		}})
		require.NoError(t, err)
		return s
	}

	// Each shard's accounts (its own table, all buckets) and the ones it
	// serves, counted from the UUIDs here.
	own := map[string]int64{}
	ids := map[string][]uuid.UUID{}
	var start time.Time
	scheds := map[string]*riverslot.Scheduler{}
	clients := map[string]*river.Client[pgx.Tx]{}
	for _, name := range names {
		ids[name] = riverslottest.CreateAccounts(ctx, t, pool, schemas[name], "accounts", 150)
		for _, id := range ids[name] {
			if owner(int(id[15])<<8|int(id[14])) == name {
				own[name]++
			}
		}
		s := newScheduler(pool, name)
		require.NoError(t, s.CreateIndexes(ctx))
		config := &river.Config{Schema: schemas[name], Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 5}}, FetchPollInterval: 100 * time.Millisecond}
		require.NoError(t, s.Configure(config))
		config.PeriodicJobs = nil
		client, _ := riverslottest.StartClient(ctx, t, pool, config)
		clients[name] = client
		info, err := s.Task(task)
		require.NoError(t, err)
		if start.IsZero() {
			start = info.Schedule.Next(time.Now().Add(time.Hour))
		}
		_, err = s.EnqueueCycle(ctx, client, task, start)
		require.NoError(t, err)
		scheds[name] = s
	}
	// Run each shard's fan-outs now (the cycle is an hour ahead; its sync
	// jobs stay scheduled).
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
	}

	h, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: riverslottest.Logger(t)}, scheds["a"], scheds["b"], scheds["c"])
	require.NoError(t, err)

	code, body, _ := get(t, h, "/api/status?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	var st shardsJSON
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, start.UTC().Format(time.RFC3339), st.CycleStart)
	require.Equal(t, 8, st.Slots, "each slot served by one shard")
	require.Equal(t, 8, st.SlotsDone)
	require.Zero(t, st.Unreachable)
	require.Len(t, st.Shards, 3)
	var total int64
	for i, sc := range st.Shards {
		require.Equal(t, names[i], sc.Shard)
		require.Empty(t, sc.Error)
		require.NotNil(t, sc.Status)
		require.Equal(t, names[i], sc.Status.Shard)
		require.EqualValues(t, 1, sc.Status.ShardVersion)
		require.Equal(t, own[sc.Shard], sc.Status.Enqueued, "shard %s enqueued the accounts of its own buckets", sc.Shard)
		total += own[sc.Shard]
	}
	require.Equal(t, total, st.Enqueued)
	for _, field := range []string{"conflicts", "unserved", "map_versions"} {
		require.Contains(t, body, `"`+field+`": []`, "an empty list, not null")
	}

	// The page: one bar per slot, each in its shard's state, and the strip
	// naming each slot's shard as the map gives it.
	code, body, hdr := get(t, h, "/?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, hdr.Get("Content-Type"), "text/html")
	require.Equal(t, 8, strings.Count(body, `class="slot slot-done"`), body)
	owners := slotOwners(t, body)
	require.Len(t, owners, 8)
	for slot, shard := range owners {
		require.Equal(t, owner(slot*8192), shard, "slot %d's shard", slot)
	}
	for _, name := range names {
		require.Contains(t, body, `<a href="shards/`+name+`/?task=`+task+`">`+name+`</a>`)
	}

	// Each shard's own page and API.
	code, body, _ = get(t, h, "/shards/b/api/status?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	var bst shardCycleStatusJSON
	require.NoError(t, json.Unmarshal([]byte(body), &bst))
	require.Equal(t, "b", bst.Shard)
	require.Equal(t, 5, bst.SlotsElsewhere)
	require.Equal(t, own["b"], bst.Enqueued)
	code, body, _ = get(t, h, "/shards/c/?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="slot-bars"`)

	// An account is found on the shard its buckets give it.
	var inC uuid.UUID
	for _, id := range ids["c"] {
		if owner(int(id[15])<<8|int(id[14])) == "c" {
			inC = id
			break
		}
	}
	require.NotEqual(t, uuid.Nil, inC)
	code, body, _ = get(t, h, "/api/accounts/"+inC.String()+"?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	var acc struct {
		Shard      string `json:"shard"`
		MapVersion int64  `json:"map_version"`
		Account    *struct {
			AccountID string `json:"account_id"`
			Slot      int    `json:"slot"`
		} `json:"account"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &acc))
	require.Equal(t, "c", acc.Shard)
	require.EqualValues(t, 1, acc.MapVersion)
	require.NotNil(t, acc.Account)
	require.Equal(t, inC.String(), acc.Account.AccountID)
	require.Equal(t, (int(inC[15])<<8|int(inC[14]))*8/65536, acc.Account.Slot)
	code, body, _ = get(t, h, "/?task="+task+"&account="+inC.String())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<b id="account-shard">c</b>`)
	require.Contains(t, body, `href="shards/c/?task=`+task+`&amp;account=`+inC.String()+`"`)
	code, body, _ = get(t, h, "/api/accounts/not-a-uuid?task="+task)
	requireJSONError(t, code, body, http.StatusBadRequest, "UUID")
	code, body, _ = get(t, h, "/api/status?task=nope")
	requireJSONError(t, code, body, http.StatusNotFound, `no task named "nope"`)

	// The same database under two names (a misconfiguration): slots 2-4
	// are served twice; without shard c, slots 5-7 by none. Neither is on
	// track, and the verdict says why.
	twice, err := riverslot.New(pool, &riverslot.Config{Shard: "b2", Logger: riverslottest.Logger(t), Tasks: []riverslot.Task{
		{Name: task, Cycle: cycle, Schema: schemas["b"], Table: "accounts", Sync: noop},
	}})
	require.NoError(t, err)
	require.NoError(t, twice.Configure(&river.Config{Schema: schemas["b"]}))
	bad, err := riverslotweb.NewShards(nil, scheds["a"], scheds["b"], twice, scheds["c"])
	require.NoError(t, err)
	code, body, _ = get(t, bad, "/api/status?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	st = shardsJSON{}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, []int{2, 3, 4}, st.Conflicts)
	require.Empty(t, st.Unserved)
	require.Equal(t, 8, st.Slots, "each slot counted once, those served twice too")
	require.False(t, st.OnTrack)
	require.Contains(t, st.Verdict, "slots [2 3 4] served by more than one shard (2: b+b2")
	code, body, _ = get(t, bad, "/?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 3, strings.Count(body, `class="slot slot-conflict"`))
	require.Contains(t, body, `id="map-conflict"`)
	missing, err := riverslot.StatusShards(ctx, task, scheds["a"], scheds["b"])
	require.NoError(t, err)
	require.Equal(t, []int{5, 6, 7}, missing.Unserved)
	require.False(t, missing.OnTrack)
	require.Contains(t, missing.Verdict, "slots [5 6 7] served by no shard")

	// Shard c's database does not answer: a server that accepts
	// connections and never replies, given first. The shards are asked at
	// once, so a and b still answer within the request's Timeout.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	var (
		connsMu sync.Mutex
		conns   []net.Conn
	)
	t.Cleanup(func() {
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, conn)
			connsMu.Unlock()
		}
	}()
	dead, err := pgxpool.New(ctx, "postgres://postgres@"+silent.Addr().String()+"/riverslot?connect_timeout=60&sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(dead.Close)
	downC := newScheduler(dead, "c")
	require.NoError(t, downC.Configure(&river.Config{Schema: schemas["c"]}))
	logger, records := riverslottest.RecordingLogger(slog.LevelError)
	h2, err := riverslotweb.NewShards(&riverslotweb.Config{Logger: logger, Timeout: 8 * time.Second}, downC, scheds["a"], scheds["b"])
	require.NoError(t, err)
	code, body, _ = get(t, h2, "/api/status?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	st = shardsJSON{}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, 1, st.Unreachable)
	require.False(t, st.OnTrack)
	require.Equal(t, 5, st.Slots, "a's and b's slots")
	require.Equal(t, own["a"]+own["b"], st.Enqueued)
	require.Equal(t, "c", st.Shards[0].Shard)
	require.Nil(t, st.Shards[0].Status)
	require.Contains(t, st.Shards[0].Error, "did not answer")
	require.Contains(t, st.Shards[0].Error, "request")
	require.NotNil(t, st.Shards[1].Status, "a answers though c, asked first, takes the whole timeout: %s", st.Shards[1].Error)
	require.NotNil(t, st.Shards[2].Status, "b answers: %s", st.Shards[2].Error)
	require.NotContains(t, body, silent.Addr().String(), "the database's error stays in the log")
	require.Contains(t, st.Verdict, "c: did not answer")
	require.Empty(t, st.Unserved, "c's slots are unknown, not unserved: c did not answer")
	require.NotEmpty(t, records.Find("riverslot handler: request failed"), "the cause is logged")
	code, body, _ = get(t, h2, "/?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	owners = slotOwners(t, body)
	for slot, shard := range owners {
		want := owner(slot * 8192)
		if want == "c" {
			want = "unknown"
		}
		require.Equal(t, want, shard, "slot %d's shard with c down", slot)
	}
	require.Equal(t, 3, strings.Count(body, `class="slot slot-unknown"`))
	require.Equal(t, 5, strings.Count(body, `class="slot slot-done"`))
	code, body, _ = get(t, h2, "/api/accounts/"+inC.String()+"?task="+task)
	requireJSONError(t, code, body, http.StatusInternalServerError, "request")

	// Shard a makes the next cycle before b and c do (its trigger a
	// moment earlier): the page shows that cycle, with b and c answering
	// it as not made yet (their slots scheduled), not as down.
	next := start.Add(cycle)
	_, err = scheds["a"].EnqueueCycle(ctx, clients["a"], task, next)
	require.NoError(t, err)
	jobsA := pgx.Identifier{schemas["a"], "river_job"}.Sanitize()
	riverslottest.WaitFor(t, 30*time.Second, "shard a's next bootstrap", func() bool {
		return riverslottest.Count(ctx, t, pool, "SELECT count(*) FROM "+jobsA+" WHERE kind = 'riverslot_bootstrap' AND state = 'completed'") == 2
	})
	code, body, _ = get(t, h, "/api/status?task="+task)
	require.Equal(t, http.StatusOK, code, body)
	st = shardsJSON{}
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, next.UTC().Format(time.RFC3339), st.CycleStart)
	require.Zero(t, st.Unreachable)
	for _, sc := range st.Shards {
		require.Empty(t, sc.Error, "shard %s answers the cycle it has not made yet", sc.Shard)
		require.NotNil(t, sc.Status, sc.Shard)
	}
	require.Equal(t, 8, st.Slots)
	require.Empty(t, st.Unserved)
	require.Empty(t, st.Conflicts, "b and c follow the map for the cycle they have not made")

	// Bad configurations.
	_, err = riverslotweb.NewShards(nil)
	require.ErrorContains(t, err, "one Scheduler per shard")
	_, err = riverslotweb.NewShards(nil, scheds["a"], scheds["a"])
	require.ErrorContains(t, err, `shard "a" is given twice`)
	unnamed, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{Name: task, Cycle: cycle, Schema: schemas["a"], Table: "accounts", Sync: noop}}})
	require.NoError(t, err)
	require.NoError(t, unnamed.Configure(&river.Config{Schema: schemas["a"]}))
	_, err = riverslotweb.NewShards(nil, scheds["a"], unnamed)
	require.ErrorContains(t, err, "set riverslot.Config.Shard")
	other, err := riverslot.New(pool, &riverslot.Config{Shard: "b", Tasks: []riverslot.Task{{Name: "payroll", Cycle: cycle, Schema: schemas["b"], Table: "accounts", Sync: noop}}})
	require.NoError(t, err)
	require.NoError(t, other.Configure(&river.Config{Schema: schemas["b"]}))
	_, err = riverslotweb.NewShards(nil, scheds["a"], other)
	require.ErrorContains(t, err, "give every shard's Scheduler the same tasks")
}

// shardCycleStatusJSON is what the tests read of a shard's cycle in the
// API's JSON.
type shardCycleStatusJSON struct {
	Shard          string `json:"shard"`
	ShardVersion   int64  `json:"shard_version"`
	SlotsElsewhere int    `json:"slots_elsewhere"`
	Enqueued       int64  `json:"sync_enqueued"`
}

// shardsJSON is what the tests read of the fleet's status in the API's
// JSON.
type shardsJSON struct {
	CycleStart  string `json:"cycle_start"`
	Verdict     string `json:"verdict"`
	OnTrack     bool   `json:"on_track"`
	Unreachable int    `json:"unreachable"`
	Conflicts   []int  `json:"conflicts"`
	Unserved    []int  `json:"unserved"`
	Slots       int    `json:"slots"`
	SlotsDone   int    `json:"slots_done"`
	Enqueued    int64  `json:"sync_enqueued"`
	Shards      []struct {
		Shard  string                `json:"shard"`
		Error  string                `json:"error"`
		Status *shardCycleStatusJSON `json:"status"`
	} `json:"shards"`
}

// slotOwners reads the fleet page's owner strip: each slot's shard.
func slotOwners(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for i, m := range regexp.MustCompile(`class="owner" data-slot="(\d+)" data-shard="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		slot, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Equal(t, i, slot)
		out = append(out, m[2])
	}
	return out
}
