package riverjob

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Queryer is the subset of pgx.Conn, pgx.Tx and pgxpool.Pool that ByID
// needs.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Job is what River's job table says of a job.
type Job struct {
	// State is River's state of the job ("running", "completed", ...).
	State string
	// Attempt is how many times River has started the job.
	Attempt int
	// LastError is the message of the job's last recorded error, "" if it
	// has none.
	LastError string
}

// byIDSQL reads jobs $1 of table by primary key; of River's errors array,
// only the last error's message:
//
//	SELECT id, state::text, attempt, coalesce(errors[array_upper(errors, 1)]->>'error', '')
//	FROM "schema"."river_job" WHERE id = ANY($1)
func byIDSQL(table string) string {
	return "SELECT id, state::text, attempt, coalesce(errors[array_upper(errors, 1)]->>'error', '') FROM " + table + " WHERE id = ANY($1)"
}

// ByID returns each of ids still in River's job table (in schema, "" for
// the search path): a job absent from the map was deleted. One lookup by
// primary key per id.
func ByID(ctx context.Context, q Queryer, schema string, ids []int64) (map[int64]Job, error) {
	out := make(map[int64]Job, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, byIDSQL(QualifiedTable(schema)), ids)
	if err != nil {
		return nil, fmt.Errorf("error reading %d River jobs by id: %w", len(ids), err)
	}
	var (
		id int64
		j  Job
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &j.State, &j.Attempt, &j.LastError}, func() error {
		out[id] = j
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading %d River jobs by id: %w", len(ids), err)
	}
	return out, nil
}
