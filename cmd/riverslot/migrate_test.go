package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/ledger"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
	"github.com/riverslot/riverslot/sqlbucket"
)

// TestMigrate: riverslot migrate prepares an empty schema of a database
// (River's tables, riverslot's, the accounts table's bucket index) and
// says so; run again, it says everything was already there and changes
// nothing; bad input exits 2 before anything is created.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	accounts := riverslottest.EmptySchema(ctx, t, pool)
	riverslottest.CreateAccounts(ctx, t, pool, accounts, "accounts", 10)
	river := riverslottest.EmptySchema(ctx, t, pool)
	_, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{river}.Sanitize()) // migrate creates it
	require.NoError(t, err)
	exists := func(schema, name string) bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, name}.Sanitize()).Scan(&ok))
		return ok
	}
	index := sqlbucket.IndexNameFor("accounts", "id", 256)
	args := []string{"migrate", "--database-url", riverslottest.DatabaseURL(), "--schema", river, "--table", "accounts", "--accounts-schema", accounts}

	code, stdout, stderr := runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	for _, name := range []string{"river_job", ledger.Table, ledger.ShardsTable, "riverslot_upstream_place"} {
		require.True(t, exists(river, name), name)
		require.Contains(t, stdout, river+"."+name+": created")
	}
	require.True(t, exists(accounts, index))
	require.Contains(t, stdout, accounts+"."+index+": created")

	code, stdout, stderr = runCmd(t, args...)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "created", "a second run creates nothing")
	require.Equal(t, 5, strings.Count(stdout, "already there"), stdout)

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "nope", "--accounts-schema", accounts}, "no table"},
		{[]string{"--buckets", "300"}, "--buckets must be"},
		{[]string{"--schema", `a"b`}, "--schema must be a plain identifier"},
	} {
		fresh := riverslottest.EmptySchema(ctx, t, pool)
		a := append([]string{"migrate", "--database-url", riverslottest.DatabaseURL(), "--schema", fresh}, bad.args...)
		code, _, stderr := runCmd(t, a...)
		require.Equal(t, 2, code, "%v: %s", bad.args, stderr)
		require.Contains(t, stderr, bad.want)
		if !strings.Contains(strings.Join(bad.args, " "), "--schema") {
			require.False(t, exists(fresh, "river_job"), "%v: refused before anything was created", bad.args)
		}
	}
}
