package docblocks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Placeholder is a row of the placeholders' table: a word of the blocks
// that the reader replaces with their own, and the test with its value.
type Placeholder struct {
	Word      string
	StandsFor string
	// Value is the test's value where the table gives it (a cell that
	// starts with a literal in backticks); empty where the test computes
	// it (the cell says how).
	Value string
	// Line is the row's line in the table's page.
	Line int
}

// Table is the placeholders' page: its rows, and the words in capitals
// that are literal, not placeholders (a here-document's EOF).
type Table struct {
	Page         string
	Placeholders []Placeholder
	Literal      []string
}

// literalPrefix starts the table page's line that lists the words in
// capitals that are not placeholders.
const literalPrefix = "Words in capitals that are not placeholders:"

// ReadTable reads the placeholders' table of root/page: the first
// markdown table whose header is | placeholder | stands for | the test's
// value |, and the line starting with literalPrefix.
func ReadTable(root, page string) (*Table, error) {
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	return ParseTable(page, string(data))
}

// ParseTable is ReadTable of the page's text.
func ParseTable(page, text string) (*Table, error) {
	t := &Table{Page: page}
	inTable, seen := false, map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, literalPrefix):
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				t.Literal = append(t.Literal, m[1])
			}
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case len(t.Placeholders) == 0 && !inTable:
			cells := splitRow(line)
			if len(cells) == 3 && strings.EqualFold(cells[0], "placeholder") && strings.EqualFold(cells[1], "stands for") && strings.EqualFold(cells[2], "the test's value") {
				inTable = true
			}
		case inTable && strings.HasPrefix(line, "|---"):
		case inTable:
			cells := splitRow(line)
			if len(cells) != 3 {
				return nil, fmt.Errorf("%s:%d: a row of the placeholders' table has %d cells, want 3", page, i+1, len(cells))
			}
			m := backticked.FindStringSubmatch(cells[0])
			if m == nil || m[0] != cells[0] {
				return nil, fmt.Errorf("%s:%d: the placeholder %q is not one word in backticks", page, i+1, cells[0])
			}
			p := Placeholder{Word: m[1], StandsFor: cells[1], Line: i + 1}
			if v := backticked.FindStringSubmatch(cells[2]); v != nil && strings.HasPrefix(cells[2], "`") {
				p.Value = v[1]
			}
			if prev, ok := seen[p.Word]; ok {
				return nil, fmt.Errorf("%s:%d: the placeholder %s is in the table already, on line %d", page, i+1, p.Word, prev)
			}
			seen[p.Word] = p.Line
			t.Placeholders = append(t.Placeholders, p)
		}
	}
	if len(t.Placeholders) == 0 {
		return nil, fmt.Errorf("%s: no table | placeholder | stands for | the test's value |", page)
	}
	return t, nil
}

var backticked = regexp.MustCompile("`([^`]+)`")

