package riverslot

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot/internal/perslot"
	"github.com/riverslot/riverslot/internal/syncjob"
)

// Bounds of RecentFailures' limit.
const (
	FailuresLimitDefault = 10
	FailuresLimitMax     = 100
)

// FailedJob is a per-slot or sync job of a task that River discarded (its
// last attempt failed) or cancelled, as River's job table still holds it.
type FailedJob struct {
	JobID int64
	// Kind is River's job kind: "riverslot_perslot" (a slot's fan-out) or
	// "riverslot_sync" (one account's sync; AccountID is set).
	Kind       string
	State      string // River's: "discarded" or "cancelled"
	CycleStart time.Time
	// Slot is the job's slot in its cycle; -1 when its args carry none.
	Slot        int
	AccountID   uuid.UUID // uuid.Nil for a per-slot job
	FinalizedAt time.Time
	// Error is River's last recorded error of the job ("" for a job
	// cancelled before it ran).
	Error string
}

// recentFailuresSQL lists the task's ($2) most recently failed jobs of
// kinds $1 through River's (state, finalized_at) index, at most $3.
//
//	SELECT id, kind, state, args->>'cycle_start', args->>'slot', args->>'account_id', finalized_at, errors
//	FROM river_job WHERE state IN ('discarded', 'cancelled') AND finalized_at IS NOT NULL
//	  AND kind = ANY($1) AND args->>'task' = $2
//	ORDER BY finalized_at DESC LIMIT $3
const recentFailuresSQL = `SELECT id, kind, state::text, coalesce(args->>'cycle_start', ''), coalesce(args->>'slot', ''), coalesce(args->>'account_id', ''), finalized_at, errors
	FROM %s WHERE state IN ('discarded', 'cancelled') AND finalized_at IS NOT NULL AND kind = ANY($1) AND args->>'task' = $2
	ORDER BY finalized_at DESC LIMIT $3`

// RecentFailures returns the named task's per-slot and sync jobs that
// River discarded or cancelled, most recently finalized first, at most
// limit (FailuresLimitDefault when 0, at most FailuresLimitMax). It reads
// River's job table through its (state, finalized_at) index, so it lists
// only the failures River keeps (DiscardedJobRetentionPeriod, 7 days by
// default); how many syncs of a cycle failed is counted in riverslot's
// ledger for as long as the cycle is listed (Cycles).
func (s *Scheduler) RecentFailures(ctx context.Context, taskName string, limit int) ([]FailedJob, error) {
	spec, limit, err := s.readSpec(taskName, limit, FailuresLimitDefault, FailuresLimitMax)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(recentFailuresSQL, s.riverTable(spec)), []string{perslot.Kind, syncjob.Kind}, spec.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("error listing failed jobs: %w", err)
	}
	var (
		out                  []FailedJob
		f                    FailedJob
		cycle, slot, account string
		errs                 []json.RawMessage
	)
	if _, err := pgx.ForEachRow(rows, []any{&f.JobID, &f.Kind, &f.State, &cycle, &slot, &account, &f.FinalizedAt, &errs}, func() error {
		j := f
		j.Slot, j.AccountID, j.CycleStart, j.Error = -1, uuid.Nil, time.Time{}, ""
		j.FinalizedAt = j.FinalizedAt.UTC()
		if t, err := time.Parse(time.RFC3339Nano, cycle); err == nil {
			j.CycleStart = t.UTC()
		}
		if n, err := strconv.Atoi(slot); err == nil {
			j.Slot = n
		}
		if id, err := uuid.Parse(account); err == nil {
			j.AccountID = id
		}
		j.Error = lastError(errs)
		out = append(out, j)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error listing failed jobs: %w", err)
	}
	return out, nil
}

// lastError is the message of the last of a River job's recorded errors
// ("" when none).
func lastError(errs []json.RawMessage) string {
	if len(errs) == 0 {
		return ""
	}
	var last struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(errs[len(errs)-1], &last) != nil {
		return ""
	}
	return last.Error
}
