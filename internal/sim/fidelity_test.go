package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/riverslottest"
)

// TestFidelity runs a real cycle (riverslot demo: 20,000 accounts, 120 s,
// River against the test database) and the simulation of the same flags,
// and holds the simulator to what the run measured: peak pending sync jobs
// and start lateness p99 within 15%, lateness p50 within 15% or, under
// 0.5 s, within 0.1 s. It runs in this package's own test binary, so
// nothing else loads the machine while the real cycle runs.
func TestFidelity(t *testing.T) {
	ctx := context.Background()
	pool := riverslottest.Pool(t) // fails with how to get a database when there is none

	dir := t.TempDir()
	bin := filepath.Join(dir, "riverslot")
	build := exec.Command("go", "build", "-o", bin, "./cmd/riverslot")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/riverslot: %s", out)

	schema := fmt.Sprintf("sim_fidelity_%d", rand.Uint32())
	t.Cleanup(func() {
		_, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	flags := []string{"--accounts", "20000", "--cycle", "120s", "--json"}

	type figures struct {
		Peak int64   `json:"peak_queue_depth"`
		P50  float64 `json:"lateness_p50_seconds"`
		P99  float64 `json:"lateness_p99_seconds"`
	}
	runJSON := func(args ...string) []byte {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "riverslot %v: %s", args, stderr.String())
		return stdout.Bytes()
	}

	var real struct {
		figures
		Synced int64 `json:"synced"`
		Missed int64 `json:"missed"`
	}
	require.NoError(t, json.Unmarshal(runJSON(append([]string{"demo", "--database-url", riverslottest.DatabaseURL(), "--schema", schema}, flags...)...), &real))
	require.Equal(t, int64(20000), real.Synced)

	var simulated struct {
		Results []figures `json:"results"`
	}
	require.NoError(t, json.Unmarshal(runJSON(append([]string{"simulate"}, flags...)...), &simulated))
	require.Len(t, simulated.Results, 1)
	sim := simulated.Results[0]

	t.Logf("measured:  peak_pending=%d lateness_p50=%.3fs p99=%.3fs", real.Peak, real.P50, real.P99)
	t.Logf("simulated: peak_pending=%d lateness_p50=%.3fs p99=%.3fs", sim.Peak, sim.P50, sim.P99)

	within15 := func(name string, measured, simulated float64) {
		require.LessOrEqual(t, math.Abs(simulated-measured), 0.15*measured,
			"%s: simulated %g, measured %g: more than 15%% apart", name, simulated, measured)
	}
	within15("peak pending", float64(real.Peak), float64(sim.Peak))
	if real.P50 < 0.5 {
		require.InDelta(t, real.P50, sim.P50, 0.1, "lateness p50 (under 0.5 s: within 0.1 s)")
	} else {
		within15("lateness p50", real.P50, sim.P50)
	}
	within15("lateness p99", real.P99, sim.P99)
}
