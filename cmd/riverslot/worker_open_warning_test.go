package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestWorkerWebAddrOpenWarning starts `riverslot worker --web-addr` and
// stops it once started: listening beyond loopback (0.0.0.0), it warns on
// stderr, once, that the operator's page has no authentication, naming the
// flag and the address it listens on; on 127.0.0.1 it says nothing of it.
func TestWorkerWebAddrOpenWarning(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.Schema(ctx, t, pool)
	markDemoSchema(ctx, t, pool, schema)
	riverslottest.CreateAccounts(ctx, t, pool, schema, "accounts", 10)
	base := []string{"--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--cycle", "16s", "--max-conns", "3", "--periodic=false"}
	const warning = "the operator's page has no authentication"

	for _, tt := range []struct {
		name, addr string
		warn       bool
	}{
		{"AllInterfaces", "0.0.0.0:0", true},
		{"Loopback", "127.0.0.1:0", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, stop := startWorkerCmd(t, append(base, "--web-addr", tt.addr)...)
			require.Equal(t, 0, stop(), stderr.String())
			page := regexp.MustCompile(`operator's page at http://(\S+)/ `).FindStringSubmatch(stdout.String())
			require.NotNil(t, page, "stdout: %s", stdout.String())
			if !tt.warn {
				require.NotContains(t, stderr.String(), warning)
				return
			}
			require.Equal(t, 1, strings.Count(stderr.String(), warning), "stderr: %s", stderr.String())
			require.Contains(t, stderr.String(), "riverslot: warning: --web-addr listens on "+page[1]+", beyond this machine, and "+warning)
		})
	}
}
