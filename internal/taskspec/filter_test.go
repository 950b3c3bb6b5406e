package taskspec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/taskspec"
	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

// escapes are filters that leave their parentheses in Postgres. Each was
// accepted by an earlier CheckFilter, which read every string constant as a
// standard '..' string and '$' as a dollar quote wherever it stood; each is
// a plain boolean condition of the probe's column x, so Postgres plans the
// escaped query (TestProbeCatches shows the probe sees it).
var escapes = []struct{ name, filter string }{
	// Inside E'..' a backslash escapes the quote: E'\' ' is one string.
	{"EString", `x <> E'\' ') OR (true) OR (x = E'\' ' OR x = ''`},
	// A '$' inside a name is part of the name: x$a$ opens no dollar quote.
	{"DollarInName", `(SELECT 1 AS x$a$) IS NULL) OR (true OR (SELECT 1 AS y$a$) IS NULL`},
	// With standard_conforming_strings off, '\' ..' runs on to the next
	// quote.
	{"BackslashWithoutStandardStrings", `x = '\' OR x = ') OR (true OR x = '\' OR x = '`},
	// E'..' continued on the next line is still read as E'..'.
	{"EStringContinued", "x <> E''\n'\\' ') OR (true) OR (x = E'\\' ' OR x = ''"},
}

func TestCheckFilter(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name, filter string
		want         string // "" when accepted, else part of the reason
	}{
		{"Plain", "active AND NOT restricted", ""},
		{"Nested", "(a OR (b AND c)) AND d", ""},
		{"ParenInString", "name = 'it''s (not) closed'", ""},
		{"ParenInQuotedIdent", `"we)ird" = 1 AND "a""(b" IS NULL`, ""},
		{"ParenInEString", `name = E'\'(\\'`, ""},
		{"DoubledQuoteInEString", `name = e'it''s ('`, ""},
		{"BackslashNotBeforeQuote", `email ~ '\.com$' AND path = 'C:\\'`, ""},
		{"ParenInDollarQuote", "name = $$)$$ OR name = $tag$ ( $x$ $tag$", ""},
		{"NameEndingInE", "name = 'e' AND date'2020-01-01' < now() AND xe'('IS NULL", ""},
		{"DollarInName", "a$b = 1 AND a$1 = 2", ""},
		{"BitAndHex", "B'101' = B'101' AND X'1F' IS NOT NULL", ""},
		{"National", "name = N'('", ""},
		{"Unicode", `name = U&'\0028' AND U&"d\0061t)a" IS NULL AND name = U&'!0028' UESCAPE '!'`, ""},
		{"Numbers", "1.5e3 > 0 AND 0x1F = 31 AND 1_000 = 1000 AND .5 < 1", ""},
		{"MultiLine", "active\n  AND NOT restricted", ""},
		{"UnicodeNames", "größe > 0", ""},

		{"BreakingOut", "true) OR (true", "a ')' closes a parenthesis it did not open"},
		{"LeftOpen", "(active", "1 '(' left open"},
		{"Semicolon", "true; DELETE FROM accounts", "';' is not allowed"},
		{"LineComment", "true --", "'--' comments are not allowed"},
		{"BlockComment", "true /* x */", "'/*' comments are not allowed"},
		{"CommentInOperator", "1 +-- x", "'--' comments are not allowed"},
		{"BindParameter", "id = $1", "bind parameters such as $1 are not allowed"},
		{"LoneDollar", "x = $ 1", "a '$' that opens no dollar-quoted string"},
		{"UnterminatedString", "name = 'x", "unterminated '-quoted text"},
		{"UnterminatedEString", `name = E'x\'`, "unterminated E'...' text"},
		{"UnterminatedIdent", `"name = 1`, `unterminated "-quoted text`},
		{"UnterminatedDollar", "name = $a$ x $b$", "unterminated dollar-quoted text (no closing $a$)"},
		{"UnterminatedBits", "B'10", "unterminated B'...' or X'...' text"},
		{"BackslashBeforeQuote", `name = 'a\'`, "a backslash before a quote in '...' text"},
		{"BackslashBeforeDoubledQuote", `name = 'a\''`, "a backslash before a quote in '...' text"},
		{"StringsInARow", "name = 'a'\n'b'", "a string constant directly followed by another"},
		{"BitStringsInARow", "B'1''0' IS NULL", "a string constant directly followed by another"},
		{"QuoteAfterNumber", "1e'x' IS NULL", "a quote or '$' directly after the number 1e;"},
		{"DollarAfterNumber", "1$a$ $a$", "a quote or '$' directly after the number 1;"},
		{"NUL", "true\x00", "NUL bytes are not allowed"},
		{"NotUTF8", "name = '\xff'", "it is not valid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := taskspec.CheckFilter(tt.filter)
			if tt.want == "" {
				require.NoError(t, err)
				require.NoError(t, taskspec.CheckWeight(tt.filter))
				return
			}
			require.ErrorContains(t, err, "Filter must be one balanced SQL boolean expression ("+tt.want)
			require.ErrorContains(t, taskspec.CheckWeight(tt.filter), "Weight must be one balanced numeric SQL expression ("+tt.want)
		})
	}
	for _, tt := range escapes {
		t.Run("Escape"+tt.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, taskspec.CheckFilter(tt.filter))
			require.Error(t, taskspec.CheckWeight(tt.filter))
		})
	}
}

