package riverslotweb_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/internal/testkit/statusbench"
	"github.com/riverslot/riverslot/riverslotweb"
)

// BenchmarkHandler measures one request to each of the page's endpoints
// on the data of the root's BenchmarkStatus (statusbench.Seed): 1,000,000
// accounts, a 24 h task (128 slots) halfway through a pinned cycle,
// 1,007,800 sync jobs in river_job. No request counts the accounts table,
// so there is no first slow call to exclude. Run it with
//
//	go test -run '^$' -bench Handler -benchtime 20x ./riverslotweb
func BenchmarkHandler(b *testing.B) {
	ctx := context.Background()
	pool := riverslottest.Pool(b)
	schema := riverslottest.Schema(ctx, b, pool)
	s, err := riverslot.New(pool, &riverslot.Config{Tasks: []riverslot.Task{{
		Name: statusbench.Task, Cycle: statusbench.Cycle, Schema: schema, Table: statusbench.Table, Filter: statusbench.Filter, Sync: noopSync,
	}}})
	require.NoError(b, err)
	require.NoError(b, s.Configure(&river.Config{Schema: schema}))
	info, err := s.Task(statusbench.Task)
	require.NoError(b, err)
	statusbench.Seed(b, pool, schema, info.PlanID, info.Schedule.Start(time.Now()), riverslot.MigrateLedger)
	h, err := riverslotweb.New(s, nil)
	require.NoError(b, err)
	var account uuid.UUID
	st, err := s.Status(ctx, "transactions")
	require.NoError(b, err)
	require.Equal(b, 64, st.Current.SlotsDone)

	// An account with sync jobs in both cycles, as the bench's jobs name
	// them.
	require.NoError(b, pool.QueryRow(ctx, "SELECT (args->>'account_id')::uuid FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE kind = 'riverslot_sync' ORDER BY id DESC LIMIT 1").Scan(&account))

	for _, bm := range []struct{ name, path string }{
		{"Page", "/?task=transactions"},
		{"PageWithAccount", "/?task=transactions&account=" + account.String()},
		{"APIStatus", "/api/status?task=transactions"},
		{"APICycles", "/api/cycles?task=transactions"},
		{"APIAccount", "/api/accounts/" + account.String() + "?task=transactions"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, bm.path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", bm.path, rec.Code, rec.Body.String())
				}
			}
		})
	}
}
