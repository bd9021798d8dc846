package merge

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/mcsd-io/mcsd/internal/record"
)

// ReasonClusterSetIPConflict is the Conflict reason when exports disagree on
// whether the service has ClusterSetIPs (one opted out, another did not).
// mcs-api defines no reason for it; the name follows its <Field>Conflict
// pattern. The oldest export's setting wins.
const ReasonClusterSetIPConflict mcsv1beta1.ServiceExportConditionReason = "ClusterSetIPConflict"

// Verdict is one export's Conflict verdict.
type Verdict struct {
	// Reasons are the conflicts the service has, in a fixed order (that
	// of mcs-api's reason list, ReasonClusterSetIPConflict last); empty
	// when it has none.
	Reasons []mcsv1beta1.ServiceExportConditionReason
	// Message says, for each conflict, which field, which value is used
	// and from which cluster, and how many clusters disagree; or that
	// there is no conflict.
	Message string
}

// Conflict reports whether the export is in conflict.
func (v Verdict) Conflict() bool { return len(v.Reasons) > 0 }

// Reason is the Conflict condition's reason: the reasons comma-joined, or
// NoConflicts.
func (v Verdict) Reason() string {
	if !v.Conflict() {
		return string(mcsv1beta1.ServiceExportReasonNoConflicts)
	}
	parts := make([]string, len(v.Reasons))
	for i, r := range v.Reasons {
		parts[i] = string(r)
	}
	return strings.Join(parts, ",")
}

