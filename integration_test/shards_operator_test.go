package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/syncjob"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// runRiverslot runs the riverslot binary with args to its end and returns
// its exit code and output; it fails the test only when the binary cannot
// run at all.
func runRiverslot(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, riverslotBinary(t), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("riverslot %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	name := args[0] // the command and its subcommand, without the flags
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
	}
	t.Logf("riverslot %s: exit %d\n%s%s", name, code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// TestShardsOperator runs docs/shards.md's "Adding a shard to a running
// fleet" and "Repairing a change written on some shards only" as an
// operator runs them, with the commands the docs give, on three
// PostgreSQL servers of the test's own, each shard's accounts in its own
// database and each shard served by a `riverslot worker --shard` process,
// on real 24 s cycles (8 slots of 8,192 two-byte buckets):
//
//  1. s1 (buckets 0-32767) and s2 (32768-65535) are prepared with
//     riverslot migrate, get the fleet's first map with shards set, and
//     run;
//  2. a third server is created while they run, prepared with riverslot
//     migrate, and joined with shards add at the next cycle start 30 s
//     ahead (T1): nothing moves;
//  3. once s1 and s2 have made a cycle, shards copy-accounts copies the
//     accounts of 16384-32767 (half of s1's range) from s1 to s3, and
//     shards move gives them to s3 from a later cycle start (T2); s3's
//     worker starts (its cycles before T1 refused, T1's made with none of
//     its slots). s1 keeps its copies (the app deletes them later), so a
//     shard serving a range it no longer owns syncs it twice;
//  4. a change (24576-32767 back to s1 from T3) is half-written on
//     purpose: s1 refuses the write (a trigger raising on insert, as a
//     shard failing mid-change) and s3, written first, refuses its undo (a
//     trigger raising on delete); shards show exits 1 naming the versions,
//     the faults are removed and shards repair completes the change from
//     its start, before any cycle follows it.
//
// Checked over every cycle from the first to T3's, from each shard's
// record of its worker's Sync calls (not jobs queued), against the maps
// the commands gave: every account synced by the shard owning it in that
// cycle, once over all shards, never by another (nor a sync job of it
// queued there), but for a sync its job skipped as stale past its NotAfter
// (recorded in the job's output); no account synced twice less than half
// a cycle apart, and an account's syncs in two cycles in a row, across a
// move too, between half and one and a half cycles (and a slot) apart;
// each shard's ledger records the map version each cycle followed and
// claims exactly the slots that map gives it. About 130 s: four cycles
// and the 30 s lead of the first change.
func TestShardsOperator(t *testing.T) {
	parallel(t)
	const (
		cycle   = 24 * time.Second
		width   = 8192 // two-byte buckets of a slot
		perSlot = 25   // accounts in each slot's buckets
		slotLen = cycle / 8
		task    = "transactions"
		schema  = "river"
	)
	ctx := t.Context()
	riverslotBinary(t) // built before the cycle grid is chosen

	v1 := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "s1", Lo: 0, Hi: 32767}, {Shard: "s2", Lo: 32768, Hi: 65535}}}
	v3 := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "s1", Lo: 0, Hi: 16383}, {Shard: "s3", Lo: 16384, Hi: 32767}, {Shard: "s2", Lo: 32768, Hi: 65535}}}
	v5 := riverslot.ShardMap{Ranges: []riverslot.ShardRange{{Shard: "s1", Lo: 0, Hi: 16383}, {Shard: "s3", Lo: 16384, Hi: 24575}, {Shard: "s1", Lo: 24576, Hi: 32767}, {Shard: "s2", Lo: 32768, Hi: 65535}}}
	bucketOf := twoByteBucket
	all := idsInSlots(39, 4, 8, perSlot, width)

	type shard struct {
		name string
		c    *cluster
		pool *pgxpool.Pool
	}
	url := func(sh *shard) string { return sh.name + "=" + sh.c.url() }
	// prepare makes a shard's database as the app and the operator do: the
	// app's accounts table (in public) holding ids, then riverslot migrate
	// (River's tables and riverslot's in "river", the accounts' bucket
	// index). riverslot worker's Sync only records, so it serves a schema
	// marked as the demo's; the synced table is its record of Sync calls.
	prepare := func(name string, ids []uuid.UUID) *shard {
		sh := &shard{name: name, c: startCluster(t)}
		sh.pool = sh.c.pool(ctx, t)
		t.Cleanup(sh.pool.Close)
		_, err := sh.pool.Exec(ctx, "CREATE TABLE public.accounts (id uuid PRIMARY KEY, active boolean NOT NULL DEFAULT true, name text)")
		require.NoError(t, err)
		_, err = sh.pool.Exec(ctx, "INSERT INTO public.accounts (id, name) SELECT id, 'account ' || id FROM unnest($1::uuid[]) AS id", ids)
		require.NoError(t, err)
		code, stdout, stderr := runRiverslot(t, "migrate", "--database-url", sh.c.url(), "--schema", schema, "--table", "accounts", "--accounts-schema", "public")
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, schema+".riverslot_shards: created")
		markSchemaAsDemos(ctx, t, sh.pool, schema)
		riverslottest.CreateSyncedTable(ctx, t, sh.pool, schema)
		return sh
	}
	owned := func(m riverslot.ShardMap, name string) []uuid.UUID {
		var out []uuid.UUID
		for _, id := range all {
			if m.OwnerOf(id) == name {
				out = append(out, id)
			}
		}
		return out
	}
	s1, s2 := prepare("s1", owned(v1, "s1")), prepare("s2", owned(v1, "s2"))
	shards := func(list ...*shard) []string {
		args := []string{"--task", task, "--schema", schema}
		for _, sh := range list {
			args = append(args, "--shard", url(sh))
		}
		return args
	}
	cmd := func(sub string, list []*shard, args ...string) (int, string, string) {
		return runRiverslot(t, append(append([]string{"shards", sub}, shards(list...)...), args...)...)
	}
	code, stdout, stderr := cmd("set", []*shard{s1, s2}, "--ranges", "s1:0-32767/s2:32768-65535", "--cycle", cycle.String())
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v1 s1:0-32767 s2:32768-65535 on 2 shards, for every cycle")

	// The workers, their first cycle (C0) 24 s ahead: time to start them
	// and to create the third server before the next cycle start that is
	// 30 s ahead.
	offset, c0 := offsetForStartIn(cycle, 24*time.Second)
	startShard := func(sh *shard) *worker {
		// startWorker's --database-url is the shared test server's; the
		// later flag names the shard's own.
		return startWorker(t, schema, sh.name, "--database-url", sh.c.url(), "--shard", sh.name, "--task", task,
			"--cycle", cycle.String(), "--trigger-offset", offset.String(), "--accounts-schema", "public", "--table", "accounts",
			"--first-cycle", "next", "--workers", "10")
	}
	startShard(s1)
	startShard(s2)
	// nextStart is the first cycle start at least lead from now, and not
	// before notBefore.
	nextStart := func(lead time.Duration, notBefore time.Time) time.Time {
		at := c0
		for at.Before(time.Now().Add(lead)) || at.Before(notBefore) {
			at = at.Add(cycle)
		}
		return at
	}
	const lead = riverslot.ShardMapLeadMin + 5*time.Second // margin for the write on each shard

	// 1-2. A new server, prepared and joined at a cycle start ahead.
	s3 := prepare("s3", nil)
	fleet := []*shard{s1, s2, s3}
	t1 := nextStart(lead, time.Time{})
	code, stdout, stderr = cmd("add", fleet, "--at", t1.Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v2 s1:0-32767 s2:32768-65535 on 3 shards, for the cycles from "+t1.Format(time.RFC3339))
	require.Contains(t, stdout, "joined: s3")

	// s1 and s2 make their first cycle: from here the move is checked
	// against the plan of the cycle in their ledgers.
	ledger := pgx.Identifier{schema, "riverslot_ledger"}.Sanitize()
	firstCycle := func(sh *shard) (time.Time, bool) {
		var first *time.Time
		require.NoError(t, sh.pool.QueryRow(ctx, "SELECT min(cycle_start) FROM "+ledger+" WHERE task = $1 AND slot = -1", task).Scan(&first))
		if first == nil {
			return time.Time{}, false
		}
		return first.UTC(), true
	}
	waitFor(t, time.Until(c0)+90*time.Second, "the first cycle of s1 and s2", func() bool {
		_, ok1 := firstCycle(s1)
		_, ok2 := firstCycle(s2)
		return ok1 && ok2
	})

	// 3. Copy the range's accounts, then move it at a cycle start ahead.
	const moveLo, moveHi = 16384, 32767
	code, stdout, stderr = cmd("copy-accounts", []*shard{s1, s3}, "--range", fmt.Sprintf("%d-%d", moveLo, moveHi), "--from", "s1", "--to", "s3",
		"--table", "accounts", "--accounts-schema", "public")
	require.Equal(t, 0, code, stderr)
	moving := owned(v3, "s3")
	require.Contains(t, stdout, fmt.Sprintf("%d copied to shard s3, 0 already there", len(moving)))
	rows, err := s3.pool.Query(ctx, "SELECT id FROM public.accounts")
	require.NoError(t, err)
	copied, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.ElementsMatch(t, moving, copied, "s3 holds exactly the accounts of the range")

	t2 := nextStart(lead, t1.Add(cycle))
	code, stdout, stderr = cmd("move", fleet, "--range", fmt.Sprintf("%d-%d", moveLo, moveHi), "--to", "s3", "--at", t2.Format(time.RFC3339))
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "shard map v3 ")
	require.Contains(t, stdout, "for the cycles from "+t2.Format(time.RFC3339))
	startShard(s3)

	// 4. A change half-written on purpose: s3 (losing buckets) is written
	// first, s1 refuses its write, s3 refuses the undo; s2 is never
	// written.
	// T3 leaves the failed move, show and repair (four processes, slow on
	// a busy machine) half a minute beyond the lead: the cycles between
	// follow v3.
	t3 := t2.Add(cycle)
	for time.Until(t3) < lead+30*time.Second {
		t3 = t3.Add(cycle)
	}
	fault := func(sh *shard, op string) {
		_, err := sh.pool.Exec(ctx, `CREATE FUNCTION river.refuse_map_change() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'shard map % refused on purpose by the test', TG_OP; END $$`)
		require.NoError(t, err)
		_, err = sh.pool.Exec(ctx, "CREATE TRIGGER refuse_map_change BEFORE "+op+" ON river.riverslot_shards FOR EACH ROW EXECUTE FUNCTION river.refuse_map_change()")
		require.NoError(t, err)
	}
	fault(s1, "INSERT")
	fault(s3, "DELETE")
	code, _, stderr = cmd("move", fleet, "--range", "24576-32767", "--to", "s1", "--at", t3.Format(time.RFC3339))
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, `shard "s1"`)
	require.Contains(t, stderr, "INSERT refused on purpose")
	require.Contains(t, stderr, `undoing it on shard "s3"`)
	require.Contains(t, stderr, "[s3] hold version 4")
	code, _, stderr = cmd("show", fleet)
	require.Equal(t, 1, code, "show exits 1 while the maps disagree")
	require.Contains(t, stderr, "s3: v4 ")
	require.Contains(t, stderr, "s1, s2: v3 ")
	require.Contains(t, stderr, "riverslot shards repair")
	// The cause is fixed; the repair completes the change from its start.
	for _, sh := range []*shard{s1, s3} {
		_, err := sh.pool.Exec(ctx, "DROP TRIGGER refuse_map_change ON river.riverslot_shards")
		require.NoError(t, err)
	}
	code, stdout, stderr = cmd("repair", fleet)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "repaired: shard map v5 ")
	require.Contains(t, stdout, "on 3 shards, for the cycles from "+t3.Format(time.RFC3339))
	for _, sh := range fleet {
		m, ok, err := riverslot.ShardMapOf(ctx, riverslot.Shard{Name: sh.name, Pool: sh.pool, Schema: schema}, task)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 5, m.Version, sh.name)
		require.True(t, m.EffectiveFrom.Equal(t3), "%s: v5 from %s", sh.name, m.EffectiveFrom)
		for b := range 65536 {
			require.Equal(t, v5.Owner(b), m.Owner(b), "%s's v5: bucket %d", sh.name, b)
		}
	}
	code, _, stderr = cmd("show", fleet)
	require.Equal(t, 0, code, stderr)
	t.Logf("C0 %s, T1 (s3 joins) %s, T2 (move) %s, T3 (repaired change) %s; the commands done %s before T3",
		c0.Format(time.TimeOnly), t1.Format(time.TimeOnly), t2.Format(time.TimeOnly), t3.Format(time.TimeOnly), time.Until(t3).Round(time.Second))

	// Every cycle up to T3's, to its last sync on every shard.
	end := t3.Add(cycle)
	jobs := pgx.Identifier{schema, "river_job"}.Sanitize()
	waitFor(t, time.Until(end)+60*time.Second, "T3's cycle's fan-outs and syncs on every shard", func() bool {
		if time.Now().Before(end) {
			return false
		}
		for _, sh := range fleet {
			var open int64
			require.NoError(t, sh.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+ledger+" WHERE task = $1 AND slot >= 0 AND cycle_start <= $2 AND finished_at IS NULL)"+
				" + (SELECT count(*) FROM "+jobs+" WHERE state NOT IN ('completed', 'cancelled', 'discarded') AND (args->>'cycle_start')::timestamptz <= $2)", task, t3).Scan(&open))
			if open > 0 {
				return false
			}
		}
		return true
	})

	// The map each cycle follows, by the commands: v1 (v2 from T1, the
	// same ranges), v3 from T2, v5 from T3.
	mapAt := func(cs time.Time) (riverslot.ShardMap, int64) {
		switch {
		case !cs.Before(t3):
			return v5, 5
		case !cs.Before(t2):
			return v3, 3
		case !cs.Before(t1):
			return v1, 2
		}
		return v1, 1
	}
	first, _ := firstCycle(s1)
	if f2, _ := firstCycle(s2); f2.After(first) {
		first = f2
	}
	require.True(t, first.Before(t2), "s1 and s2 made a cycle before the move (first %s)", first)
	var cycles []time.Time
	for cs := first; !cs.After(t3); cs = cs.Add(cycle) {
		cycles = append(cycles, cs)
	}

	// Each shard's ledger: the version each cycle followed, and exactly
	// the slots that map gives the shard.
	for _, sh := range fleet {
		type made struct {
			version *int64
			slots   []int
		}
		byCycle := map[time.Time]*made{}
		rows, err := sh.pool.Query(ctx, "SELECT cycle_start, slot, shard, shard_version FROM "+ledger+" WHERE task = $1 AND cycle_start <= $2", task, t3)
		require.NoError(t, err)
		var (
			cs      time.Time
			slot    int
			name    *string
			version *int64
		)
		_, err = pgx.ForEachRow(rows, []any{&cs, &slot, &name, &version}, func() error {
			m := byCycle[cs.UTC()]
			if m == nil {
				m = &made{}
				byCycle[cs.UTC()] = m
			}
			if slot < 0 {
				require.NotNil(t, name, "%s: cycle %s records its shard", sh.name, cs)
				require.Equal(t, sh.name, *name)
				m.version = version
			} else {
				m.slots = append(m.slots, slot)
			}
			return nil
		})
		require.NoError(t, err)
		for _, cs := range cycles {
			m, version := mapAt(cs)
			var want []int
			for slot := range 8 {
				if m.Owner(slot*width) == sh.name {
					want = append(want, slot)
				}
			}
			got := byCycle[cs]
			if sh == s3 && cs.Before(t2) {
				// s3 joined at T1 with no buckets: a cycle its worker made
				// then claims none of its slots.
				if got != nil {
					require.Empty(t, got.slots, "s3 claims no slot before the move, cycle %s", cs)
					require.NotNil(t, got.version)
					require.EqualValues(t, 2, *got.version, "s3's cycle %s", cs)
				}
				continue
			}
			require.NotNil(t, got, "%s made cycle %s", sh.name, cs)
			require.NotNil(t, got.version, "%s's cycle %s follows a map", sh.name, cs)
			require.Equal(t, version, *got.version, "%s's cycle %s follows v%d", sh.name, cs, version)
			sort.Ints(got.slots)
			require.Equal(t, want, got.slots, "%s's slots in cycle %s", sh.name, cs)
		}
	}

	// Every Sync call, and every sync job, by shard.
	type call struct {
		shard string
		cycle time.Time
		at    time.Time
		job   int64
	}
	type key struct {
		id    uuid.UUID
		cycle time.Time
	}
	calls := map[uuid.UUID][]call{}
	queued := map[key][]string{} // shards holding a sync job of the account in the cycle
	skipped := map[key]string{}  // the reason a job on the owner recorded for not calling Sync
	for _, sh := range fleet {
		rows, err := sh.pool.Query(ctx, "SELECT account_id, cycle_start, synced_at, job_id FROM "+pgx.Identifier{schema, "synced"}.Sanitize()+
			" WHERE task = $1 AND cycle_start <= $2", task, t3)
		require.NoError(t, err)
		var (
			id     uuid.UUID
			cs, at time.Time
			job    int64
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &cs, &at, &job}, func() error {
			calls[id] = append(calls[id], call{sh.name, cs.UTC(), at, job})
			return nil
		})
		require.NoError(t, err)
		rows, err = sh.pool.Query(ctx, "SELECT (args->>'account_id')::uuid, (args->>'cycle_start')::timestamptz, coalesce(metadata->'output'->>$4, '') FROM "+jobs+
			" WHERE kind = $1 AND args->>'task' = $2 AND (args->>'cycle_start')::timestamptz <= $3", syncjob.Kind, task, t3, syncjob.OutputSkipped)
		require.NoError(t, err)
		var reason string
		_, err = pgx.ForEachRow(rows, []any{&id, &cs, &reason}, func() error {
			k := key{id, cs.UTC()}
			queued[k] = append(queued[k], sh.name)
			if reason != "" {
				skipped[k] = sh.name + ": " + reason
			}
			return nil
		})
		require.NoError(t, err)
	}
	var stale, retried, movedGaps int
	for _, id := range all {
		byCycle := map[time.Time][]call{}
		for _, c := range calls[id] {
			byCycle[c.cycle] = append(byCycle[c.cycle], c)
		}
		for _, cs := range cycles {
			m, _ := mapAt(cs)
			want := m.OwnerOf(id)
			k := key{id, cs}
			for _, on := range queued[k] {
				require.Equal(t, want, on, "account %s (bucket %d) has a sync job of cycle %s on %s; its shard then is %s", id, bucketOf(id), cs.Format(time.TimeOnly), on, want)
			}
			got := byCycle[cs]
			var jobIDs []int64
			for _, c := range got {
				require.Equal(t, want, c.shard, "account %s (bucket %d) synced in cycle %s by %s; its shard then is %s", id, bucketOf(id), cs.Format(time.TimeOnly), c.shard, want)
				if !slices.Contains(jobIDs, c.job) {
					jobIDs = append(jobIDs, c.job)
				}
			}
			retried += len(got) - len(jobIDs) // a job's retry (River runs a job at least once)
			if len(jobIDs) == 0 && skipped[k] == want+": "+syncjob.SkippedStale {
				stale++
				continue
			}
			require.Len(t, jobIDs, 1, "account %s (bucket %d, shard %s) synced once in cycle %s (skipped: %q)", id, bucketOf(id), want, cs.Format(time.TimeOnly), skipped[k])
		}
		// Never twice less than half a cycle apart; in two cycles in a
		// row (across a move too: the plan is the same on every shard),
		// a cycle apart: each call at most half a cycle (or, when late,
		// LateGrace, a slot, past its scheduled time) after its regular
		// time.
		list := slices.Clone(calls[id])
		sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
		for i := 1; i < len(list); i++ {
			prev, next := list[i-1], list[i]
			if prev.job == next.job && prev.shard == next.shard {
				continue // a retry, counted above
			}
			gap := next.at.Sub(prev.at)
			require.GreaterOrEqual(t, gap, cycle/2, "account %s synced %s apart (%s in cycle %s, %s in cycle %s)", id, gap, prev.shard, prev.cycle.Format(time.TimeOnly), next.shard, next.cycle.Format(time.TimeOnly))
			if next.cycle.Sub(prev.cycle) == cycle {
				require.LessOrEqual(t, gap, cycle*3/2+slotLen, "account %s: syncs of cycles in a row %s apart", id, gap)
				if prev.shard != next.shard {
					movedGaps++
				}
			}
		}
	}
	t.Logf("%d accounts over 3 shards, %d cycles (%s to %s): %d account-cycles skipped as stale, %d Sync calls retried; %d syncs in a row across a move, each a cycle apart",
		len(all), len(cycles), cycles[0].Format(time.TimeOnly), t3.Format(time.TimeOnly), stale, retried, movedGaps)
	// The moved accounts crossed T2 (s1 to s3, both halves) and T3 (s3
	// to s1, the upper half).
	require.Positive(t, movedGaps, "syncs in a row by two shards, across a move")
}
