package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }

// TestQuickStart runs the quick start's run, word for word what README.md
// shows (riverslot.TestReadmeQuickStart), on a 32 s cycle: River's schema
// does not exist yet (Migrate creates it), the accounts table has no bucket
// index (CreateIndexes creates it), and every active account is synced
// while the inactive one never is.
func TestQuickStart(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	dbPool := riverslottest.Pool(t)
	accountsSchema := riverslottest.EmptySchema(ctx, t, dbPool)
	riverSchema := accountsSchema + "_river"
	t.Cleanup(func() {
		_, err := dbPool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{riverSchema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	ids := riverslottest.CreateAccounts(ctx, t, dbPool, accountsSchema, "accounts", 5)
	inactive := ids[4]
	_, err := dbPool.Exec(ctx, "UPDATE "+pgx.Identifier{accountsSchema, "accounts"}.Sanitize()+" SET active = false WHERE id = $1", inactive)
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		synced   = map[uuid.UUID]int{}
		runCtx   context.Context
		stopRun  context.CancelFunc
		finished = make(chan error, 1)
	)
	runCtx, stopRun = context.WithTimeout(ctx, 3*time.Minute)
	defer stopRun()
	syncAccount := func(ctx context.Context, accountID uuid.UUID) error {
		mu.Lock()
		defer mu.Unlock()
		synced[accountID]++
		if len(synced) == 4 && synced[inactive] == 0 {
			stopRun() // every active account synced: the app shuts down
		}
		return nil
	}
	go func() {
		finished <- run(runCtx, dbPool, riverslottest.Logger(t), accountsSchema, riverSchema, 32*time.Second, syncAccount)
	}()

	require.NoError(t, <-finished)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids[:4] {
		require.Positive(t, synced[id], "active account %s was never synced (run stopped after 3 min?)", id)
	}
	require.Zero(t, synced[inactive], "the inactive account fails Filter and must never be synced")
	require.Equal(t, int64(1), riverslottest.Count(ctx, t, dbPool,
		"SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'accounts_id_riverslot_bucket_idx'", accountsSchema),
		"run creates the bucket index")
}
