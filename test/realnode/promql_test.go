package realnode

import (
	"fmt"
	"sort"
	"strings"
)

// promqlKeywords are PromQL's words that read as identifiers but name no series:
// aggregations, binary operators and modifiers. An aggregation such as sum
// may come before its by-clause rather than its "(".
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
}

// promqlLabelLists are the words followed by a parenthesised list of label
// names, not of expressions.
var promqlLabelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names expr selects, sorted and once
// each: bare names (rate(a_total[5m])) and __name__="..." matchers. Strings,
// label matchers, ranges, numbers and durations, function calls, keywords
// and the label lists of by, on and the like are not names. An expression
// whose brackets or quotes do not balance is an error.
func metricNames(expr string) ([]string, error) {
	names := map[string]bool{}
	var closers []byte
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := promqlStringEnd(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, name, err := promqlMatchers(expr, i)
			if err != nil {
				return nil, err
			}
			if name != "" {
				names[name] = true
			}
			i = end
		case c == '[':
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("%q: unclosed [ at %d", expr, i)
			}
			i += end + 1
		case c == '(':
			closers = append(closers, ')')
			i++
		case c == ')':
			if len(closers) == 0 {
				return nil, fmt.Errorf("%q: unopened ) at %d", expr, i)
			}
			closers = closers[:len(closers)-1]
			i++
		case c == '#':
			// A comment runs to the end of the line.
			if nl := strings.IndexByte(expr[i:], '\n'); nl >= 0 {
				i += nl
			} else {
				i = len(expr)
			}
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			// A number or a duration (5m, 1e3, 0x1f): its letters name nothing.
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := skipSpace(expr, i)
			switch {
			case promqlLabelLists[strings.ToLower(word)] && next < len(expr) && expr[next] == '(':
				end := strings.IndexByte(expr[next:], ')')
				if end < 0 {
					return nil, fmt.Errorf("%q: unclosed label list after %s", expr, word)
				}
				i = next + end + 1
			case promqlKeywords[strings.ToLower(word)]:
			case next < len(expr) && expr[next] == '(':
				// A function call.
			default:
				names[word] = true
			}
		default:
			i++
		}
	}
	if len(closers) > 0 {
		return nil, fmt.Errorf("%q: %d unclosed (", expr, len(closers))
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// promqlMatchers skips the label matchers that open at expr[i] ('{'), returning
// where they end and the name a __name__ equality matcher gives.
func promqlMatchers(expr string, i int) (end int, name string, err error) {
	label := i + 1 // where the current matcher starts
	for j := i + 1; j < len(expr); j++ {
		switch expr[j] {
		case '}':
			return j + 1, name, nil
		case ',':
			label = j + 1
		case '"', '\'', '`':
			se, err := promqlStringEnd(expr, j)
			if err != nil {
				return 0, "", err
			}
			if op := strings.TrimSpace(expr[label:j]); strings.HasPrefix(op, "__name__") && strings.TrimSpace(strings.TrimPrefix(op, "__name__")) == "=" {
				name = expr[j+1 : se-1]
			}
			j = se - 1
		}
	}
	return 0, "", fmt.Errorf("%q: unclosed { at %d", expr, i)
}

// promqlStringEnd returns the index after the string literal opening at expr[i].
func promqlStringEnd(expr string, i int) (int, error) {
	quote := expr[i]
	for j := i + 1; j < len(expr); j++ {
		if expr[j] == '\\' && quote != '`' {
			j++
			continue
		}
		if expr[j] == quote {
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%q: unclosed string at %d", expr, i)
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }
