package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/serve"
)

// docRequest is one request docs/serve.md shows: a curl command of a sh
// block, or a request shape in the text (`METHOD /v1/path`).
type docRequest struct {
	method, path, token, body string
}

// curlRequests returns the curl commands of the markdown's sh blocks, in
// order, as requests: -X, the URL's path, -d, and the Authorization
// header's variable ($ADMIN, $TOKEN).
func curlRequests(t *testing.T, md string) []docRequest {
	t.Helper()
	var out []docRequest
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(md, -1) {
		text := strings.ReplaceAll(block[1], "\\\n", " ")
		for line := range strings.SplitSeq(text, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "curl ") {
				continue
			}
			r := docRequest{method: "GET"}
			args := shellWords(t, line)
			for i := 1; i < len(args); i++ {
				switch a := args[i]; {
				case a == "-X":
					i++
					r.method = args[i]
				case a == "-d":
					i++
					r.body = args[i]
				case a == "-H":
					i++
					if v, ok := strings.CutPrefix(args[i], "Authorization: Bearer "); ok {
						r.token = v
					}
				case strings.HasPrefix(a, "http://"):
					r.path = a[strings.Index(a[len("http://"):], "/")+len("http://"):]
				}
			}
			require.NotEmpty(t, r.path, "a URL in %q", line)
			out = append(out, r)
		}
	}
	return out
}

// shellWords splits a command line as sh does for these examples: words
// apart by spaces, 'single' and "double" quotes kept together.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, c := range line {
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	require.Zero(t, quote, "quotes closed in %q", line)
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestDocExamples runs docs/serve.md's requests, read from the file,
// against a server on loopback: its curl commands in order (the tenant's
// token that the first answers is the $TOKEN of the next), then every
// request shape its text names (`GET /v1/schedules`, `PATCH {"paused":
// false}`, ...), each alternative of a query (`second|minute|hour`), on
// the things the examples made. Each answers 2xx with the fields the doc
// says.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/serve.md")
	require.NoError(t, err)
	md := string(raw)
	// The server the examples address: --periods 1m,1h,24h; targets are not
	// called here (no River client), nor looked up.
	a := setup(t, &serve.Guard{AllowPrivate: true}, time.Minute, time.Hour, 24*time.Hour)
	vars := map[string]string{"$ADMIN": a.token}
	send := func(r docRequest) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(r.method, a.http.URL+r.path, bytes.NewReader([]byte(r.body)))
		require.NoError(t, err)
		token, ok := vars[r.token]
		require.True(t, ok, "%s %s: the token %s is set by an example before it", r.method, r.path, r.token)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.Unmarshal(b, &out), "%s %s: %s", r.method, r.path, b)
		require.True(t, resp.StatusCode >= 200 && resp.StatusCode < 300, "%s %s %s: %d %s", r.method, r.path, r.body, resp.StatusCode, b)
		return resp.StatusCode, out
	}

	curls := curlRequests(t, md)
	require.GreaterOrEqual(t, len(curls), 2, "the doc's curl examples")
	var scheduleID string
	for _, r := range curls {
		status, out := send(r)
		switch r.path {
		case "/v1/tenants":
			require.Equal(t, http.StatusCreated, status)
			require.NotEmpty(t, out["id"])
			require.True(t, strings.HasPrefix(out["signing_secret"].(string), "whsec_"), "signing_secret: %v", out["signing_secret"])
			vars["$TOKEN"] = out["token"].(string) // TOKEN=...: a tenant's token
		case "/v1/schedules":
			require.Equal(t, http.StatusCreated, status)
			require.NotEmpty(t, out["offset"])
			require.NotEmpty(t, out["next_calls"])
			scheduleID = out["id"].(string)
		}
	}
	require.NotEmpty(t, scheduleID, "an example makes a schedule")

	// The request shapes of the text, the tenant's token for its own
	// things, the admin's for tenants.
	shape := regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE)\\s+(/v1/[^`\\s]*|\\{[^`]*\\})`")
	seen := map[string]bool{}
	var shapes []docRequest
	for _, m := range shape.FindAllStringSubmatch(md, -1) {
		method, target := m[1], m[2]
		if seen[method+" "+target] {
			continue
		}
		seen[method+" "+target] = true
		r := docRequest{method: method, path: target, token: "$TOKEN"}
		if strings.HasPrefix(target, "{") {
			// A change of the schedule: `PATCH {"paused": false}`.
			r.path, r.body = "/v1/schedules/{id}", target
		}
		path, query, _ := strings.Cut(r.path, "?")
		if strings.HasPrefix(path, "/v1/tenants") {
			r.token = "$ADMIN"
		}
		switch path {
		case "/v1/openapi.json":
			continue // public: TestScopes
		case "/v1/tokens":
			if method == "POST" {
				r.body = `{"name": "ci", "scope": "read"}`
			}
		}
		if k, v, ok := strings.Cut(query, "="); ok && strings.Contains(v, "|") {
			for alt := range strings.SplitSeq(v, "|") {
				shapes = append(shapes, docRequest{method: r.method, path: path + "?" + k + "=" + alt, token: r.token})
			}
			continue
		}
		shapes = append(shapes, r)
	}
	require.GreaterOrEqual(t, len(shapes), 8, "the doc's request shapes")
	for _, r := range shapes {
		switch {
		case strings.HasPrefix(r.path, "/v1/schedules/{id}"):
			r.path = strings.Replace(r.path, "{id}", scheduleID, 1)
		case r.path == "/v1/tokens/{id}":
			_, made := send(docRequest{method: "POST", path: "/v1/tokens", token: "$TOKEN", body: `{"name": "to revoke", "scope": "read"}`})
			r.path = fmt.Sprintf("/v1/tokens/%v", made["id"])
		case r.path == "/v1/tenants/{id}":
			_, made := send(docRequest{method: "POST", path: "/v1/tenants", token: "$ADMIN", body: `{"name": "to delete"}`})
			r.path = fmt.Sprintf("/v1/tenants/%v", made["id"])
		}
		send(r)
	}
}
