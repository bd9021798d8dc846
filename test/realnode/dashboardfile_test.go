package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// dashboardQuery is one PromQL query of a dashboard, its variables replaced by
// values Prometheus accepts.
type dashboardQuery struct {
	// Where names the query: the panel's title and the target's refId, or
	// the template variable's name.
	Where string
	Expr  string
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashboardFile struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// loadDashboard returns every query of the dashboard at path: each panel's targets
// (rows' panels included) and each query variable's label_values()
// selector. A target or variable without a query is an error.
func loadDashboard(path string) ([]dashboardQuery, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f dashboardFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var qs []dashboardQuery
	var walk func([]dashboardPanel) error
	walk = func(ps []dashboardPanel) error {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("%s: panel %q target %s has no expr", path, p.Title, t.RefID)
				}
				qs = append(qs, dashboardQuery{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: substituteVariables(t.Expr)})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(f.Panels); err != nil {
		return nil, err
	}
	for _, v := range f.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := dashboardVariableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("%s: variable %q: %w", path, v.Name, err)
		}
		qs = append(qs, dashboardQuery{Where: fmt.Sprintf("variable %q", v.Name), Expr: substituteVariables(q)})
	}
	return qs, nil
}

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// dashboardVariableQuery is the selector of a query variable, given as a string or
// as Grafana's {"query": ...} object.
func dashboardVariableQuery(raw json.RawMessage) (string, error) {
	var q string
	if err := json.Unmarshal(raw, &q); err != nil {
		var o struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return "", fmt.Errorf("query is neither a string nor {\"query\": ...}: %s", raw)
		}
		q = o.Query
	}
	m := labelValues.FindStringSubmatch(q)
	if m == nil {
		return "", fmt.Errorf("query %q is not label_values(<selector>, <label>)", q)
	}
	return m[1], nil
}

var (
	// Grafana's interval variables stand for a range.
	intervalVar = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}`)
	// The dashboard's own variables stand inside label matchers' regexps.
	userVar = regexp.MustCompile(`\$\{[a-zA-Z_][a-zA-Z0-9_]*(:[a-z]+)?\}|\$[a-zA-Z_][a-zA-Z0-9_]*`)
)

// substituteVariables gives the dashboard's variables values Prometheus
// accepts.
func substituteVariables(expr string) string {
	return userVar.ReplaceAllString(intervalVar.ReplaceAllString(expr, "5m"), ".*")
}
