package riverslot_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// schemaState returns whether schema exists and the tables in it.
func schemaState(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) (bool, []string) {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	rows, err := pool.Query(ctx, "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return exists, tables
}

// TestMigrateRefusesBadSchema: Migrate refuses a schema name River's client
// would refuse (PostgreSQL would take each of them, quoted), with an error
// naming the schema and the rule, before it creates anything: no schema, no
// table. MigrateLedger refuses them too, even on an existing schema of that
// name, and leaves it empty.
func TestMigrateRefusesBadSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)

	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	long := "riverslot_test_" + suffix + "_"
	long += strings.Repeat("x", 47-len(long)) // one over River's 46, well under PostgreSQL's 63

	for _, tt := range []struct {
		name, schema, want string
	}{
		{"Hyphen", "riverslot-test-" + suffix, "is not a name River accepts: use letters, digits and underscores, starting with a letter or underscore"},
		{"Dot", "riverslot_test." + suffix, "is not a name River accepts"},
		{"LeadingDigit", "1riverslot_test_" + suffix, "is not a name River accepts"},
		{"TooLong", long, "is 47 characters long: River accepts at most 46 (its notification topics follow it in a 63-byte name); choose a shorter schema"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() { dropSchema(pool, tt.schema) }) // only if a broken Migrate made it

			err := riverslot.Migrate(ctx, pool, tt.schema)
			require.ErrorContains(t, err, `schema "`+tt.schema+`" `+tt.want)
			exists, tables := schemaState(ctx, t, pool, tt.schema)
			require.False(t, exists, "Migrate created schema %q", tt.schema)
			require.Empty(t, tables)

			// MigrateLedger on an existing schema of that name (made by
			// someone else): refused, and nothing created in it.
			_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{tt.schema}.Sanitize())
			require.NoError(t, err)
			err = riverslot.MigrateLedger(ctx, pool, tt.schema)
			require.ErrorContains(t, err, `schema "`+tt.schema+`" `+tt.want)
			exists, tables = schemaState(ctx, t, pool, tt.schema)
			require.True(t, exists)
			require.Empty(t, tables, "MigrateLedger created tables in schema %q", tt.schema)
		})
	}
}
