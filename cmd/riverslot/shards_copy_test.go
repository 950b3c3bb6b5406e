package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/slotplan"
)

// copyBundle is two shards, each its own database on the test server, the
// accounts table in a schema of the same name in both.
type copyBundle struct {
	schema             string
	srcPool, dstPool   *pgxpool.Pool
	flags              []string // --shard s1=... --shard s2=...
	srcTable, dstTable string   // quoted, qualified
}

// accountRow is one account as text, every column the two tables share.
type accountRow struct {
	id                                    uuid.UUID
	active, name, balance, tags, meta, ts string
	nullable                              *string
}

// bucketOf is the definition of an account's two-byte bucket: byte 15 of
// its UUID times 256, plus byte 14.
func bucketOf(id uuid.UUID) int { return int(id[15])*256 + int(id[14]) }

func setupCopy(ctx context.Context, t *testing.T) *copyBundle {
	t.Helper()
	src := riverslottest.Pool(t)
	dst, dstURL := riverslottest.AccountsPool(t)
	// River's schema on each shard, and the accounts table's, by the same
	// name on both.
	river1, river2 := riverslottest.Schema(ctx, t, src), riverslottest.Schema(ctx, t, dst)
	schema := riverslottest.EmptySchema(ctx, t, src)
	_, err := dst.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = dst.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	b := &copyBundle{
		schema: schema, srcPool: src, dstPool: dst,
		flags:    []string{"--shard", "s1@" + river1 + "=" + riverslottest.DatabaseURL(), "--shard", "s2@" + river2 + "=" + dstURL},
		srcTable: pgx.Identifier{schema, "accounts"}.Sanitize(), dstTable: pgx.Identifier{schema, "accounts"}.Sanitize(),
	}
	// The source has a column the destination lacks (legacy), the
	// destination one the source lacks (copied_at, its default) and one it
	// generates (name_len).
	_, err = src.Exec(ctx, "CREATE TABLE "+b.srcTable+` (id uuid PRIMARY KEY, active boolean NOT NULL, name text, balance numeric(12,2),
		tags text[], meta jsonb, ts timestamptz, nullable text, legacy int)`)
	require.NoError(t, err)
	_, err = dst.Exec(ctx, "CREATE TABLE "+b.dstTable+` (id uuid PRIMARY KEY, name text, active boolean NOT NULL, balance numeric(12,2),
		tags text[], meta jsonb, ts timestamptz, nullable text, copied_at timestamptz NOT NULL DEFAULT now(),
		name_len int GENERATED ALWAYS AS (length(name)) STORED)`)
	require.NoError(t, err)
	return b
}

// insertSource adds n accounts with varied values (quotes, NULLs, arrays,
// JSON) to the source.
func (b *copyBundle) insertSource(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 39))
	rows := make([][]any, n)
	for i := range rows {
		var nullable *string
		if i%3 == 0 {
			s := fmt.Sprintf("it's \"%d\"\n\\", i)
			nullable = &s
		}
		rows[i] = []any{uuid.New(), i%2 == 0, fmt.Sprintf("account %d, ünïcode", i), fmt.Sprintf("%d.%02d", rng.IntN(100000), rng.IntN(100)),
			[]string{"a", fmt.Sprint(i), "with,comma"}, fmt.Sprintf(`{"n": %d, "s": "x\"y"}`, i), time.Unix(int64(1.7e9)+int64(i), int64(i)*1000).UTC(), nullable, i}
	}
	_, err := b.srcPool.CopyFrom(ctx, pgx.Identifier{b.schema, "accounts"}, []string{"id", "active", "name", "balance", "tags", "meta", "ts", "nullable", "legacy"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
}

// accounts reads every account of table, by id, as text.
func accounts(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) []accountRow {
	t.Helper()
	rows, err := pool.Query(ctx, "SELECT id, active::text, name, balance::text, tags::text, meta::text, ts::text, nullable FROM "+table+" ORDER BY id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (accountRow, error) {
		var a accountRow
		return a, r.Scan(&a.id, &a.active, &a.name, &a.balance, &a.tags, &a.meta, &a.ts, &a.nullable)
	})
	require.NoError(t, err)
	return out
}

// inRange returns the rows whose bucket is in lo-hi.
func inRange(rows []accountRow, lo, hi int) []accountRow {
	var out []accountRow
	for _, r := range rows {
		if b := bucketOf(r.id); b >= lo && b <= hi {
			out = append(out, r)
		}
	}
	return out
}

