package riverslot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// BenchmarkHandler measures one request to each of Handler's endpoints on
// BenchmarkStatus's schema: 1,000,000 accounts, a 24 h task (128 slots)
// halfway through a pinned cycle, 1,007,800 sync jobs in river_job. No
// request counts the accounts table (the ledger has no rows here, so the
// expected accounts come from the per-slot jobs), so there is no first
// slow call to exclude. Run it with
//
//	go test -run '^$' -bench Handler -benchtime 20x .
func BenchmarkHandler(b *testing.B) {
	ctx := context.Background()
	s, schema := seedStatusBench(b)
	h, err := s.NewHandler(nil)
	require.NoError(b, err)
	var account uuid.UUID
	st, err := s.Status(ctx, "transactions")
	require.NoError(b, err)
	require.Equal(b, 64, st.Current.SlotsDone)

	// An account with sync jobs in both cycles, as the bench's jobs name
	// them.
	require.NoError(b, riverslottest.Pool(b).QueryRow(ctx, "SELECT (args->>'account_id')::uuid FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
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
