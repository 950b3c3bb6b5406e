package shardscmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/cmd/riverslot/internal/inspect"
	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

// CopyBatchDefault is how many rows CopyAccounts copies per transaction
// unless told; CopyBatchMax is the most it takes.
const (
	CopyBatchDefault = 1000
	CopyBatchMax     = 100_000
)

// CopyConfig is riverslot shards copy-accounts: the accounts of buckets
// Lo-Hi copied from one shard's accounts table to another's.
type CopyConfig struct {
	// Shards are the task's shards; From and To name two of them.
	Shards []riverslot.Shard
	// Task is the task, whose latest map the report compares the range
	// with.
	Task string
	// From and To are the shard copied from and the shard copied to.
	From, To string
	// Lo and Hi are the range of two-byte buckets, inclusive.
	Lo, Hi int
	// Schema and Table name the accounts table, alike on both shards,
	// with a uuid column IDColumn (a primary key or unique on To).
	Schema, Table string
	// IDColumn is the accounts' uuid column, the task's IDColumn.
	// Defaults to "id".
	IDColumn string
	// Batch is how many rows each transaction on To copies. Defaults to
	// CopyBatchDefault.
	Batch int
	// Progress gets a line per batch (stderr). Defaults to none.
	Progress io.Writer
}

// CopyResult is what CopyAccounts did.
type CopyResult struct {
	// InRange is the rows of the range on From when the copy started.
	InRange int64
	// Read is the rows read from From, Copied those inserted on To and
	// Present those To held already (skipped).
	Read, Copied, Present int64
	// Batches is the transactions committed on To.
	Batches int
}

// column is one column copied: its name and the type it has on the
// destination, as a quoted SQL type name.
type column struct{ name, typ string }

// copyTemp is the temporary table of a batch's rows, as text, on the
// destination's connection: its rows go at each commit.
const copyTemp = "riverslot_copy_accounts"

