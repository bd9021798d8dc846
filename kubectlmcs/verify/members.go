package verify

import (
	"fmt"
	"slices"
	"strings"
)

// Candidate is a kubeconfig context that may reach a member: its name and
// the cluster ID of its cluster, or why it has none (it could not be
// reached).
type Candidate struct {
	Context string
	ID      string
	Err     error
}

// Choice is what Choose found: the contexts of the members to verify, one
// per member, and why each other context was left out.
type Choice struct {
	Members []Candidate
	// Left says, for each context left out, why.
	Left []string
}

// Choose picks the contexts to verify among candidates: those whose
// cluster ID is one of the broker's members, one context per cluster (the
// first by name), and only those of narrow (--contexts) when it is not
// empty. A context narrow names must be there and reach a member. Fewer
// than two members is an error naming what was found.
func Choose(candidates []Candidate, members, narrow []string) (Choice, error) {
	candidates = slices.Clone(candidates)
	slices.SortFunc(candidates, func(a, b Candidate) int { return strings.Compare(a.Context, b.Context) })
	for _, n := range narrow {
		if !slices.ContainsFunc(candidates, func(c Candidate) bool { return c.Context == n }) {
			return Choice{}, fmt.Errorf("--contexts: no context %q in the kubeconfig", n)
		}
	}
	var ch Choice
	byID := map[string]string{}
	for _, c := range candidates {
		named := slices.Contains(narrow, c.Context)
		var why string
		switch {
		case len(narrow) > 0 && !named:
			continue
		case c.Err != nil:
			why = fmt.Sprintf("%s: could not read its cluster ID: %v", c.Context, c.Err)
		case !slices.Contains(members, c.ID):
			why = fmt.Sprintf("%s: cluster %s is not a member of the broker", c.Context, c.ID)
		case byID[c.ID] != "":
			why = fmt.Sprintf("%s: the same cluster (%s) as %s", c.Context, c.ID, byID[c.ID])
		}
		if why != "" {
			if named && !strings.Contains(why, "the same cluster") {
				return Choice{}, fmt.Errorf("--contexts: %s", why)
			}
			ch.Left = append(ch.Left, why)
			continue
		}
		byID[c.ID] = c.Context
		ch.Members = append(ch.Members, c)
	}
	if len(ch.Members) < 2 {
		found := "none"
		if len(ch.Members) == 1 {
			found = "only " + ch.Members[0].String()
		}
		return ch, fmt.Errorf("verify needs the contexts of two members at least; of the broker's members (%s), the kubeconfig's contexts reach %s%s",
			listOrNone(members), found, leftOut(ch.Left))
	}
	return ch, nil
}

func (c Candidate) String() string { return fmt.Sprintf("%s (cluster %s)", c.Context, c.ID) }

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func leftOut(left []string) string {
	if len(left) == 0 {
		return ""
	}
	return "; left out: " + strings.Join(left, "; ")
}