// cancelAfter is stderr for a run cut short: it cancels the run's context
// when the line of batch n has been written (after that batch committed).
type cancelAfter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	prefix string
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.prefix) {
		w.cancel()
	}
	return len(p), nil
}

// TestShardsCopyAccounts: copy-accounts copies exactly the range's rows
// (by the bucket's definition) from one shard's database to the other's,
// every shared column equal; a rerun copies nothing new; a run cut short
// after its first batch, with a row already on the destination, then run
// again ends with the same rows; bad input exits 2 naming the flag,
// before anything is copied.
func TestShardsCopyAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupCopy(ctx, t)
	b.insertSource(ctx, t, 2000)
	cmd := func(args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards", "copy-accounts", "--task", "t", "--accounts-schema", b.schema}, args...), b.flags...)...)
	}
	code, _, stderr := runCmd(t, append([]string{"shards", "set", "--task", "t", "--ranges", "s1:0-65535"}, b.flags...)...)
	require.Equal(t, 0, code, stderr)

	const lo, hi = 8192, 24575 // a quarter of the buckets
	want := inRange(accounts(ctx, t, b.srcPool, b.srcTable), lo, hi)
	require.Greater(t, len(want), 300)
	require.Less(t, len(want), 700)
	rng := strconv.Itoa(lo) + "-" + strconv.Itoa(hi)

	t.Run("CopiesTheRange", func(t *testing.T) {
		code, stdout, stderr := cmd("--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--batch", "100")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, want, accounts(ctx, t, b.dstPool, b.dstTable), "the destination holds exactly the range's rows, equal")
		require.Contains(t, stdout, fmt.Sprintf("done: %d rows of buckets %s read from shard s1 (%d there at the start), %d copied to shard s2, 0 already there (skipped), in %d batches",
			len(want), rng, len(want), len(want), (len(want)+99)/100))
		require.Contains(t, stdout, "columns id, active, name, balance, tags, meta, ts, nullable\n", "shared columns only, the generated one left out")
		require.Contains(t, stdout, "its latest map, v1 from every cycle, gives them to: "+rng+" s1; once they are copied, riverslot shards move --range "+rng+" --to s2")
		require.Contains(t, stderr, fmt.Sprintf("batch 1: 100 rows read, 100 copied, 0 present; 100 of %d", len(want)))
		var defaults, lens int64
		require.NoError(t, b.dstPool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE copied_at IS NOT NULL), count(*) FILTER (WHERE name_len = length(name)) FROM "+b.dstTable).Scan(&defaults, &lens))
		require.EqualValues(t, len(want), defaults)
		require.EqualValues(t, len(want), lens)

		// Again: nothing new.
		code, stdout, stderr = cmd("--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--batch", "100")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf("0 copied to shard s2, %d already there (skipped)", len(want)))
		require.Equal(t, want, accounts(ctx, t, b.dstPool, b.dstTable))
	})

	t.Run("CutShortThenRerun", func(t *testing.T) {
		_, err := b.dstPool.Exec(ctx, "TRUNCATE "+b.dstTable)
		require.NoError(t, err)
		// A row of the range already there (the app wrote it, say), and
		// one outside it that the copy must leave alone.
		pre := want[len(want)/2]
		insert := func(id uuid.UUID, r accountRow) {
			_, err := b.dstPool.Exec(ctx, "INSERT INTO "+b.dstTable+" (id, active, name, balance, tags, meta, ts, nullable) VALUES ($1, $2::boolean, $3, $4::numeric, $5::text[], $6::jsonb, $7::timestamptz, $8)",
				id, r.active, r.name, r.balance, r.tags, r.meta, r.ts, r.nullable)
			require.NoError(t, err)
		}
		insert(pre.id, pre)
		outside := uuid.New()
		outside[15], outside[14] = 0, 1 // bucket 1
		insert(outside, pre)

		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stderr := &cancelAfter{prefix: "batch 1:", cancel: cancel}
		var stdout bytes.Buffer
		code := run(runCtx, append([]string{"shards", "copy-accounts", "--task", "t", "--accounts-schema", b.schema, "--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--batch", "50"}, b.flags...), &stdout, stderr)
		require.Equal(t, 130, code, "interrupted after its first batch: %s", stderr.buf.String())
		var n int
		require.NoError(t, b.dstPool.QueryRow(ctx, "SELECT count(*) FROM "+b.dstTable).Scan(&n))
		require.Contains(t, []int{2 + 50, 2 + 49}, n, "the first batch committed, no other")

		code, out, errOut := cmd("--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--batch", "50")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, fmt.Sprintf("%d copied to shard s2, %d already there (skipped)", len(want)-(n-1), n-1))
		got := accounts(ctx, t, b.dstPool, b.dstTable)
		i := slices.IndexFunc(got, func(r accountRow) bool { return r.id == outside })
		require.GreaterOrEqual(t, i, 0, "the row outside the range is left")
		require.Equal(t, want, slices.Delete(got, i, i+1), "the same rows as a run never cut short")
	})

	t.Run("BadInput", func(t *testing.T) {
		var before int
		require.NoError(t, b.dstPool.QueryRow(ctx, "SELECT count(*) FROM "+b.dstTable).Scan(&before))
		_, err := b.srcPool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{b.schema, "noid"}.Sanitize()+" (account uuid PRIMARY KEY)")
		require.NoError(t, err)
		_, err = b.dstPool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{b.schema, "noid"}.Sanitize()+" (account uuid PRIMARY KEY)")
		require.NoError(t, err)
		_, err = b.srcPool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{b.schema, "nokey"}.Sanitize()+" (id uuid)")
		require.NoError(t, err)
		_, err = b.dstPool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{b.schema, "nokey"}.Sanitize()+" (id uuid)")
		require.NoError(t, err)
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"--range", "0-65536", "--from", "s1", "--to", "s2", "--table", "accounts"}, "--range 0-65536 must be within the buckets 0-65535, low to high"},
			{[]string{"--range", "9-3", "--from", "s1", "--to", "s2", "--table", "accounts"}, "--range 9-3 must be within the buckets 0-65535, low to high"},
			{[]string{"--range", "0-x", "--from", "s1", "--to", "s2", "--table", "accounts"}, `--range: "0-x" must be LO-HI`},
			{[]string{"--range", rng, "--from", "s9", "--to", "s2", "--table", "accounts"}, `--from "s9" is not among --shard (s1, s2)`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s3", "--table", "accounts"}, `--to "s3" is not among --shard (s1, s2)`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s1", "--table", "accounts"}, `--from and --to are both "s1"`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2"}, "copy-accounts needs --range LO-HI, --from NAME, --to NAME and --table T"},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "missing"}, "--table: shard s1 has no table " + pgx.Identifier{b.schema, "missing"}.Sanitize()},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "noid"}, `has no uuid column "id"`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--id-column", "account_id"}, `has no uuid column "account_id"; the accounts table needs one (the account's id, whose last two bytes are its bucket): name it with --id-column`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--id-column", "a;b"}, "--id-column must be a plain identifier"},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "nokey"}, `has no primary key or unique index on "id"`},
			{[]string{"--range", rng, "--from", "s1", "--to", "s2", "--table", "accounts", "--batch", "0"}, "--batch must be 1-100000, got 0"},
		} {
			code, _, stderr := cmd(tt.args...)
			require.Equal(t, 2, code, "%v: %s", tt.args, stderr)
			require.Contains(t, stderr, tt.want, tt.args)
		}
		var after int
		require.NoError(t, b.dstPool.QueryRow(ctx, "SELECT count(*) FROM "+b.dstTable).Scan(&after))
		require.Equal(t, before, after, "nothing copied")
	})
}