func splitRow(line string) []string {
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// Filler puts values in place of the table's placeholders and says what
// else in a block looks like a placeholder.
type Filler struct {
	table  *Table
	values map[string]string
	// words are the placeholders, longest first: registry.example.com/mcsd
	// before a shorter one it contains.
	words []string
	used  map[string]int
}

// Filler returns the filler of the table, with the test's values of the
// placeholders the table gives none. Every placeholder must have exactly
// one value: the table's or the test's, not both (unless the same), and
// the test may give none for a word the table lacks.
func (t *Table) Filler(computed map[string]string) (*Filler, error) {
	f := &Filler{table: t, values: map[string]string{}, used: map[string]int{}}
	var errs []string
	for _, p := range t.Placeholders {
		v, ok := computed[p.Word]
		switch {
		case ok && p.Value != "" && v != p.Value:
			errs = append(errs, fmt.Sprintf("%s:%d: %s is %q in the table, but the test has %q", t.Page, p.Line, p.Word, p.Value, v))
		case ok:
			f.values[p.Word] = v
		case p.Value != "":
			f.values[p.Word] = p.Value
		default:
			errs = append(errs, fmt.Sprintf("%s:%d: %s has no value: neither a literal in the table nor one the test computes", t.Page, p.Line, p.Word))
		}
		f.words = append(f.words, p.Word)
	}
	for w := range computed {
		if _, ok := f.values[w]; !ok && !t.has(w) {
			errs = append(errs, fmt.Sprintf("%s: the test has a value for %s, which the table lacks", t.Page, w))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	sort.SliceStable(f.words, func(i, j int) bool { return len(f.words[i]) > len(f.words[j]) })
	return f, nil
}

func (t *Table) has(word string) bool {
	for _, p := range t.Placeholders {
		if p.Word == word {
			return true
		}
	}
	return false
}

// looksLikePlaceholder matches what a reader would take for a placeholder:
// a word in capitals (not a shell variable's $NAME), a host of
// example.com, a CIDR or a version.
var looksLikePlaceholder = regexp.MustCompile(`(^|[^$A-Za-z0-9_{])([A-Z][A-Z0-9_]*[A-Z0-9])\b|[A-Za-z0-9.-]*example\.(com|org|net)[^\s'",]*|\b\d{1,3}(\.\d{1,3}){3}/\d{1,2}\b|\bv\d+\.\d+\.\d+\b`)

// Fill returns b's text with the placeholders' values, and the
// placeholder-looking words of b that are not the table's, each with its
// page line.
func (f *Filler) Fill(b Block) (string, []string) {
	var unknown []string
	lines := strings.Split(b.Text, "\n")
	for i, line := range lines {
		var rest strings.Builder
		lines[i] = f.replace(line, &rest)
		for _, m := range looksLikePlaceholder.FindAllStringSubmatch(rest.String(), -1) {
			word := strings.TrimSpace(m[0])
			if m[2] != "" {
				word = m[2]
			}
			if !f.literal(word) {
				unknown = append(unknown, fmt.Sprintf("%s:%d: %s looks like a placeholder, but %s does not list it", b.Page, b.Line+1+i, word, f.table.Page))
			}
		}
	}
	return strings.Join(lines, "\n"), unknown
}

// replace returns line with every placeholder's value, counting it, and
// writes to rest the line with the placeholders blanked out.
func (f *Filler) replace(line string, rest *strings.Builder) string {
	var out strings.Builder
	for i := 0; i < len(line); {
		word := f.placeholderAt(line, i)
		if word == "" {
			out.WriteByte(line[i])
			rest.WriteByte(line[i])
			i++
			continue
		}
		f.used[word]++
		out.WriteString(f.values[word])
		rest.WriteString(" ")
		i += len(word)
	}
	return out.String()
}

// placeholderAt is the placeholder at line[i:], a whole word there (no
// letter, digit or _ on either side), or "".
func (f *Filler) placeholderAt(line string, i int) string {
	if i > 0 && wordByte(line[i-1]) {
		return ""
	}
	for _, w := range f.words {
		if strings.HasPrefix(line[i:], w) && (i+len(w) == len(line) || !wordByte(line[i+len(w)])) {
			return w
		}
	}
	return ""
}

func wordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

func (f *Filler) literal(word string) bool {
	for _, l := range f.table.Literal {
		if l == word {
			return true
		}
	}
	return false
}

// Unused names the table's placeholders that no block filled so far
// used, with their lines in the table.
func (f *Filler) Unused() []string {
	var out []string
	for _, p := range f.table.Placeholders {
		if f.used[p.Word] == 0 {
			out = append(out, fmt.Sprintf("%s:%d: %s is in the table, but no block uses it", f.table.Page, p.Line, p.Word))
		}
	}
	return out
}

// Value is the value put in place of the placeholder word ("" for a word
// the table lacks).
func (f *Filler) Value(word string) string { return f.values[word] }
