package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReport(t *testing.T) {
	t.Parallel()

	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"a passing log line\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"why B failed\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":9}`,
		`{"Action":"fail","Package":"p","Test":"TestB","Elapsed":30}`,
		`{"Action":"pass","Package":"p","Test":"TestC","Elapsed":0.2}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t31.0s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":31}`,
		`{"Action":"pass","Package":"q","Elapsed":2}`,
	}, "\n")
	var out bytes.Buffer
	failed, err := report(strings.NewReader(in), &out, options{slowest: 2})
	require.NoError(t, err)
	require.True(t, failed)
	s := out.String()
	require.Contains(t, s, "why B failed")
	require.NotContains(t, s, "a passing log line")
	require.Contains(t, s, "FAIL\tp\t31.0s")
	slow := s[strings.Index(s, "slowest tests"):]
	require.Regexp(t, `(?s)slowest tests \(of 3\):\n\s+30\.0s  p TestB\n\s+1\.5s  p TestA\npackages`, slow, "the two slowest top-level tests, slowest first; subtests not listed")

	failed, err = report(strings.NewReader(`{"Action":"pass","Package":"q","Test":"TestD","Elapsed":1}`), &out, options{slowest: 2})
	require.NoError(t, err)
	require.False(t, failed)

	// The live report of scripts/test.sh: package results only; the final
	// one: failures and the summary, no package lines.
	out.Reset()
	failed, err = report(strings.NewReader(in), &out, options{quietFailures: true, quietSummary: true})
	require.NoError(t, err)
	require.True(t, failed)
	require.Contains(t, out.String(), "FAIL\tp\t31.0s")
	require.NotContains(t, out.String(), "why B failed")
	require.NotContains(t, out.String(), "slowest tests")

	out.Reset()
	failed, err = report(strings.NewReader(in), &out, options{slowest: 2, quietPackages: true})
	require.NoError(t, err)
	require.True(t, failed)
	require.Contains(t, out.String(), "why B failed")
	require.NotContains(t, out.String(), "FAIL\tp\t31.0s")
	require.Contains(t, out.String(), "slowest tests (of 3)")
}