// TestProbeCatches shows that probeFilter, which FuzzCheckFilter holds every
// accepted filter to, sees each known escape, and passes a plain filter.
func TestProbeCatches(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	pool := riverslottest.Pool(t)
	for _, tt := range escapes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, probeFilter(ctx, t, pool, tt.filter), "escaped its parentheses")
		})
	}
	t.Run("Plain", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, probeFilter(ctx, t, pool, "x = 'a' OR x IN (SELECT 'b') OR EXISTS (SELECT 1 FROM pg_class)"))
	})
}

// FuzzCheckFilter holds CheckFilter to PostgreSQL's own parser: every filter
// it accepts must stay inside its parentheses (probeFilter). Its seed corpus
// runs in every go test; `go test -fuzz FuzzCheckFilter ./internal/taskspec`
// searches further (with TEST_DATABASE_URL set).
func FuzzCheckFilter(f *testing.F) {
	for _, tt := range escapes {
		f.Add(tt.filter)
	}
	for _, s := range []string{
		"active AND NOT restricted",
		"x = 'it''s (ok)'",
		`x = E'\\' OR (true)`,
		`x = E'\'' OR (x = ')')`,
		`x ~ '\.com$' AND x <> '\\'`,
		`x = '\' OR x = '('`,
		"x = $$)$$ OR x = $a$ ( $a$",
		"x = $a$ $b$ ) $a$",
		"x = $a$x$a$",
		`x = U&'\0028' OR x = U&'!0029' UESCAPE '!'`,
		`U&"x" IS NULL OR "x" IS NULL OR "x)" IS NULL`,
		"B'1' IS NULL OR X'0F' IS NULL OR x = N'('",
		"x IN ('a', 'b') OR x IN (SELECT 'c' UNION SELECT 'd')",
		"EXISTS (SELECT 1 WHERE x = 'a')",
		"x = 'a'\n'b'",
		"x = e'a'",
		"1e5 > 0 AND 0x1F = 31",
		"(x)::int > 0",
	} {
		f.Add(s)
	}

	ctx := context.Background()
	pool := riverslottest.Pool(f)
	f.Fuzz(func(t *testing.T, filter string) {
		err := taskspec.CheckFilter(filter)
		if weightErr := taskspec.CheckWeight(filter); (err == nil) != (weightErr == nil) {
			t.Fatalf("CheckFilter and CheckWeight disagree on %q: %v; %v", filter, err, weightErr)
		}
		if err != nil {
			return
		}
		if err := probeFilter(ctx, t, pool, filter); err != nil {
			t.Fatalf("CheckFilter accepted %q, but %v", filter, err)
		}
	})
}

// probeFilter asks Postgres to plan
//
//	SELECT 1 FROM (SELECT NULL::text AS x) t WHERE false AND (filter) IS TRUE
//
// with standard_conforming_strings on and off, and returns an error if the
// filter escaped its parentheses. Postgres must either refuse the query or
// plan it as one Result node whose one-time filter is false, which
// "false AND (anything) IS TRUE" is: a filter that closes the parenthesis
// turns the query into "(false AND ..) OR (true) OR (..) IS TRUE",
// "false AND (..) UNION ..", or the like, and the plan shows it. (IS TRUE
// keeps Postgres from turning an EXISTS filter into a join before it folds
// the constant.) EXPLAIN only plans: nothing runs.
func probeFilter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, filter string) error {
	t.Helper()

	query := "EXPLAIN (FORMAT JSON) SELECT 1 FROM (SELECT NULL::text AS x) t WHERE false AND (" + filter + ") IS TRUE"
	for _, scs := range []string{"on", "off"} {
		var plan string
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '10s'; SET LOCAL standard_conforming_strings = "+scs); err != nil {
				return err
			}
			return tx.QueryRow(ctx, query, pgx.QueryExecModeExec).Scan(&plan)
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			continue // Postgres refused the query: nothing escaped
		}
		require.NoError(t, err, "probing %q", filter)
		if why := notFalse(plan); why != "" {
			return fmt.Errorf("escaped its parentheses with standard_conforming_strings %s: %s; Postgres planned:\n%s", scs, why, plan)
		}
	}
	return nil
}

// notFalse says why plan (EXPLAIN's JSON) is not one Result node with the
// one-time filter false, or returns "".
func notFalse(plan string) string {
	var plans []struct{ Plan map[string]any }
	if err := json.Unmarshal([]byte(plan), &plans); err != nil {
		return err.Error()
	}
	if len(plans) != 1 {
		return fmt.Sprintf("%d plans", len(plans))
	}
	p := plans[0].Plan
	var extra []string
	for k := range p {
		if k == "Plans" || strings.Contains(k, "Filter") && k != "One-Time Filter" {
			extra = append(extra, k)
		}
	}
	switch {
	case p["Node Type"] != "Result":
		return fmt.Sprintf("a %v node, not a Result", p["Node Type"])
	case p["One-Time Filter"] != "false":
		return fmt.Sprintf("one-time filter %v, not false", p["One-Time Filter"])
	case len(extra) > 0:
		return fmt.Sprintf("the Result has %v", extra)
	}
	return ""
}
