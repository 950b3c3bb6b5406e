package taskspec

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// CheckFilter returns an error unless filter is one balanced SQL expression
// that can be spliced into "AND (filter)" without escaping its parentheses.
// A filter such as "true) OR (true" would otherwise turn
// "WHERE bucket BETWEEN .. AND (f)" into a query that ignores the bucket
// range.
//
// The check reads the filter with PostgreSQL's lexical rules: parentheses
// must balance outside string constants, quoted identifiers and
// dollar-quoted strings, and never close more than they opened. It reads
// these as Postgres does:
//
//	'it''s'         a quote doubled inside; a backslash is a character
//	E'it\'s'        a backslash escapes the next character
//	B'101' X'1F'    end at the first quote
//	N'..' U&'..'    as '..'
//	"a ""b"""       identifiers, U&"..." too
//	$tag$ .. $tag$  dollar-quoted, $$ .. $$ too
//
// and refuses: ';', comments, bind parameters ($1), text that is not UTF-8
// or holds a NUL byte, a '$' that opens nothing, a quote or '$' directly
// after a number, a string constant followed by another (Postgres joins
// them across a newline), and a backslash before a quote in '..', which
// ends the string only when standard_conforming_strings is on (write E'..').
func CheckFilter(filter string) error {
	return checkExpr(filter, func(why string) error {
		return fmt.Errorf("Filter must be one balanced SQL boolean expression (%s), got %q; write a plain condition such as \"active AND NOT restricted\"", why, filter)
	})
}

// CheckWeight is CheckFilter for a task's Weight: one balanced numeric SQL
// expression of the accounts table's columns, spliced into queries inside
// parentheses.
func CheckWeight(weight string) error {
	return checkExpr(weight, func(why string) error {
		return fmt.Errorf("Weight must be one balanced numeric SQL expression (%s), got %q; write a column or an expression such as \"weight\" or \"seats * 2 + 1\"", why, weight)
	})
}

// CheckUpstream returns an error naming Upstream unless upstream is one
// balanced expression (see CheckFilter).
func CheckUpstream(upstream string) error {
	return checkExpr(upstream, func(why string) error {
		return fmt.Errorf("Upstream must be one balanced SQL expression of the accounts table's columns (%s), got %q; write a column or an expression such as \"bank_id\" or \"coalesce(bank_id::text, 'default')\"", why, upstream)
	})
}

// checkExpr returns fail(why) unless expr is one balanced expression (see
// CheckFilter). It is a lexer for the part of PostgreSQL's grammar that
// decides where a token ends (src/backend/parser/scan.l): whatever it cannot
// read exactly as Postgres does, it refuses.
func checkExpr(expr string, fail func(why string) error) error {
	if !utf8.ValidString(expr) {
		return fail("it is not valid UTF-8")
	}
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == 0:
			return fail("NUL bytes are not allowed")
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			if depth < 0 {
				return fail("a ')' closes a parenthesis it did not open")
			}
			i++
		case c == ';':
			return fail("';' is not allowed")
		case c == '-' && strings.HasPrefix(expr[i:], "--"):
			return fail("'--' comments are not allowed")
		case c == '/' && strings.HasPrefix(expr[i:], "/*"):
			return fail("'/*' comments are not allowed")
		case c == '\'':
			end, err := scanString(expr, i, stringStandard)
			if err != nil {
				return fail(err.Error())
			}
			i = end
		case c == '"':
			end, err := scanQuotedIdent(expr, i)
			if err != nil {
				return fail(err.Error())
			}
			i = end
		case c == '$':
			end, err := scanDollar(expr, i)
			if err != nil {
				return fail(err.Error())
			}
			i = end
		case isIdentStart(c):
			// A name, keyword, or the prefix of a string constant (E'..',
			// B'..', X'..', N'..', U&'..', U&"..") when it is the whole name
			// and the quote follows at once, as in Postgres, where the
			// longest match wins: xe'..' is the name xe and a '..' string.
			j := i + 1
			for j < len(expr) && isIdentCont(expr[j]) {
				j++
			}
			var end int
			var err error
			switch word := expr[i:j]; {
			case j == len(expr):
				end = j
			case len(word) == 1 && expr[j] == '\'' && strings.ContainsRune("eE", rune(c)):
				end, err = scanString(expr, j, stringEscape)
			case len(word) == 1 && expr[j] == '\'' && strings.ContainsRune("bBxX", rune(c)):
				end, err = scanString(expr, j, stringBits)
			case len(word) == 1 && strings.ContainsRune("uU", rune(c)) && strings.HasPrefix(expr[j:], "&'"):
				end, err = scanString(expr, j+1, stringUnicode)
			case len(word) == 1 && strings.ContainsRune("uU", rune(c)) && strings.HasPrefix(expr[j:], `&"`):
				end, err = scanQuotedIdent(expr, j+1)
			default:
				// N'..' is the keyword NATIONAL CHARACTER and a standard
				// string; any other name followed by a quote (date '..')
				// is a name and a standard string too.
				end = j
			}
			if err != nil {
				return fail(err.Error())
			}
			i = end
		case c >= '0' && c <= '9':
			// A number, read generously: digits, letters, '_' and '.'
			// (1.5e3, 0x1F, 1_000). Postgres may split it where this does
			// not (1e' is 1 and e' in PostgreSQL 14 and older), so nothing
			// that opens a quote may follow directly.
			j := i + 1
			for j < len(expr) && (isIdentStart(expr[j]) || expr[j] >= '0' && expr[j] <= '9' || expr[j] == '.') {
				j++
			}
			if j < len(expr) && (expr[j] == '\'' || expr[j] == '"' || expr[j] == '$') {
				return fail(fmt.Sprintf("a quote or '$' directly after the number %s; put a space or an operator between them", expr[i:j]))
			}
			i = j
		default:
			i++
		}
	}
	if depth != 0 {
		return fail(fmt.Sprintf("%d '(' left open", depth))
	}
	return nil
}

