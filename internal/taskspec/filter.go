package taskspec

import (
	"errors"
	"fmt"
)

// CheckFilter returns an error unless filter is one balanced SQL expression
// that can be spliced into "AND (filter)" without escaping its parentheses:
// parentheses balance and never close more than they opened, outside string
// literals, quoted identifiers and dollar-quoted strings; no ';' and no
// comments (which could swallow the rest of the query). A filter such as
// "true) OR (true" would otherwise turn "WHERE bucket BETWEEN .. AND (f)"
// into a query that ignores the bucket range.
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

// checkExpr returns fail(why) unless filter is one balanced expression (see
// CheckFilter).
func checkExpr(filter string, fail func(why string) error) error {
	depth := 0
	for i := 0; i < len(filter); i++ {
		switch c := filter[i]; c {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return fail("a ')' closes a parenthesis it did not open")
			}
		case ';':
			return fail("';' is not allowed")
		case '-':
			if i+1 < len(filter) && filter[i+1] == '-' {
				return fail("'--' comments are not allowed")
			}
		case '/':
			if i+1 < len(filter) && filter[i+1] == '*' {
				return fail("'/*' comments are not allowed")
			}
		case '\'', '"':
			end, err := skipQuoted(filter, i, c)
			if err != nil {
				return fail(err.Error())
			}
			i = end
		case '$':
			end, ok, err := skipDollarQuoted(filter, i)
			if err != nil {
				return fail(err.Error())
			}
			if ok {
				i = end
			}
		}
	}
	if depth != 0 {
		return fail(fmt.Sprintf("%d '(' left open", depth))
	}
	return nil
}

// skipQuoted returns the index of the quote closing the literal or
// identifier opened at filter[start]; a doubled quote is an escaped one.
func skipQuoted(filter string, start int, quote byte) (int, error) {
	for i := start + 1; i < len(filter); i++ {
		if filter[i] == quote {
			if i+1 < len(filter) && filter[i+1] == quote {
				i++
				continue
			}
			return i, nil
		}
	}
	return 0, fmt.Errorf("unterminated %c-quoted text", quote)
}

// skipDollarQuoted handles $tag$...$tag$ strings; a '$' that does not open
// one (a parameter such as $1, or part of an identifier) is left alone.
func skipDollarQuoted(filter string, start int) (int, bool, error) {
	j := start + 1
	for j < len(filter) && (filter[j] == '_' || isAlnum(filter[j])) {
		j++
	}
	if start+1 < len(filter) && filter[start+1] >= '0' && filter[start+1] <= '9' {
		return 0, false, errors.New("bind parameters such as $1 are not allowed; write values as literals")
	}
	if j >= len(filter) || filter[j] != '$' {
		return 0, false, nil
	}
	tag := filter[start : j+1]
	for k := j + 1; k+len(tag) <= len(filter); k++ {
		if filter[k:k+len(tag)] == tag {
			return k + len(tag) - 1, true, nil
		}
	}
	return 0, false, errors.New("unterminated dollar-quoted text")
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
