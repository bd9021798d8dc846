// Package corefile reads and edits CoreDNS Corefiles as text: it finds
// their top-level entries (server blocks, snippets, imports) and sets or
// removes the server block of one zone, leaving every other byte as it
// was, so that an operator's Corefile keeps its comments and layout. It
// does not validate a Corefile; CoreDNS does.
package corefile

import (
	"fmt"
	"strings"
)

// Entry is one top-level entry of a Corefile: a server block (its keys
// are its zones, such as ".:53" or "clusterset.local"), a snippet, or a
// directive such as import (its keys are the directive and arguments).
type Entry struct {
	Keys []string
	// Start and End are the entry's bytes: from the start of its first
	// line to the end of its last, its newline included.
	Start, End int
}

// Parse finds the top-level entries of corefile. It refuses braces that
// do not balance.
func Parse(corefile string) ([]Entry, error) {
	var entries []Entry
	depth, offset := 0, 0
	var cur *Entry
	for offset < len(corefile) {
		end := strings.IndexByte(corefile[offset:], '\n')
		if end < 0 {
			end = len(corefile)
		} else {
			end += offset + 1
		}
		line := corefile[offset:end]
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if depth == 0 && len(fields) > 0 {
			keys := fields
			if i := indexOf(keys, "{"); i >= 0 {
				keys = keys[:i]
			}
			for i, k := range keys {
				keys[i] = strings.TrimSuffix(k, "{")
			}
			entries = append(entries, Entry{Keys: keys, Start: offset})
			cur = &entries[len(entries)-1]
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth < 0 {
			return nil, fmt.Errorf("corefile: a closing brace without an opening one at byte %d", offset)
		}
		if cur != nil {
			cur.End = end
			if depth == 0 {
				cur = nil
			}
		}
		offset = end
	}
	if depth != 0 {
		return nil, fmt.Errorf("corefile: %d braces left open", depth)
	}
	return entries, nil
}

func indexOf(fields []string, s string) int {
	for i, f := range fields {
		if f == s || strings.HasPrefix(f, s) {
			return i
		}
	}
	return -1
}

// Zone is a server block key as a zone name: without scheme, port and
// trailing dot, in lower case ("dns://Cluster.Local.:53" is
// "cluster.local"; ".:53" is ".").
func Zone(key string) string {
	if i := strings.Index(key, "://"); i >= 0 {
		key = key[i+3:]
	}
	if i := strings.LastIndexByte(key, ':'); i >= 0 {
		key = key[:i]
	}
	if key != "." {
		key = strings.TrimSuffix(key, ".")
	}
	return strings.ToLower(key)
}

// Serves says whether e is a server block for zone.
func (e Entry) Serves(zone string) bool {
	if len(e.Keys) == 0 || e.Keys[0] == "import" || strings.HasPrefix(e.Keys[0], "(") {
		return false
	}
	for _, k := range e.Keys {
		if Zone(k) == zone {
			return true
		}
	}
	return false
}

// Block returns the server block of zone in corefile, if there is one. It
// refuses a Corefile with several: CoreDNS would too.
func Block(corefile, zone string) (Entry, bool, error) {
	entries, err := Parse(corefile)
	if err != nil {
		return Entry{}, false, err
	}
	var found []Entry
	for _, e := range entries {
		if e.Serves(zone) {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return Entry{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return Entry{}, false, fmt.Errorf("corefile: %d server blocks serve %s", len(found), zone)
}

// Set returns corefile with block as its server block of zone: in place
// of the one it has, else appended. Every other byte stays. block must be
// one server block serving zone.
func Set(corefile, zone, block string) (string, error) {
	if !strings.HasSuffix(block, "\n") {
		block += "\n"
	}
	if entries, err := Parse(block); err != nil || len(entries) != 1 || !entries[0].Serves(zone) {
		return "", fmt.Errorf("corefile: the block to set is not one server block of %s:\n%s", zone, block)
	}
	e, found, err := Block(corefile, zone)
	if err != nil {
		return "", err
	}
	if found {
		return corefile[:e.Start] + block + corefile[e.End:], nil
	}
	if corefile != "" && !strings.HasSuffix(corefile, "\n") {
		corefile += "\n"
	}
	return corefile + block, nil
}

// Remove returns corefile without its server block of zone, and whether
// it had one.
func Remove(corefile, zone string) (string, bool, error) {
	e, found, err := Block(corefile, zone)
	if err != nil || !found {
		return corefile, false, err
	}
	return corefile[:e.Start] + corefile[e.End:], true, nil
}

// Imports are the arguments of corefile's top-level import directives,
// such as "custom/*.server": the files whose server blocks it includes.
func Imports(corefile string) ([]string, error) {
	entries, err := Parse(corefile)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if len(e.Keys) > 1 && e.Keys[0] == "import" {
			out = append(out, e.Keys[1:]...)
		}
	}
	return out, nil
}

// Forwards are the targets of the forward plugin in corefile's server
// block of zone (none when it has no such block or no forward).
func Forwards(corefile, zone string) ([]string, error) {
	e, found, err := Block(corefile, zone)
	if err != nil || !found {
		return nil, err
	}
	var targets []string
	depth := 0
	for _, line := range strings.SplitAfter(corefile[e.Start:e.End], "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if depth == 1 && len(fields) >= 3 && fields[0] == "forward" {
			for _, t := range fields[2:] {
				if strings.HasPrefix(t, "{") {
					break
				}
				targets = append(targets, t)
			}
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
	}
	return targets, nil
}

// Derive returns a server block for zone made from corefile's server
// block of from: the same plugins (a NodeLocal DNSCache's bind address,
// cache and forwarding to the cluster DNS), its first key's zone replaced
// by zone (the port kept), without the health plugin, whose address only
// one block may hold.
func Derive(corefile, from, zone string) (string, error) {
	e, found, err := Block(corefile, from)
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("corefile: no server block of %s to derive one of %s from", from, zone)
	}
	text := corefile[e.Start:e.End]
	first, rest, _ := strings.Cut(text, "\n")
	key := e.Keys[0]
	if i := strings.Index(key, "://"); i >= 0 {
		key = key[i+3:]
	}
	port := ""
	if i := strings.LastIndexByte(key, ':'); i >= 0 {
		port = key[i:]
	}
	indent := first[:len(first)-len(strings.TrimLeft(first, " \t"))]
	var b strings.Builder
	b.WriteString(indent + zone + port + " {\n")
	depth, skip := 1, 0
	for _, line := range strings.SplitAfter(rest, "\n") {
		fields := strings.Fields(line)
		opens, closes := strings.Count(line, "{"), strings.Count(line, "}")
		if skip > 0 {
			skip += opens - closes
			depth += opens - closes
			continue
		}
		if depth == 1 && len(fields) > 0 && fields[0] == "health" {
			if opens > closes {
				skip = opens - closes
			}
			depth += opens - closes
			continue
		}
		depth += opens - closes
		b.WriteString(line)
	}
	out := b.String()
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out, nil
}

// ClusterDomain is the zone of corefile's first server block that serves
// a domain of its own (not the root, not a reverse zone): a NodeLocal
// DNSCache's cluster.local:53.
func ClusterDomain(corefile string) (string, bool, error) {
	entries, err := Parse(corefile)
	if err != nil {
		return "", false, err
	}
	for _, e := range entries {
		if len(e.Keys) == 0 || e.Keys[0] == "import" || strings.HasPrefix(e.Keys[0], "(") {
			continue
		}
		z := Zone(e.Keys[0])
		if z != "." && z != "arpa" && !strings.HasSuffix(z, ".arpa") {
			return z, true, nil
		}
	}
	return "", false, nil
}
