package record

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Validate reports, as an *InvalidError, every rule of the record format e
// breaks, or nil. Readers refuse such records (Decode runs the same
// checks), so a writer should not write one. Problems name the record
// field that carries the value (see docs/broker-records.md):
//
//   - the cluster ID, namespace and name are RFC 1123 labels;
//   - the creation time is set;
//   - the type is ClusterSetIP or Headless;
//   - ports have a number in 1-65535, a protocol of TCP, UDP or SCTP (or
//     none, meaning TCP), a name that is empty or an RFC 1123 label, and
//     no two share a name or a (port, protocol);
//   - sessionAffinity is None or ClientIP (or empty), internalTrafficPolicy
//     Cluster or Local (or unset);
//   - ipFamilies has one or two distinct families, IPv4 or IPv6;
//   - exported labels are valid labels, exported annotation keys valid keys;
//   - VIPs are IP addresses, at most one per family, and there are none
//     when the type is Headless or ClusterSetIPs are disabled.
func (e Export) Validate() error {
	p := newProblems()
	e.check(p)
	if e.Name == "" {
		return p.err("", "")
	}
	return p.err("", Name(e.Cluster, e.Namespace, e.Name))
}

// check adds e's problems to p and reports whether the record's identity
// (cluster, namespace, name) is valid.
func (e Export) check(p *problems) (identityOK bool) {
	identityOK = true
	for _, id := range []struct{ label, what, value string }{
		{LabelSourceCluster, "the exporting cluster's ID", e.Cluster},
		{LabelServiceNamespace, "the Service's namespace", e.Namespace},
		{LabelServiceName, "the Service's name", e.Name},
	} {
		field := "label " + id.label
		switch {
		case id.value == "":
			p.add(field, "missing (%s)", id.what)
			identityOK = false
		default:
			if errs := validation.IsDNS1123Label(id.value); len(errs) > 0 {
				p.add(field, "%q is not an RFC 1123 label: %s", id.value, strings.Join(errs, ", "))
				identityOK = false
			}
		}
	}
	if e.Created.IsZero() {
		p.add(annotationField(AnnotationExportCreated), "missing (the ServiceExport's creationTimestamp)")
	}
	e.checkSpec(p)
	for _, k := range sortedKeys(e.ExportedLabels) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			p.add(annotationField(AnnotationExportedLabels), "label key %q: %s", k, strings.Join(errs, ", "))
		} else if errs := validation.IsValidLabelValue(e.ExportedLabels[k]); len(errs) > 0 {
			p.add(annotationField(AnnotationExportedLabels), "label %q value %q: %s", k, e.ExportedLabels[k], strings.Join(errs, ", "))
		}
	}
	for _, k := range sortedKeys(e.ExportedAnnotations) {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			p.add(annotationField(AnnotationExportedAnnotations), "annotation key %q: %s", k, strings.Join(errs, ", "))
		}
	}
	return identityOK
}

func (e Export) checkSpec(p *problems) {
	switch e.Type {
	case mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless:
	case "":
		p.add("spec.type", "missing")
	default:
		p.add("spec.type", "%q, want %q or %q", e.Type, mcsv1beta1.ClusterSetIP, mcsv1beta1.Headless)
	}

	names := map[string]int{}
	numbers := map[string]int{}
	for i, port := range e.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		if port.Port < 1 || port.Port > 65535 {
			p.add(field+".port", "%d is not in 1-65535", port.Port)
		}
		proto := port.Protocol
		switch proto {
		case "":
			proto = corev1.ProtocolTCP
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			p.add(field+".protocol", "%q, want TCP, UDP or SCTP", port.Protocol)
		}
		if port.Name != "" {
			if errs := validation.IsDNS1123Label(port.Name); len(errs) > 0 {
				p.add(field+".name", "%q is not an RFC 1123 label: %s", port.Name, strings.Join(errs, ", "))
			}
		}
		if j, ok := names[port.Name]; ok {
			p.add(field+".name", "%q is the name of spec.ports[%d] too", port.Name, j)
		} else {
			names[port.Name] = i
		}
		number := fmt.Sprintf("%d/%s", port.Port, proto)
		if j, ok := numbers[number]; ok {
			p.add(field, "%s is spec.ports[%d] too", number, j)
		} else {
			numbers[number] = i
		}
	}

	switch e.SessionAffinity {
	case "", corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		p.add("spec.sessionAffinity", "%q, want None or ClientIP", e.SessionAffinity)
	}
	if itp := e.InternalTrafficPolicy; itp != nil &&
		*itp != corev1.ServiceInternalTrafficPolicyCluster && *itp != corev1.ServiceInternalTrafficPolicyLocal {
		p.add("spec.internalTrafficPolicy", "%q, want Cluster or Local", *itp)
	}

	switch n := len(e.IPFamilies); {
	case n == 0:
		p.add("spec.ipFamilies", "missing (the Service's ipFamilies)")
	case n > 2:
		p.add("spec.ipFamilies", "%d families, at most 2", n)
	case n == 2 && e.IPFamilies[0] == e.IPFamilies[1]:
		p.add("spec.ipFamilies", "%s twice", e.IPFamilies[0])
	}
	for i, f := range e.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			p.add(fmt.Sprintf("spec.ipFamilies[%d]", i), "%q, want IPv4 or IPv6", f)
		}
	}

	switch {
	case len(e.VIPs) == 0:
	case e.Type == mcsv1beta1.Headless:
		p.add("spec.ips", "a Headless export has no ClusterSetIPs")
	case e.ClusterSetIPDisabled:
		p.add("spec.ips", "an export with ClusterSetIPs disabled (annotation %s) has none", AnnotationClusterSetIPDisabled)
	case len(e.VIPs) > 2:
		p.add("spec.ips", "%d addresses, at most 2", len(e.VIPs))
	}
	seen := map[corev1.IPFamily]int{}
	for i, vip := range e.VIPs {
		field := fmt.Sprintf("spec.ips[%d]", i)
		ip, err := netip.ParseAddr(vip)
		if err != nil || ip.Zone() != "" {
			p.add(field, "%q is not an IP address", vip)
			continue
		}
		f := FamilyOf(ip)
		if j, ok := seen[f]; ok {
			p.add(field, "a second %s address (spec.ips[%d] is one)", f, j)
		}
		seen[f] = i
	}
}

// FamilyOf is the IP family of ip; an IPv4-mapped IPv6 address is IPv4.
func FamilyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// problems collects the problems of a record, the first one per field.
type problems struct {
	seen map[string]bool
	list []string
}

func newProblems() *problems { return &problems{seen: map[string]bool{}} }

func (p *problems) add(field, format string, args ...any) {
	if p.seen[field] {
		return
	}
	p.seen[field] = true
	p.list = append(p.list, field+": "+fmt.Sprintf(format, args...))
}

// err is nil when there is no problem, an *InvalidError otherwise.
func (p *problems) err(namespace, name string) error {
	if len(p.list) == 0 {
		return nil
	}
	return &InvalidError{Namespace: namespace, Name: name, Problems: p.list}
}

func annotationField(key string) string { return "annotation " + key }

// sortedKeys returns m's keys in order, for deterministic messages.
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