// stringKind is how the body of a '...' string constant is read.
type stringKind int

const (
	// stringStandard: '...' and N'...'. '' is a quote; a backslash is a
	// character when standard_conforming_strings is on (the default) and
	// escapes the next one when it is off.
	stringStandard stringKind = iota
	// stringEscape: E'...'. '' is a quote; a backslash escapes the next
	// character.
	stringEscape
	// stringBits: B'...' and X'...'. The first quote ends the string.
	stringBits
	// stringUnicode: U&'...'. '' is a quote; backslashes are Unicode
	// escapes that never escape a quote.
	stringUnicode
)

// scanString returns the index after the string constant whose opening
// quote is expr[start].
func scanString(expr string, start int, kind stringKind) (int, error) {
	var end int
	switch kind {
	case stringStandard:
		on, okOn := stringEnd(expr, start, false)
		off, okOff := stringEnd(expr, start, true)
		if !okOn && !okOff {
			return 0, errors.New("unterminated '-quoted text")
		}
		if okOn != okOff || on != off {
			return 0, errors.New(`a backslash before a quote in '...' text, which ends the string only when standard_conforming_strings is on; write E'...' with \' or '' for the quote`)
		}
		end = on
	case stringEscape:
		var ok bool
		if end, ok = stringEnd(expr, start, true); !ok {
			return 0, errors.New("unterminated E'...' text")
		}
	case stringBits:
		j := strings.IndexByte(expr[start+1:], '\'')
		if j < 0 {
			return 0, errors.New("unterminated B'...' or X'...' text")
		}
		end = start + 1 + j + 1
	case stringUnicode:
		var ok bool
		if end, ok = stringEnd(expr, start, false); !ok {
			return 0, errors.New("unterminated U&'...' text")
		}
	}
	// Postgres continues a string constant with the next one when only
	// whitespace holding a newline separates them ('a'<newline>'b' is 'ab'),
	// read the way the first one is read; without a newline the pair is a
	// syntax error. Neither is needed in a filter.
	j := end
	for j < len(expr) && strings.IndexByte(" \t\n\r\f\v", expr[j]) >= 0 {
		j++
	}
	if j < len(expr) && expr[j] == '\'' {
		return 0, errors.New("a string constant directly followed by another; write one constant (or join them with ||)")
	}
	return end, nil
}

// stringEnd returns the index after the quote that closes the string opened
// at expr[start], and false if none does. Two quotes in a row are a quote;
// with backslash, a backslash escapes the next byte.
func stringEnd(expr string, start int, backslash bool) (int, bool) {
	for i := start + 1; i < len(expr); i++ {
		switch expr[i] {
		case '\\':
			if backslash {
				i++
			}
		case '\'':
			if i+1 < len(expr) && expr[i+1] == '\'' {
				i++
				continue
			}
			return i + 1, true
		}
	}
	return 0, false
}

// scanQuotedIdent returns the index after the quoted identifier opened at
// expr[start]; "" is a quote.
func scanQuotedIdent(expr string, start int) (int, error) {
	for i := start + 1; i < len(expr); i++ {
		if expr[i] == '"' {
			if i+1 < len(expr) && expr[i+1] == '"' {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	return 0, errors.New(`unterminated "-quoted text`)
}

// scanDollar returns the index after the $tag$...$tag$ string opened at
// expr[start]. A '$' that opens none (a bind parameter such as $1, or a lone
// '$') is refused; a '$' inside a name (a$b) never gets here.
func scanDollar(expr string, start int) (int, error) {
	j := start + 1
	if j < len(expr) && expr[j] >= '0' && expr[j] <= '9' {
		return 0, errors.New("bind parameters such as $1 are not allowed; write values as literals")
	}
	if j < len(expr) && isIdentStart(expr[j]) {
		j++
		for j < len(expr) && isIdentCont(expr[j]) && expr[j] != '$' {
			j++
		}
	}
	if j >= len(expr) || expr[j] != '$' {
		return 0, errors.New("a '$' that opens no dollar-quoted string ($tag$...$tag$)")
	}
	tag := expr[start : j+1]
	k := strings.Index(expr[j+1:], tag)
	if k < 0 {
		return 0, fmt.Errorf("unterminated dollar-quoted text (no closing %s)", tag)
	}
	return j + 1 + k + len(tag), nil
}

// isIdentStart reports whether c starts a name in Postgres: a letter, '_'
// or any byte of a multibyte UTF-8 character.
func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

// isIdentCont reports whether c continues a name in Postgres: also digits
// and '$'.
func isIdentCont(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}
