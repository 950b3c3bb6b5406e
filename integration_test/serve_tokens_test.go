package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// TestServeRevokedTokenFile: the operator's --token-file token, revoked
// through the API, is refused at once, and the next `riverslot serve`
// with that file exits 2 saying the token was revoked, instead of
// accepting it again.
func TestServeRevokedTokenFile(t *testing.T) {
	parallel(t)
	reserveProcessConns(t, 0, 1)
	ctx := context.Background()
	pool := riverslottest.Pool(t)
	schema := riverslottest.EmptySchema(ctx, t, pool)
	tokenFile := filepath.Join(t.TempDir(), "token")
	p := startServe(t, schema, tokenFile)
	b, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	token := strings.TrimSpace(string(b))
	send := func(method, path string, out any) int {
		t.Helper()
		req, err := http.NewRequest(method, p.api+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if out != nil {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
		}
		return resp.StatusCode
	}
	var me struct {
		TokenID int64  `json:"token_id"`
		Scope   string `json:"scope"`
	}
	require.Equal(t, http.StatusOK, send("GET", "/v1/me", &me))
	require.Equal(t, "admin", me.Scope)
	require.Equal(t, http.StatusOK, send("DELETE", "/v1/tokens/"+strconv.FormatInt(me.TokenID, 10), nil))
	require.Equal(t, http.StatusUnauthorized, send("GET", "/v1/me", nil))
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done

	cmd := exec.Command(riverslotBinary(t), "serve", "--database-url", riverslottest.DatabaseURL(), "--schema", schema, "--addr", "127.0.0.1:0",
		"--token-file", tokenFile, "--periods", "16s", "--allow-private-targets", "--max-conns", "5")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "serve must exit: %v\n%s", err, out)
	require.Equal(t, 2, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "was revoked")
	require.Contains(t, string(out), tokenFile)
}