// Condition renders the verdict as the ServiceExport's Conflict condition.
// LastTransitionTime is left zero: meta.SetStatusCondition sets it when
// the status changes.
func (v Verdict) Condition(observedGeneration int64) metav1.Condition {
	status := metav1.ConditionFalse
	if v.Conflict() {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{
		Type:               string(mcsv1beta1.ServiceExportConditionConflict),
		Status:             status,
		ObservedGeneration: observedGeneration,
		Reason:             v.Reason(),
		Message:            v.Message,
	}
}

// conflict is one field in conflict: its reason and the sentence that
// explains it.
type conflict struct {
	reason   mcsv1beta1.ServiceExportConditionReason
	sentence string
}

// findConflicts lists the fields in conflict, in reason order. all is in
// precedence order.
func findConflicts(all []record.Export, oldest record.Export, ports []mcsv1beta1.ServicePort, families []corev1.IPFamily) []conflict {
	total := len(all)
	var out []conflict
	count := func(differs func(record.Export) bool) int {
		n := 0
		for _, r := range all {
			if differs(r) {
				n++
			}
		}
		return n
	}
	scalar := func(reason mcsv1beta1.ServiceExportConditionReason, field, value string, differs func(record.Export) bool) {
		if n := count(differs); n > 0 {
			out = append(out, conflict{reason, fmt.Sprintf("Conflicting %s. Using %s from oldest service export in %q. %d/%d clusters disagree.",
				field, value, oldest.Cluster, n, total)})
		}
	}

	derivedPorts := portSet(ports)
	if n := count(func(r record.Export) bool {
		return !slices.EqualFunc(portSet(r.Ports), derivedPorts, samePort)
	}); n > 0 {
		out = append(out, conflict{mcsv1beta1.ServiceExportReasonPortConflict, fmt.Sprintf(
			"Conflicting ports (%s). Using the union of the exported ports, and for a port defined differently the definition of the oldest service export, in %q. %d/%d clusters disagree.",
			disputedPorts(all), oldest.Cluster, n, total)})
	}
	scalar(mcsv1beta1.ServiceExportReasonTypeConflict, "type", fmt.Sprintf("%q", oldest.Type),
		func(r record.Export) bool { return r.Type != oldest.Type })
	scalar(mcsv1beta1.ServiceExportReasonSessionAffinityConflict, "sessionAffinity", fmt.Sprintf("%q", affinity(oldest)),
		func(r record.Export) bool { return affinity(r) != affinity(oldest) })
	scalar(mcsv1beta1.ServiceExportReasonSessionAffinityConfigConflict, "sessionAffinityConfig", affinityConfig(oldest.SessionAffinityConfig),
		func(r record.Export) bool { return !equalConfig(r.SessionAffinityConfig, oldest.SessionAffinityConfig) })
	scalar(mcsv1beta1.ServiceExportReasonAnnotationsConflict, "exportedAnnotations", "the exported annotations",
		func(r record.Export) bool { return !equalMaps(r.ExportedAnnotations, oldest.ExportedAnnotations) })
	scalar(mcsv1beta1.ServiceExportReasonLabelsConflict, "exportedLabels", "the exported labels",
		func(r record.Export) bool { return !equalMaps(r.ExportedLabels, oldest.ExportedLabels) })
	scalar(mcsv1beta1.ServiceExportReasonInternalTrafficPolicyConflict, "internalTrafficPolicy", fmt.Sprintf("%q", trafficPolicy(oldest)),
		func(r record.Export) bool { return trafficPolicy(r) != trafficPolicy(oldest) })
	scalar(mcsv1beta1.ServiceExportReasonTrafficDistributionConflict, "trafficDistribution", distribution(oldest),
		func(r record.Export) bool { return deref(r.TrafficDistribution) != deref(oldest.TrafficDistribution) })

	scalar(mcsv1beta1.ServiceExportReasonIPFamilyConflict, "ipFamilies", quoteFamilies(families),
		func(r record.Export) bool { return !sameFamilies(r.IPFamilies, families) })

	// Only ClusterSetIP exports have a say on ClusterSetIPs, and only when
	// the service is a ClusterSetIP one.
	if oldest.Type == mcsv1beta1.ClusterSetIP {
		scalar(ReasonClusterSetIPConflict, "ClusterSetIP setting", fmt.Sprintf("%q", vipSetting(oldest)),
			func(r record.Export) bool {
				return r.Type == mcsv1beta1.ClusterSetIP && r.ClusterSetIPDisabled != oldest.ClusterSetIPDisabled
			})
	}
	return out
}

// verdictFor is r's verdict: every conflict of the service, and for an
// export left out of the service (not inService), a sentence saying why.
func verdictFor(r, oldest record.Export, families []corev1.IPFamily, inService bool, total int, conflicts []conflict) Verdict {
	if len(conflicts) == 0 {
		if total == 1 {
			return Verdict{Message: "No conflicts: this is the only export of the service."}
		}
		return Verdict{Message: fmt.Sprintf("No conflicts among the %d exports of the service.", total)}
	}
	v := Verdict{}
	sentences := make([]string, 0, len(conflicts)+1)
	for _, c := range conflicts {
		v.Reasons = append(v.Reasons, c.reason)
		sentences = append(sentences, c.sentence)
	}
	switch {
	case inService:
	case r.Type != oldest.Type:
		sentences = append(sentences, fmt.Sprintf("This cluster's export is %q, so its endpoints are left out of the service.", r.Type))
	default:
		sentences = append(sentences, fmt.Sprintf("This cluster's export has none of the service's IP families (%s), so its endpoints are left out of the service.",
			quoteFamilies(families)))
	}
	v.Message = strings.Join(sentences, " ")
	return v
}

// disputedPorts names the ports not every export has exactly alike: by
// name, or as port/protocol when unnamed; at most 10, then how many more.
func disputedPorts(all []record.Export) string {
	sets := make([][]mcsv1beta1.ServicePort, len(all))
	for i, r := range all {
		sets[i] = portSet(r.Ports)
	}
	seen := map[string]bool{}
	var names []string
	for _, set := range sets {
		for _, p := range set {
			everyone := true
			for _, other := range sets {
				everyone = everyone && slices.ContainsFunc(other, func(q mcsv1beta1.ServicePort) bool { return samePort(p, q) })
			}
			name := fmt.Sprintf("%q", p.Name)
			if p.Name == "" {
				name = numberOf(p)
			}
			if !everyone && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	const shown = 10
	if len(names) > shown {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return strings.Join(names, ", ")
}

func affinity(r record.Export) corev1.ServiceAffinity {
	if r.SessionAffinity == "" {
		return corev1.ServiceAffinityNone
	}
	return r.SessionAffinity
}

func affinityConfig(c *corev1.SessionAffinityConfig) string {
	if c == nil || c.ClientIP == nil {
		return "no sessionAffinityConfig"
	}
	if c.ClientIP.TimeoutSeconds == nil {
		return "clientIP with the default timeout"
	}
	return fmt.Sprintf("clientIP timeoutSeconds %d", *c.ClientIP.TimeoutSeconds)
}

func trafficPolicy(r record.Export) corev1.ServiceInternalTrafficPolicy {
	if r.InternalTrafficPolicy == nil {
		return corev1.ServiceInternalTrafficPolicyCluster
	}
	return *r.InternalTrafficPolicy
}

func distribution(r record.Export) string {
	if r.TrafficDistribution == nil || *r.TrafficDistribution == "" {
		return "no trafficDistribution"
	}
	return fmt.Sprintf("%q", *r.TrafficDistribution)
}

func vipSetting(r record.Export) string {
	if r.ClusterSetIPDisabled {
		return "disabled"
	}
	return "enabled"
}

func quoteFamilies(families []corev1.IPFamily) string {
	q := make([]string, len(families))
	for i, f := range families {
		q[i] = fmt.Sprintf("%q", f)
	}
	return strings.Join(q, ", ")
}