// CopyAccounts copies the rows of the accounts whose two-byte bucket is in
// c.Lo-c.Hi from shard c.From's accounts table to c.To's, every column the
// two tables share by name (but those To generates), and prints a summary
// on w. It reads the range in (bucket, id) order, the bucket index's, a
// batch at a time, and inserts each batch in its own transaction on To,
// with INSERT ... ON CONFLICT (id) DO NOTHING: a row To holds already
// (copied by an earlier run, or written there by the app) is skipped and
// left as it is. So a run stopped part-way keeps the batches it committed,
// and running it again reads the range from its start, skipping those:
// every run ends with To holding every row of the range From held.
//
// A table missing on either shard, one without a uuid column id, or a
// destination whose id is not unique is an *inspect.InputError, found
// before anything is copied.
func CopyAccounts(ctx context.Context, c *CopyConfig, w io.Writer) (CopyResult, error) {
	var res CopyResult
	batch := c.Batch
	if batch == 0 {
		batch = CopyBatchDefault
	}
	progress := c.Progress
	if progress == nil {
		progress = io.Discard
	}
	switch {
	case c.Lo < 0 || c.Hi >= slotplan.BucketsTwoByte || c.Lo > c.Hi:
		return res, inputErr("--range %d-%d must be within 0-%d, low to high", c.Lo, c.Hi, slotplan.BucketsTwoByte-1)
	case c.From == c.To:
		return res, inputErr("--from and --to are both %q: copy from one shard to another", c.From)
	case batch < 1 || batch > CopyBatchMax:
		return res, inputErr("--batch must be 1-%d, got %d", CopyBatchMax, batch)
	}
	if c.IDColumn == "" {
		c.IDColumn = "id"
	}
	from, err := shardNamed(c.Shards, "--from", c.From)
	if err != nil {
		return res, err
	}
	to, err := shardNamed(c.Shards, "--to", c.To)
	if err != nil {
		return res, err
	}
	table := sqlbucket.QualifiedTable(c.Schema, c.Table)
	srcCols, err := tableColumns(ctx, from, c.Schema, c.Table, c.IDColumn)
	if err != nil {
		return res, err
	}
	dstCols, err := tableColumns(ctx, to, c.Schema, c.Table, c.IDColumn)
	if err != nil {
		return res, err
	}
	var cols []column
	overriding := false
	for _, sc := range srcCols {
		i := slices.IndexFunc(dstCols, func(d tableColumn) bool { return d.name == sc.name })
		if i < 0 || dstCols[i].generated {
			continue
		}
		cols = append(cols, column{name: sc.name, typ: dstCols[i].typ})
		overriding = overriding || dstCols[i].identityAlways
	}
	if err := uniqueID(ctx, to, table, c.IDColumn); err != nil {
		return res, err
	}

	fmt.Fprintf(w, "copying buckets %d-%d of %s from shard %s to shard %s: columns %s\n", c.Lo, c.Hi, table, c.From, c.To, columnNames(cols))
	note, err := mapNote(ctx, c)
	if err != nil {
		return res, err
	}
	if note != "" {
		fmt.Fprintln(w, note)
	}
	if valid, _, err := sqlbucket.IndexValid(ctx, from.Pool, c.Schema, c.Table, sqlbucket.IndexNameFor(c.Table, c.IDColumn, slotplan.BucketsTwoByte)); err == nil && !valid {
		fmt.Fprintf(progress, "shard %s has no valid two-byte bucket index on %s: each batch may read the whole table (riverslot migrate --table %s --buckets 65536 creates it)\n", c.From, table, c.Table)
	}

	expr := sqlbucket.ExprFor(c.IDColumn, slotplan.BucketsTwoByte)
	idCol := pgx.Identifier{c.IDColumn}.Sanitize()
	if err := from.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+sqlbucket.SlotPredicateFor(c.IDColumn, slotplan.BucketsTwoByte, 1, 2), c.Lo, c.Hi).Scan(&res.InRange); err != nil {
		return res, fmt.Errorf("shard %q: error counting the range's rows: %w", c.From, err)
	}

	conn, err := to.Pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("shard %q: %w", c.To, err)
	}
	defer conn.Release()
	temp := make([]string, len(cols))
	for i := range cols {
		temp[i] = pgx.Identifier{fmt.Sprintf("c%d", i)}.Sanitize() + " text"
	}
	// Dropped first: a connection of the pool may hold one from a run
	// with other columns.
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS pg_temp."+pgx.Identifier{copyTemp}.Sanitize()); err != nil {
		return res, fmt.Errorf("shard %q: %w", c.To, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TEMPORARY TABLE "+pgx.Identifier{copyTemp}.Sanitize()+" ("+strings.Join(temp, ", ")+") ON COMMIT DELETE ROWS"); err != nil {
		return res, fmt.Errorf("shard %q: error creating the copy's temporary table: %w", c.To, err)
	}
	defer func() {
		// The connection goes back to the pool: leave no table behind.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS pg_temp."+pgx.Identifier{copyTemp}.Sanitize())
	}()

	selectList := make([]string, len(cols))
	insertCols := make([]string, len(cols))
	casts := make([]string, len(cols))
	for i, col := range cols {
		q := pgx.Identifier{col.name}.Sanitize()
		selectList[i], insertCols[i] = q+"::text", q
		casts[i] = pgx.Identifier{fmt.Sprintf("c%d", i)}.Sanitize() + "::" + col.typ
	}
	read := "SELECT " + expr + ", " + idCol + "::text, " + strings.Join(selectList, ", ") + " FROM " + table +
		" WHERE " + sqlbucket.SlotPredicateFor(c.IDColumn, slotplan.BucketsTwoByte, 1, 2) +
		" AND (" + expr + ", " + idCol + ") > ($3, $4::uuid) ORDER BY " + expr + ", " + idCol + " LIMIT $5"
	override := ""
	if overriding {
		override = " OVERRIDING SYSTEM VALUE"
	}
	insert := "INSERT INTO " + table + " (" + strings.Join(insertCols, ", ") + ")" + override +
		" SELECT " + strings.Join(casts, ", ") + " FROM " + pgx.Identifier{copyTemp}.Sanitize() + " ON CONFLICT (" + idCol + ") DO NOTHING"

	afterBucket, afterID := c.Lo-1, "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := from.Pool.Query(ctx, read, c.Lo, c.Hi, afterBucket, afterID, batch)
		if err != nil {
			return res, fmt.Errorf("shard %q: error reading accounts after bucket %d, id %s: %w", c.From, afterBucket, afterID, err)
		}
		var values [][]any
		for rows.Next() {
			texts := make([]*string, len(cols))
			dest := []any{&afterBucket, &afterID}
			for i := range texts {
				dest = append(dest, &texts[i])
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return res, fmt.Errorf("shard %q: error reading accounts: %w", c.From, err)
			}
			row := make([]any, len(cols))
			for i, t := range texts {
				row[i] = t
			}
			values = append(values, row)
		}
		if err := rows.Err(); err != nil {
			return res, fmt.Errorf("shard %q: error reading accounts: %w", c.From, err)
		}
		if len(values) == 0 {
			break
		}
		copied, err := copyBatch(ctx, conn.Conn(), values, len(cols), insert)
		if err != nil {
			return res, fmt.Errorf("shard %q: error copying a batch of %d accounts (up to bucket %d, id %s; %d copied before it; run the same command again to go on): %w",
				c.To, len(values), afterBucket, afterID, res.Copied, err)
		}
		res.Batches++
		res.Read += int64(len(values))
		res.Copied += copied
		res.Present += int64(len(values)) - copied
		fmt.Fprintf(progress, "batch %d: %d rows read, %d copied, %d present; %d of %d, up to bucket %d\n",
			res.Batches, len(values), copied, int64(len(values))-copied, res.Read, res.InRange, afterBucket)
		if len(values) < batch {
			break
		}
	}
	fmt.Fprintf(w, "done: %d rows of buckets %d-%d read from shard %s (%d there at the start), %d copied to shard %s, %d already there (skipped), in %d batches\n",
		res.Read, c.Lo, c.Hi, c.From, res.InRange, res.Copied, c.To, res.Present, res.Batches)
	return res, nil
}

