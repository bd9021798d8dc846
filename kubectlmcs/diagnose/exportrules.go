package diagnose

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcsd-io/mcsd/broker"
)

// exportRules warns of each namespace that several members export and no
// export rule covers. There, any member may export the namespace's names
// too: one that exports a name first decides its service, and one that
// exports it alongside joins its endpoints to it. That is the KEP's
// namespace sameness, and may be meant; a rule naming the namespace's
// owners closes it.
func (r *run) exportRules(ctx context.Context) {
	const name = "export rules"
	rules, err := broker.ListExportRules(ctx, r.brokerKube, r.namespace)
	if err != nil {
		r.add(name, Fail, "with the member's credentials: "+err.Error(), "the member's identity must read ConfigMaps of the broker namespace: join again (kubectl mcs join)")
		return
	}
	exporters := map[string]map[string]bool{}
	for _, e := range r.snapshot.Records {
		if exporters[e.Namespace] == nil {
			exporters[e.Namespace] = map[string]bool{}
		}
		exporters[e.Namespace][e.Cluster] = true
	}
	brokerFlags := " --broker-context BROKER"
	if r.namespace != broker.DefaultNamespace {
		brokerFlags += " --broker-namespace " + r.namespace
	}
	var shared int
	var open, fixes []string
	for _, ns := range slices.Sorted(maps.Keys(exporters)) {
		members := slices.Sorted(maps.Keys(exporters[ns]))
		if len(members) < 2 {
			continue
		}
		shared++
		if slices.ContainsFunc(rules, func(rule broker.ExportRule) bool { return rule.Covers(ns) }) {
			continue
		}
		open = append(open, fmt.Sprintf("%s (exported by %s)", ns, strings.Join(members, ",")))
		fixes = append(fixes, "kubectl mcs broker export-rules set "+ns+" --members "+strings.Join(members, ",")+brokerFlags)
	}
	if len(open) > 0 {
		r.add(name, Warn, "namespaces that several members export and no export rule covers, where any member may also export their services (first, deciding a service, or alongside, joining it): "+strings.Join(open, "; "),
			"if only these members should export them, say so (add the others that may): "+strings.Join(fixes, "; "))
		return
	}
	if shared == 0 {
		r.add(name, Pass, fmt.Sprintf("no namespace is exported by more than one member (%d export rules)", len(rules)), "")
		return
	}
	r.add(name, Pass, fmt.Sprintf("every namespace that several members export (%d) is under an export rule", shared), "")
}
