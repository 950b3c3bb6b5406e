package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPlanBuckets: plan --buckets 65536 prints a day's 1,024 slots of
// 1m24.375s (86,400,000 ms = 2^10 x 84,375 ms, worked by hand) and the
// account's two-byte bucket and slot, and its syncs fall inside that slot,
// which lies inside the account's 128-slot slot.
func TestPlanBuckets(t *testing.T) {
	t.Parallel()

	// Bytes 15 and 14: 0xc8 and 0x30, bucket 0xc830 = 51,248, slot
	// 51,248 / 64 = 800 of 1,024 (and 200 / 2 = 100 of 128).
	id := "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	code, out, stderr := runCmd(t, "plan", "--cycle", "24h", "--buckets", "65536", "--account", id, "--now", "2026-11-22T02:00:00Z")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "slots          1024 = gcd(86400000 ms, 65536)")
	require.Contains(t, out, "slot duration  1m24.375s")
	require.Contains(t, out, "buckets/slot   64 of 65536 (bucket = byte 15 x 256 + byte 14 of the UUID)")
	require.Contains(t, out, "1023  +23:58:35.625000          +24:00:00         65472-65535 (0xffc0-0xffff)")
	require.Contains(t, out, "bucket         51248 (0xc830: byte 15 0xc8, byte 14 0x30)")
	require.Contains(t, out, "slot           800 of 1024")

	slot := 84375 * time.Millisecond
	syncs := parseSyncs(out)
	require.Len(t, syncs, 3)
	for i, s := range syncs {
		cycleStart := time.Date(2026, 11, 22+i, 0, 0, 0, 0, time.UTC)
		window := cycleStart.Add(800 * slot)
		require.False(t, s.Before(window) || !s.Before(window.Add(slot)), "sync %s outside slot 800 [%s, +%s)", s, window, slot)
		coarse := cycleStart.Add(100 * 675 * time.Second)
		require.False(t, s.Before(coarse) || !s.Before(coarse.Add(675*time.Second)), "sync %s outside the 128-slot slot 100", s)
	}

	code, out, stderr = runCmd(t, "plan", "--buckets", "4096")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, stderr, "riverslot plan: --buckets must be 256 or 65536 (Task.Buckets), got 4096")
}