// copyBatch inserts values into the destination in one transaction,
// through the temporary table, and returns how many rows it inserted.
func copyBatch(ctx context.Context, conn *pgx.Conn, values [][]any, n int, insert string) (int64, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{copyTemp}, names, pgx.CopyFromRows(values)); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, insert)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), tx.Commit(ctx)
}

// shardNamed returns the shard of c's shards named name (flag's value).
func shardNamed(shards []riverslot.Shard, flag, name string) (riverslot.Shard, error) {
	i := slices.IndexFunc(shards, func(s riverslot.Shard) bool { return s.Name == name })
	if i < 0 {
		names := make([]string, len(shards))
		for j, s := range shards {
			names[j] = s.Name
		}
		return riverslot.Shard{}, inputErr("%s %s: no such shard among --shard (%s); name one of them, or give its --shard NAME=URL", flag, name, strings.Join(names, ", "))
	}
	return shards[i], nil
}

// tableColumn is a column of the accounts table on one shard.
type tableColumn struct {
	name, typ                 string
	generated, identityAlways bool
}

// tableColumns reads the accounts table's columns on shard s (from
// information_schema), refusing a missing table or one without a uuid
// column id.
func tableColumns(ctx context.Context, s riverslot.Shard, schema, table, idColumn string) ([]tableColumn, error) {
	rows, err := s.Pool.Query(ctx, `SELECT column_name, udt_schema, udt_name, is_generated = 'ALWAYS', coalesce(identity_generation = 'ALWAYS', false)
FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("shard %q: error reading the columns of %s: %w", s.Name, sqlbucket.QualifiedTable(schema, table), err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tableColumn, error) {
		var (
			c                 tableColumn
			udtSchema, udtTyp string
		)
		err := r.Scan(&c.name, &udtSchema, &udtTyp, &c.generated, &c.identityAlways)
		c.typ = pgx.Identifier{udtSchema, udtTyp}.Sanitize()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("shard %q: error reading the columns of %s: %w", s.Name, sqlbucket.QualifiedTable(schema, table), err)
	}
	if len(cols) == 0 {
		return nil, inputErr("--table: shard %s has no table %s (or none this user may read); give the accounts table with --table and --accounts-schema, or create it there first (riverslot migrate --table creates its index, not the table)",
			s.Name, sqlbucket.QualifiedTable(schema, table))
	}
	i := slices.IndexFunc(cols, func(c tableColumn) bool { return c.name == idColumn })
	if i < 0 || cols[i].typ != `"pg_catalog"."uuid"` {
		return nil, inputErr("--table: %s on shard %s has no uuid column %q; the accounts table needs one (the account's id, whose last two bytes are its bucket): name it with --id-column",
			sqlbucket.QualifiedTable(schema, table), s.Name, idColumn)
	}
	return cols, nil
}

// uniqueID refuses a destination table whose id column is not a primary
// key or unique (ON CONFLICT needs one).
func uniqueID(ctx context.Context, s riverslot.Shard, table, idColumn string) error {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL AND a.attname = $2)`, table, idColumn).Scan(&ok)
	if err != nil {
		return fmt.Errorf("shard %q: error reading the indexes of %s: %w", s.Name, table, err)
	}
	if !ok {
		return inputErr("--table: %s on shard %s has no primary key or unique index on %q; the copy skips the rows present by it (ON CONFLICT): add one (ALTER TABLE ... ADD PRIMARY KEY (%s))", table, s.Name, idColumn, idColumn)
	}
	return nil
}

func columnNames(cols []column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// mapNote says which shards the task's latest map gives the range to, and
// whether c.To is among them yet.
func mapNote(ctx context.Context, c *CopyConfig) (string, error) {
	var (
		cur riverslot.StoredShardMap
		ok  bool
	)
	for _, s := range c.Shards {
		m, has, err := riverslot.ShardMapOf(ctx, s, c.Task)
		if err != nil {
			return "", err
		}
		if has && (!ok || m.Version > cur.Version) {
			cur, ok = m, true
		}
	}
	if !ok {
		return fmt.Sprintf("task %s: no shard holds a map of it yet", c.Task), nil
	}
	var parts []string
	owns := false
	for _, r := range cur.Ranges {
		if lo, hi := max(r.Lo, c.Lo), min(r.Hi, c.Hi); lo <= hi {
			parts = append(parts, fmt.Sprintf("%d-%d %s", lo, hi, r.Shard))
			owns = owns || r.Shard == c.To
		}
	}
	note := fmt.Sprintf("task %s: its latest map, v%d from %s, gives them to: %s", c.Task, cur.Version, fromText(cur.EffectiveFrom), strings.Join(parts, ", "))
	if !owns {
		note += fmt.Sprintf("; once they are copied, riverslot shards move --range %d-%d --to %s gives them to %s", c.Lo, c.Hi, c.To, c.To)
	}
	return note, nil
}

// inputErr is bad input, an *inspect.InputError.
func inputErr(format string, args ...any) error {
	return &inspect.InputError{Err: fmt.Errorf(format, args...)}
}