// TestShardsShowDeleteAfterMove: after a range moves, shards show names it
// with the old shard, and says its copies there may be deleted from the
// old map's last cycle's deadline (its end, the move's start, plus half
// its 24 s cycle) once every shard has made the new map's first cycle; a
// range that moves back is no longer named as moved away.
func TestShardsShowDeleteAfterMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	a, b := riverslottest.Schema(ctx, t, pool), riverslottest.Schema(ctx, t, pool)
	url := riverslottest.DatabaseURL()
	flags := []string{"--shard", "a@" + a + "=" + url, "--shard", "b@" + b + "=" + url}
	cmd := func(args ...string) (int, string, string) {
		return runCmd(t, append(append([]string{"shards"}, args...), flags...)...)
	}
	code, _, stderr := cmd("set", "--task", "t", "--ranges", "a:0-32767/b:32768-65535", "--cycle", "24s")
	require.Equal(t, 0, code, stderr)

	// Version 2, buckets 0-8191 to b, from a cycle start already past,
	// written as a move would have been then.
	const cycle = 24 * time.Second
	from := time.Now().UTC().Truncate(cycle).Add(-2 * cycle)
	for _, schema := range []string{a, b} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		led := ledger.New(schema)
		require.NoError(t, led.LockShards(ctx, tx, "t", true))
		require.NoError(t, led.InsertShardMap(ctx, tx, "t", slotplan.ShardMap{Version: 2, Ranges: []slotplan.ShardRange{
			{Shard: "b", Lo: 0, Hi: 8191}, {Shard: "a", Lo: 8192, Hi: 32767}, {Shard: "b", Lo: 32768, Hi: 65535},
		}}, from))
		require.NoError(t, tx.Commit(ctx))
	}
	recordCycle(ctx, t, a, "a", "t", from.Add(-cycle), 1)
	recordCycle(ctx, t, b, "b", "t", from.Add(-cycle), 1)
	recordCycle(ctx, t, a, "a", "t", from, 2)

	type moved struct {
		Lo, Hi        int
		From, To      string
		Version       int64
		EffectiveFrom time.Time `json:"effective_from"`
		DeleteFrom    time.Time `json:"delete_from"`
		Safe          bool
		Waiting       []string
		Predicate     string
	}
	show := func() []moved {
		t.Helper()
		code, stdout, stderr := cmd("show", "--task", "t", "--json")
		require.Equal(t, 0, code, stderr)
		var out struct{ Moved []moved }
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		return out.Moved
	}
	// The old map's last cycle on a ends at from; its syncs may start up
	// to half a cycle later.
	deleteFrom := from.Add(cycle / 2)
	predicate := `(get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14)) BETWEEN 0 AND 8191`
	require.Equal(t, []moved{{Lo: 0, Hi: 8191, From: "a", To: "b", Version: 2, EffectiveFrom: from, DeleteFrom: deleteFrom,
		Waiting: []string{"shard b has not made the cycle from " + from.Format(time.RFC3339) + " yet"}, Predicate: predicate}}, show())

	recordCycle(ctx, t, b, "b", "t", from, 2)
	require.Equal(t, []moved{{Lo: 0, Hi: 8191, From: "a", To: "b", Version: 2, EffectiveFrom: from, DeleteFrom: deleteFrom, Safe: true, Predicate: predicate}}, show())
	code, stdout, stderr := cmd("show", "--task", "t")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `0-8191 +a +b +`+from.Format(time.RFC3339)+` \(v2\) +`+deleteFrom.Format(time.RFC3339)+` +safe now`, stdout)
	require.Contains(t, stdout, "on a, buckets 0-8191: DELETE FROM <accounts table> WHERE "+predicate)

	// A move ahead: not yet; then the first range moves back to a: no
	// longer moved away from a (but from b, once that move is in force).
	at := time.Now().UTC().Truncate(cycle).Add(time.Hour)
	code, _, stderr = cmd("move", "--task", "t", "--range", "8192-16383", "--to", "b", "--at", at.Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	got := show()
	require.Len(t, got, 2)
	require.Equal(t, moved{Lo: 8192, Hi: 16383, From: "a", To: "b", Version: 3, EffectiveFrom: at, DeleteFrom: at.Add(cycle / 2),
		Waiting: []string{
			"shard a has not made the cycle from " + at.Format(time.RFC3339) + " yet",
			"shard b has not made the cycle from " + at.Format(time.RFC3339) + " yet",
			"shard a's last cycle before the move may sync them until " + at.Add(cycle/2).Format(time.RFC3339),
		}, Predicate: `(get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14)) BETWEEN 8192 AND 16383`}, got[1])

	code, _, stderr = cmd("move", "--task", "t", "--range", "0-8191", "--to", "a", "--at", at.Add(cycle).Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	got = show()
	require.Len(t, got, 2)
	require.Equal(t, [2]string{"a", "b"}, [2]string{got[0].From, got[0].To})
	require.Equal(t, 8192, got[0].Lo, "0-8191 came back to a: not moved away from it")
	require.Equal(t, [4]any{0, 8191, "b", "a"}, [4]any{got[1].Lo, got[1].Hi, got[1].From, got[1].To})
}
