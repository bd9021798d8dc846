package docblocks

import (
	"fmt"
	"strings"
)

// Command is one simple command of a block: its words as the shell passes
// them (quotes removed; a command substitution left as "$(...)", its own
// command listed apart), and the page line it starts on.
type Command struct {
	Line int
	Args []string
}

// reserved are the shell's words that lead a command without being it.
var reserved = map[string]bool{"do": true, "then": true, "else": true, "elif": true, "if": true, "while": true, "until": true, "!": true, "time": true, "{": true}

// Commands returns the simple commands of b in order: continued lines
// joined, comments dropped, here-documents skipped, split at ;, &, &&,
// ||, | and around $( ... ). It knows enough of the shell for the pages'
// blocks, not all of it; what it cannot read (an unterminated quote or
// here-document) is an error naming the line.
func Commands(b Block) ([]Command, error) {
	p := &splitter{block: b}
	lines := strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		p.line = b.Line + 1 + i
		if err := p.scan(lines[i]); err != nil {
			return nil, err
		}
		if p.quote != 0 {
			return nil, fmt.Errorf("%s:%d: unterminated %c quote", b.Page, p.line, p.quote)
		}
		if p.continued {
			p.continued = false
			continue
		}
		p.endCommand()
		for _, end := range p.heredocs {
			for i++; i < len(lines) && strings.TrimLeft(lines[i], "\t") != end; i++ {
			}
			if i == len(lines) {
				return nil, fmt.Errorf("%s:%d: the here-document is never ended by %s", b.Page, p.line, end)
			}
		}
		p.heredocs = nil
	}
	return p.done, nil
}

// splitter holds the state of Commands between characters and lines.
type splitter struct {
	block     Block
	line      int
	word      strings.Builder
	inWord    bool
	quote     byte
	continued bool
	cur       *Command
	// stack holds the commands a $( ... ) interrupted.
	stack    []*Command
	done     []Command
	heredocs []string
	// wantHeredoc: the next word ends a here-document.
	wantHeredoc bool
}

func (p *splitter) scan(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case p.quote == '\'':
			if c == '\'' {
				p.quote = 0
			} else {
				p.word.WriteByte(c)
			}
		case p.quote == '"':
			switch {
			case c == '"':
				p.quote = 0
			case c == '\\' && i+1 < len(s):
				i++
				p.word.WriteByte(s[i])
			default:
				p.word.WriteByte(c)
			}
		case c == '\\':
			if i+1 == len(s) {
				p.endWord()
				p.continued = true
				return nil
			}
			i++
			p.addByte(s[i])
		case c == '\'' || c == '"':
			p.quote = c
			p.inWord = true
		case c == ' ' || c == '\t':
			p.endWord()
		case c == '#' && !p.inWord:
			p.endWord()
			return nil
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			p.word.WriteString("$(...)")
			p.inWord = true
			p.endWord()
			p.stack = append(p.stack, p.cur)
			p.cur = nil
			i++
		case c == ')' && len(p.stack) > 0:
			p.endCommand()
			p.cur = p.stack[len(p.stack)-1]
			p.stack = p.stack[:len(p.stack)-1]
		case c == ';' || c == '&' || c == '|' || c == '(' || c == ')':
			p.endCommand()
		case c == '<' && strings.HasPrefix(s[i:], "<<<"):
			p.endWord()
			i += 2
		case c == '<' && strings.HasPrefix(s[i:], "<<"):
			p.endWord()
			i++
			if i+1 < len(s) && s[i+1] == '-' {
				i++
			}
			p.wantHeredoc = true
		default:
			p.addByte(c)
		}
	}
	if p.quote == 0 {
		p.endWord()
	}
	return nil
}

func (p *splitter) addByte(c byte) {
	p.word.WriteByte(c)
	p.inWord = true
}

func (p *splitter) endWord() {
	if !p.inWord {
		return
	}
	w := p.word.String()
	p.word.Reset()
	p.inWord = false
	if p.wantHeredoc {
		p.heredocs = append(p.heredocs, w)
		p.wantHeredoc = false
		return
	}
	if p.cur == nil {
		if name, _, ok := strings.Cut(w, "="); reserved[w] || (ok && isName(name)) {
			return
		}
		p.cur = &Command{Line: p.line}
	}
	p.cur.Args = append(p.cur.Args, w)
}

func (p *splitter) endCommand() {
	p.endWord()
	if p.cur != nil {
		p.done = append(p.done, *p.cur)
	}
	p.cur = nil
}

// isName says whether s is a shell variable's name, as in NAME=value
// before a command.
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
