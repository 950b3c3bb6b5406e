package serve_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/serve"
)

// pageChromium finds Chromium, or fails the test saying how to install it
// (as cmd/riverslot's browser test does).
func pageChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("Chromium is needed for the browser test and was not found (looked for chromium, chromium-browser, /usr/bin/chromium): " +
		"install it with `sudo apt-get install -y chromium` (Debian/Ubuntu; .ci/run does this) or your system's package")
	return ""
}

// pageDOM opens url in headless Chromium (a fresh profile) and returns
// the DOM once the page's requests are answered: virtual time waits for
// the network.
func pageDOM(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", url}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium %v: %s", args, stderr.String())
	return stdout.String()
}

// row is the dumped DOM of the schedules table's row of id.
func pageRow(t *testing.T, dom, id string) string {
	t.Helper()
	i := strings.Index(dom, `<tr data-id="`+id+`">`)
	require.GreaterOrEqual(t, i, 0, "no row of schedule %s in the page:\n%s", id, dom)
	j := strings.Index(dom[i:], "</tr>")
	require.Greater(t, j, 0)
	return dom[i : i+j]
}

// TestPage: the operator's page, served under serve.PageCSP with no
// inline script or style, renders in headless Chromium with a tenant's
// token given in the fragment: who the token is, the tenant's quota use,
// its schedules only, each with a strip of its last calls (newest right,
// failed ones marked), and the markup a user wrote shown as text.
func TestPage(t *testing.T) {
	t.Parallel()
	a := setup(t, &serve.Guard{}, time.Hour)
	acme, other := a.tenant("acme-page", map[string]any{"max_schedules": 7}), a.tenant("other-page", nil)
	const markup = `<img src=x onerror=alert(1)>`
	mine := a.as(acme.Token).schedule(map[string]any{"url": "https://203.0.113.10/hook?x=" + markup, "period": "1h", "external_id": markup})
	quiet := a.as(acme.Token).schedule(map[string]any{"url": "https://203.0.113.10/quiet", "period": "1h"})
	theirs := a.as(other.Token).schedule(map[string]any{"url": "https://203.0.113.10/theirs", "period": "1h"})
	require.Equal(t, "https://203.0.113.10/hook?x="+markup, mine.URL, "the markup is kept as written")

	// Calls written straight to the calls table: mine 4 ok then 1 failed
	// (the newest), quiet 3 ok, theirs 2 failed.
	ctx := context.Background()
	calls := pgx.Identifier{a.srv.Schema(), serve.CallsTable}.Sanitize()
	insert := func(id, tenant any, minutesAgo int, ok bool, status int, errText *string) {
		t.Helper()
		_, err := a.srv.Pool().Exec(ctx, `INSERT INTO `+calls+` (schedule_id, tenant_id, period_ms, job_id, attempt, due_at, started_at, lateness_ms, status, latency_ms, error, ok)
VALUES ($1, $2, 3600000, NULL, 1, now() - $3 * interval '1 minute', now() - $3 * interval '1 minute' + interval '120 ms', 120, $4, 35, $5, $6)`,
			id, tenant, minutesAgo, status, errText, ok)
		require.NoError(t, err)
	}
	failure := "HTTP 500 from target: " + markup
	for m := 50; m >= 20; m -= 10 {
		insert(mine.ID, acme.ID, m, true, 200, nil)
	}
	insert(mine.ID, acme.ID, 5, false, 500, &failure)
	for m := 3; m >= 1; m-- {
		insert(quiet.ID, acme.ID, m, true, 204, nil)
	}
	insert(theirs.ID, other.ID, 4, false, 503, nil)
	insert(theirs.ID, other.ID, 2, false, 503, nil)

	// The page, its script and its style: each under the strict policy,
	// the page with no inline script, style or handler.
	files := map[string]string{}
	for _, path := range []string{"/v1/page", "/v1/page.js", "/v1/page.css"} {
		resp, err := http.Get(a.http.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, serve.PageCSP, resp.Header.Get("Content-Security-Policy"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		files[path] = string(body)
	}
	html := files["/v1/page"]
	scripts := regexp.MustCompile(`(?is)<script\b[^>]*>(.*?)</script>`).FindAllStringSubmatch(html, -1)
	require.Len(t, scripts, 1, "one script, the page's file")
	require.Contains(t, scripts[0][0], `src="/v1/page.js"`)
	require.Empty(t, strings.TrimSpace(scripts[0][1]), "no inline script: the policy would block it")
	require.NotRegexp(t, `(?i)<style|\sstyle=|\son[a-z]+=|javascript:`, html, "no inline style or handler")
	require.Contains(t, html, `<link rel="stylesheet" href="/v1/page.css">`)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		require.False(t, strings.Contains(files["/v1/page.js"], sink), "page.js uses %s: values are set as text, never parsed as markup", sink)
	}
	require.Contains(t, files["/v1/page.css"], ".call.failed")

	bin := pageChromium(t)

	t.Run("Tenant", func(t *testing.T) {
		dom := pageDOM(t, bin, a.http.URL+"/v1/page#token="+acme.Token)
		require.Contains(t, dom, `<strong id="tenant">acme-page</strong>`, "whose token it is")
		require.Contains(t, dom, `<span id="scope">tenant</span>`)
		require.Contains(t, dom, "schedules: 2 of 7", "the tenant's quota use")
		require.Contains(t, dom, "Last hour: 8 calls, 1 failed.", "the tenant's own calls only")
		require.NotContains(t, dom, "Error:")
		require.NotContains(t, dom, acme.Token, "the token is kept in sessionStorage, not in the page")

		require.Contains(t, dom, mine.ID.String())
		require.Contains(t, dom, quiet.ID.String())
		require.NotContains(t, dom, theirs.ID.String(), "another tenant's schedule")
		require.NotContains(t, dom, "/theirs")

		row := pageRow(t, dom, mine.ID.String())
		require.Equal(t, 4, strings.Count(row, `class="call ok"`), row)
		require.Equal(t, 1, strings.Count(row, `class="call failed"`), row)
		require.Greater(t, strings.Index(row, `class="call failed"`), strings.LastIndex(row, `class="call ok"`), "the newest call, failed, is right")
		require.Contains(t, row, `<td class="failing">failing</td>`)
		require.Contains(t, row, "failed · HTTP 500", "a cell's title tells the call")
		require.Contains(t, row, "late 0.12 s")
		require.Contains(t, row, `aria-label="1 failed of the last 5 calls"`)
		row = pageRow(t, dom, quiet.ID.String())
		require.Equal(t, 3, strings.Count(row, `class="call ok"`), row)
		require.NotContains(t, row, `class="call failed"`)

		// The markup in the URL, the external id and the call's error is
		// text: no element made of it.
		require.NotContains(t, strings.ToLower(dom), "<img", "markup a user wrote is never parsed")
		require.Contains(t, dom, `https://203.0.113.10/hook?x=&lt;img src=x onerror=alert(1)&gt;</td>`)
		require.Contains(t, dom, `<span class="ext">&lt;img src=x onerror=alert(1)&gt;</span>`)
	})

	t.Run("Admin", func(t *testing.T) {
		dom := pageDOM(t, bin, a.http.URL+"/v1/page#token="+a.token)
		require.Contains(t, dom, `<span id="scope">admin</span>`)
		require.NotContains(t, dom, `id="tenant"`)
		require.NotContains(t, dom, "Error:")
		for _, id := range []string{mine.ID.String(), quiet.ID.String(), theirs.ID.String()} {
			require.Contains(t, dom, id, "an admin sees every tenant's schedules")
		}
		row := pageRow(t, dom, theirs.ID.String())
		require.Equal(t, 2, strings.Count(row, `class="call failed"`), row)
		require.NotContains(t, row, `class="call ok"`)
	})

	t.Run("NoToken", func(t *testing.T) {
		dom := pageDOM(t, bin, a.http.URL+"/v1/page")
		require.Contains(t, dom, `<p id="who">No token yet.</p>`)
		require.Contains(t, dom, `<table id="schedules" hidden="">`)
	})
}
