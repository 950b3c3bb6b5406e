package taskspec_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/upstream"
)

// TestSQL runs the queries BuildSQL, PinRead, PinOfSQL and PinsDDL build
// against Postgres, on a table whose names need quoting, with accounts
// whose bucket (the UUID's last byte) is chosen: the expected rows are
// read off the fixture, not computed with the package's own helpers.
func TestSQL(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	const table, idColumn = `Acc"ounts`, "Account ID"
	_, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, table}.Sanitize()+" ("+pgx.Identifier{idColumn}.Sanitize()+
		" uuid PRIMARY KEY, active boolean NOT NULL, w double precision)")
	require.NoError(t, err)

	var (
		a1 = uuid.MustParse("00000000-0000-4000-8000-000000000103") // bucket 3
		a2 = uuid.MustParse("10000000-0000-4000-8000-000000000003") // bucket 3, after a1
		a3 = uuid.MustParse("00000000-0000-4000-8000-000000000004") // bucket 4
		a4 = uuid.MustParse("00000000-0000-4000-8000-000000000104") // bucket 4, inactive
		a5 = uuid.MustParse("00000000-0000-4000-8000-000000000007") // bucket 7
		a6 = uuid.MustParse("00000000-0000-4000-8000-0000000000c8") // bucket 200
	)
	for _, a := range []struct {
		id     uuid.UUID
		active bool
		w      *float64
	}{
		{a1, true, ptr(2.5)}, {a2, true, nil}, {a3, true, ptr(-1.0)}, {a4, false, ptr(100.0)}, {a5, true, ptr(math.NaN())}, {a6, true, ptr(10.0)},
	} {
		_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, table}.Sanitize()+" VALUES ($1, $2, $3)", a.id, a.active, a.w)
		require.NoError(t, err)
	}

	s := &taskspec.Spec{Name: "t", Schema: schema, Table: table, IDColumn: idColumn, Filter: "active", Weight: "w"}
	s.BuildSQL()
	require.Equal(t, pgx.Identifier{schema, table}.Sanitize(), s.QualifiedTable)
	require.Equal(t, `"Account ID"`, s.QuotedID)
	require.Equal(t, " AND (active)", s.FilterClause)

	t.Run("Pages", func(t *testing.T) {
		// Buckets 3 to 7, two at a time, in (bucket, id) order; the
		// inactive a4 fails the filter.
		require.Equal(t, []idBucket{{a1, 3}, {a2, 3}}, pageRows(t, s.SQL.FirstPage, 3, 7, 2))
		require.Equal(t, []idBucket{{a3, 4}, {a5, 7}}, pageRows(t, s.SQL.NextPage, 3, 7, 2, 3, a2))
		require.Empty(t, pageRows(t, s.SQL.NextPage, 3, 7, 2, 7, a5))

		// With Upstream, the page carries each account's key as text:
		// NULL is the default upstream (""), a long value is cut to at
		// most upstream.MaxKeyLen bytes, on a character boundary: byte
		// 128 falls inside an "é" here, which a plain byte cut would
		// split, and PostgreSQL would then refuse the whole page.
		withKey := *s
		withKey.Upstream = "CASE WHEN w IS NULL THEN NULL WHEN w > 5 THEN 'a' || repeat('é', 100) ELSE 'bank-' || w::text END"
		withKey.BuildSQL()
		rows, keys := pageRowsKeys(t, withKey.SQL.FirstPage, 3, 7, 10)
		require.Equal(t, []idBucket{{a1, 3}, {a2, 3}, {a3, 4}, {a5, 7}}, rows)
		require.Equal(t, []string{"bank-2.5", "", "bank--1", "a" + strings.Repeat("é", upstream.MaxKeyLen/2-1)}, keys)
		require.Equal(t, []idBucket{{a6, 200}}, pageRows(t, s.SQL.FirstPage, 200, 255, 10))
		require.Empty(t, pageRows(t, s.SQL.FirstPage, 8, 199, 10))
	})

	t.Run("Exists", func(t *testing.T) {
		for id, want := range map[uuid.UUID]bool{a1: true, a6: true, a4: false, uuid.New(): false} {
			var got bool
			require.NoError(t, pool.QueryRow(ctx, s.SQL.Exists, id).Scan(&got))
			require.Equal(t, want, got, "account %s", id)
		}
	})

	t.Run("Weights", func(t *testing.T) {
		// NULL, negative and NaN weights count as 0; a4 fails the filter.
		rows, err := pool.Query(ctx, s.Pins.SlotWeights)
		require.NoError(t, err)
		got := map[int][2]float64{}
		for rows.Next() {
			var bucket int
			var sum, sumSq float64
			require.NoError(t, rows.Scan(&bucket, &sum, &sumSq))
			got[bucket] = [2]float64{sum, sumSq}
		}
		require.NoError(t, rows.Err())
		require.Equal(t, map[int][2]float64{3: {2.5, 6.25}, 4: {0, 0}, 7: {0, 0}, 200: {10, 100}}, got)

		require.Equal(t, []idBucketWeight{{a6, 200, 10}, {a1, 3, 2.5}}, weightRows(t, s.Pins.Candidates, 2))
		require.ElementsMatch(t, []idBucketWeight{{a1, 3, 2.5}, {a2, 3, 0}, {a3, 4, 0}}, weightRows(t, s.Pins.RangeAccounts, 3, 4))
	})

	t.Run("Pins", func(t *testing.T) {
		for _, ddl := range taskspec.PinsDDL(schema) {
			_, err := pool.Exec(ctx, ddl)
			require.NoError(t, err)
		}
		c1 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
		c2 := c1.Add(24 * time.Hour)
		cycle := []any{"t", "p", c1}

		var claimed bool
		require.NoError(t, pool.QueryRow(ctx, s.Pins.Claim, cycle...).Scan(&claimed))
		require.True(t, claimed)
		require.ErrorIs(t, pool.QueryRow(ctx, s.Pins.Claim, cycle...).Scan(&claimed), pgx.ErrNoRows, "a second claim of the cycle returns no row")
		_, err := pool.Exec(ctx, s.Pins.Record, "t", "p", c1, 7.5, 4)
		require.NoError(t, err)
		var threshold float64
		var pinned int
		require.NoError(t, pool.QueryRow(ctx, "SELECT threshold, pinned FROM "+pgx.Identifier{schema, taskspec.PinCyclesTable}.Sanitize()).Scan(&threshold, &pinned))
		require.Equal(t, 7.5, threshold)
		require.Equal(t, 4, pinned)

		pins := pgx.Identifier{schema, taskspec.PinsTable}.Sanitize()
		for _, p := range []struct {
			id           uuid.UUID
			bucket, slot int
		}{{a1, 3, 5}, {a6, 200, 5}, {a3, 4, 1}, {a4, 4, 5}} {
			_, err := pool.Exec(ctx, "INSERT INTO "+pins+" VALUES ('t', 'p', $1, $2, $3, $4, 1)", c1, p.id, p.bucket, p.slot)
			require.NoError(t, err)
		}
		// A pin of another task, plan and cycle, which no query may see.
		_, err = pool.Exec(ctx, "INSERT INTO "+pins+" VALUES ('u', 'p', $1, $2, 3, 5, 1), ('t', 'q', $1, $2, 3, 5, 1)", c1, a2)
		require.NoError(t, err)

		read := s.PinRead(schema)
		// The pins of the page (3, a1) to (4, ffff...), filter or not.
		last := uuid.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		require.ElementsMatch(t, []uuid.UUID{a1, a3, a4}, idRows(t, read.PageRange, "t", "p", c1, 3, a1, 4, last))
		require.ElementsMatch(t, []uuid.UUID{a3, a4}, idRows(t, read.PageRange, "t", "p", c1, 3, a2, 4, last), "a page after a1 skips a1")
		// The accounts pinned to slot 5 that exist and match the filter,
		// by id, one page at a time.
		// (a6 ends in 00c8, a1 in 0103: a6 comes first.)
		require.Equal(t, []idBucket{{a6, 200}, {a1, 3}}, pageRows(t, read.PinnedFirstPage, "t", "p", c1, 5, 10))
		require.Equal(t, []idBucket{{a6, 200}}, pageRows(t, read.PinnedFirstPage, "t", "p", c1, 5, 1))
		require.Equal(t, []idBucket{{a1, 3}}, pageRows(t, read.PinnedNextPage, "t", "p", c1, 5, 10, a6))
		require.Empty(t, pageRows(t, read.PinnedFirstPage, "t", "p", c2, 5, 10), "no pins in another cycle")
		// The slots of some accounts: only the pinned ones have a row.
		rows, err := pool.Query(ctx, read.Slots, "t", "p", c1, []uuid.UUID{a1, a3, a5})
		require.NoError(t, err)
		slots, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID   uuid.UUID
			Slot int
		}])
		require.NoError(t, err)
		require.ElementsMatch(t, []struct {
			ID   uuid.UUID
			Slot int
		}{{a1, 5}, {a3, 1}}, slots)

		// The next cycle's bootstrap reads c1's pins with today's weights,
		// only of accounts that exist and match the filter.
		rows, err = pool.Query(ctx, s.Pins.Previous, "t", "p", c2)
		require.NoError(t, err)
		prev, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID     uuid.UUID
			Bucket int
			W      float64
			Slot   int
		}])
		require.NoError(t, err)
		require.ElementsMatch(t, []struct {
			ID     uuid.UUID
			Bucket int
			W      float64
			Slot   int
		}{{a1, 3, 2.5, 5}, {a3, 4, 0, 1}, {a6, 200, 10, 5}}, prev)

		// One account's pin in the latest pinned cycle: c1, slot 5 ...
		var start time.Time
		var slot *int
		var weight *float64
		require.NoError(t, pool.QueryRow(ctx, taskspec.PinOfSQL(schema), "t", "p", a1).Scan(&start, &slot, &weight))
		require.True(t, c1.Equal(start))
		require.Equal(t, ptr(5), slot)
		require.Equal(t, ptr(1.0), weight)
		// ... and once c2 is pinned without it: c2, not pinned.
		require.NoError(t, pool.QueryRow(ctx, s.Pins.Claim, "t", "p", c2).Scan(&claimed))
		require.NoError(t, pool.QueryRow(ctx, taskspec.PinOfSQL(schema), "t", "p", a1).Scan(&start, &slot, &weight))
		require.True(t, c2.Equal(start))
		require.Nil(t, slot)
		require.Nil(t, weight)
		// No pinned cycle of the task: no row.
		require.ErrorIs(t, pool.QueryRow(ctx, taskspec.PinOfSQL(schema), "v", "p", a1).Scan(&start, &slot, &weight), pgx.ErrNoRows)
	})
}

type idBucket struct {
	ID     uuid.UUID
	Bucket int
}

type idBucketWeight struct {
	ID     uuid.UUID
	Bucket int
	W      float64
}

func ptr[T any](v T) *T { return &v }

// pageRows returns a page query's (id, bucket) rows; their upstream keys
// (the third column) must all be want ("" without Task.Upstream).
func pageRows(t *testing.T, sql string, args ...any) []idBucket {
	t.Helper()
	rows, keys := pageRowsKeys(t, sql, args...)
	for _, k := range keys {
		require.Empty(t, k, "no Upstream: every account on the default upstream")
	}
	return rows
}

func pageRowsKeys(t *testing.T, sql string, args ...any) ([]idBucket, []string) {
	t.Helper()
	rows, err := riverslottest.Pool(t).Query(context.Background(), sql, args...)
	require.NoError(t, err)
	type row struct {
		ID       uuid.UUID
		Bucket   int
		Upstream string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	var (
		out  []idBucket
		keys []string
	)
	for _, r := range got {
		out = append(out, idBucket{r.ID, r.Bucket})
		keys = append(keys, r.Upstream)
	}
	return out, keys
}

func weightRows(t *testing.T, sql string, args ...any) []idBucketWeight {
	t.Helper()
	rows, err := riverslottest.Pool(t).Query(context.Background(), sql, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idBucketWeight])
	require.NoError(t, err)
	return out
}

func idRows(t *testing.T, sql string, args ...any) []uuid.UUID {
	t.Helper()
	rows, err := riverslottest.Pool(t).Query(context.Background(), sql, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return out
}
