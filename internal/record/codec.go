package record

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// Annotations of an export record: what a ServiceImport spec has no field
// for.
const (
	// AnnotationFormat is the record format version, FormatVersion. A
	// reader refuses a record of a format it does not know rather than
	// misread it.
	AnnotationFormat = "mcsd.io/record-format"
	// AnnotationExportCreated is the ServiceExport's creationTimestamp,
	// RFC 3339 in UTC to the second.
	AnnotationExportCreated = "mcsd.io/export-creation-timestamp"
	// AnnotationExportedLabels and AnnotationExportedAnnotations are the
	// ServiceExport's spec.exportedLabels and spec.exportedAnnotations as
	// JSON objects; absent when empty.
	AnnotationExportedLabels      = "mcsd.io/exported-labels"
	AnnotationExportedAnnotations = "mcsd.io/exported-annotations"
	// AnnotationClusterSetIPDisabled is "true" when the export opted out
	// of ClusterSetIPs; absent otherwise.
	AnnotationClusterSetIPDisabled = "mcsd.io/clusterset-ip-disabled"
	// AnnotationStored is when the broker first stored the record, RFC
	// 3339 in UTC, for a record the broker's administrator moved (so that
	// its creationTimestamp is that of the move, not of the export): it
	// stands in for the creationTimestamp in precedence (see StoredAt). The
	// broker's admission lets no member set, change or remove it, and
	// writers keep it as they keep every annotation the format does not
	// own.
	AnnotationStored = "mcsd.io/broker-stored"
)

// FormatVersion is the version of the record format this package writes
// and reads.
const FormatVersion = "1"

// recordAnnotations are the annotations the record format owns.
var recordAnnotations = []string{
	AnnotationFormat,
	AnnotationExportCreated,
	AnnotationExportedLabels,
	AnnotationExportedAnnotations,
	AnnotationClusterSetIPDisabled,
}

// Encode turns e into its export record. The namespace is left empty: the
// writer creates the record in the broker namespace. Encode does not check
// e; call Validate first to refuse what readers would refuse.
func Encode(e Export) *mcsv1beta1.ServiceImport {
	e = e.DeepCopy()
	ann := map[string]string{
		AnnotationFormat:        FormatVersion,
		AnnotationExportCreated: formatTime(e.Created),
	}
	if len(e.ExportedLabels) > 0 {
		ann[AnnotationExportedLabels] = mustJSON(e.ExportedLabels)
	}
	if len(e.ExportedAnnotations) > 0 {
		ann[AnnotationExportedAnnotations] = mustJSON(e.ExportedAnnotations)
	}
	if e.ClusterSetIPDisabled {
		ann[AnnotationClusterSetIPDisabled] = "true"
	}
	ports := e.Ports
	if ports == nil {
		// spec.ports is required by the CRD schema: never null.
		ports = []mcsv1beta1.ServicePort{}
	}
	return &mcsv1beta1.ServiceImport{
		TypeMeta: metav1.TypeMeta{
			APIVersion: mcsv1beta1.GroupVersion.String(),
			Kind:       mcsv1beta1.ServiceImportKindName,
		},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(e.Cluster, e.Namespace, e.Name),
			Labels:      Labels(e.Cluster, e.Namespace, e.Name),
			Annotations: ann,
		},
		Spec: mcsv1beta1.ServiceImportSpec{
			Ports:                 ports,
			IPs:                   e.VIPs,
			Type:                  e.Type,
			SessionAffinity:       e.SessionAffinity,
			SessionAffinityConfig: e.SessionAffinityConfig,
			IPFamilies:            e.IPFamilies,
			InternalTrafficPolicy: e.InternalTrafficPolicy,
			TrafficDistribution:   e.TrafficDistribution,
		},
	}
}

// Decode reads an export record. Its Created is the later of the declared
// export creation time and when the broker stored the record (see Witnessed
// and StoredAt). A record with a deletionTimestamp is deleted: Decode
// refuses it. It returns an *InvalidError naming every
// field that is missing or malformed, or that breaks a rule of the format
// (see Export.Validate), and never a partial Export.
func Decode(si *mcsv1beta1.ServiceImport) (Export, error) {
	if si == nil {
		return Export{}, &InvalidError{Problems: []string{"no record"}}
	}
	p := newProblems()
	if si.DeletionTimestamp != nil {
		// Deleted, whatever holds it back (a finalizer its writer put on
		// it): it says nothing any more.
		p.add("metadata.deletionTimestamp", "%s: the record is being deleted, and counts as gone", si.DeletionTimestamp.UTC().Format(time.RFC3339))
		return Export{}, p.err(si.Namespace, si.Name)
	}
	ann := si.Annotations
	switch v, ok := ann[AnnotationFormat]; {
	case !ok:
		p.add(annotationField(AnnotationFormat), "missing")
		return Export{}, p.err(si.Namespace, si.Name)
	case v != FormatVersion:
		p.add(annotationField(AnnotationFormat), "%q, but this mcsd reads format %q only: upgrade it", v, FormatVersion)
		return Export{}, p.err(si.Namespace, si.Name)
	}

	e := Export{
		Cluster:   si.Labels[LabelSourceCluster],
		Namespace: si.Labels[LabelServiceNamespace],
		Name:      si.Labels[LabelServiceName],
	}
	if v, ok := ann[AnnotationExportCreated]; ok {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			p.add(annotationField(AnnotationExportCreated), "%q is not an RFC 3339 time", v)
		} else {
			e.Created = metav1.NewTime(t.UTC())
		}
	}
	// Precedence is bounded by what the broker witnessed: a record cannot
	// be older than the record object the broker stored, whatever its
	// writer declares. Without the bound one member could declare its
	// export older than everyone's and take any service's spec and VIP.
	e.Created = Witnessed(e.Created, StoredAt(si))
	for _, m := range []struct {
		key string
		to  *map[string]string
	}{{AnnotationExportedLabels, &e.ExportedLabels}, {AnnotationExportedAnnotations, &e.ExportedAnnotations}} {
		if v, ok := ann[m.key]; ok {
			if err := json.Unmarshal([]byte(v), m.to); err != nil {
				p.add(annotationField(m.key), "not a JSON object of strings: %v", err)
			}
		}
	}
	switch v, ok := ann[AnnotationClusterSetIPDisabled]; {
	case !ok, v == "false":
	case v == "true":
		e.ClusterSetIPDisabled = true
	default:
		p.add(annotationField(AnnotationClusterSetIPDisabled), "%q, want \"true\" or \"false\"", v)
	}

	spec := si.Spec.DeepCopy()
	e.Type = spec.Type
	e.Ports = spec.Ports
	e.SessionAffinity = spec.SessionAffinity
	e.SessionAffinityConfig = spec.SessionAffinityConfig
	e.IPFamilies = spec.IPFamilies
	e.InternalTrafficPolicy = spec.InternalTrafficPolicy
	e.TrafficDistribution = spec.TrafficDistribution
	e.VIPs = spec.IPs

	// A field that failed to parse is reported once, not again as missing.
	identityOK := e.check(p)
	if identityOK {
		if want := Name(e.Cluster, e.Namespace, e.Name); si.Name != want {
			p.add("metadata.name", "%q does not match the record's labels, which name it %q", si.Name, want)
		}
	}
	if err := p.err(si.Namespace, si.Name); err != nil {
		return Export{}, err
	}
	return e, nil
}

// Witnessed returns the creation time that decides a record's precedence:
// the later of the time its writer declared (the ServiceExport's
// creationTimestamp) and the time the broker stored the record object (its
// metadata.creationTimestamp, set by the API server; zero for an object
// that was never stored, which leaves declared as it is). Both are kept to
// the second. Readers of records call it through Decode; a writer merging
// its own export with the records of others must bound its own the same
// way to reach the same merge.
func Witnessed(declared, stored metav1.Time) metav1.Time {
	if declared.IsZero() || stored.IsZero() {
		return declared
	}
	if s := stored.UTC().Truncate(time.Second); s.After(declared.Time) {
		return metav1.NewTime(s)
	}
	return declared
}

// Precedence is the time a record counts from in the merge, as Decode
// sets Export.Created, read without decoding the rest of the record: for
// readers that need only that, on every record.
func Precedence(si *mcsv1beta1.ServiceImport) metav1.Time {
	var declared metav1.Time
	if t, err := time.Parse(time.RFC3339, si.Annotations[AnnotationExportCreated]); err == nil {
		declared = metav1.NewTime(t.UTC())
	}
	return Witnessed(declared, StoredAt(si))
}

// StoredAt is when the broker first stored the record: its
// AnnotationStored, which only the broker's administrator writes, when it
// has a valid one, else its creationTimestamp.
func StoredAt(si *mcsv1beta1.ServiceImport) metav1.Time {
	if v, ok := si.Annotations[AnnotationStored]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return metav1.NewTime(t.UTC())
		}
	}
	return si.CreationTimestamp
}

// Moved returns a copy of si, a record as the broker stores it, ready to
// be created anew in namespace by the broker's administrator: the same
// name, labels, annotations and spec, with AnnotationStored keeping the
// moment the broker first stored it, so that the move changes no record's
// precedence.
func Moved(si *mcsv1beta1.ServiceImport, namespace string) *mcsv1beta1.ServiceImport {
	out := &mcsv1beta1.ServiceImport{
		TypeMeta: si.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: si.Name, Namespace: namespace,
			Labels: maps.Clone(si.Labels), Annotations: maps.Clone(si.Annotations),
		},
		Spec: *si.Spec.DeepCopy(),
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationStored] = formatTime(StoredAt(si))
	return out
}

// Equal reports whether a and b encode to the same record, so a writer can
// skip an update that would change nothing. Nil and empty lists and maps
// are equal; creation times are compared to the second.
func Equal(a, b Export) bool {
	return apiequality.Semantic.DeepEqual(Encode(a), Encode(b))
}

// UpToDate reports whether the existing record already says what Encode(e)
// says: same name, the record's labels and annotations, and the same spec.
// Labels and annotations the format does not own are ignored.
func UpToDate(existing *mcsv1beta1.ServiceImport, e Export) bool {
	if existing == nil {
		return false
	}
	want := Encode(e)
	if existing.Name != want.Name {
		return false
	}
	for k, v := range want.Labels {
		if got, ok := existing.Labels[k]; !ok || got != v {
			return false
		}
	}
	for _, k := range recordAnnotations {
		got, gotOK := existing.Annotations[k]
		v, ok := want.Annotations[k]
		if got != v || gotOK != ok {
			return false
		}
	}
	return apiequality.Semantic.DeepEqual(existing.Spec, want.Spec)
}

// Apply returns a copy of existing that says what Encode(e) says, keeping
// its object metadata (resourceVersion, owner references, labels and
// annotations the format does not own) for an update.
func Apply(existing *mcsv1beta1.ServiceImport, e Export) *mcsv1beta1.ServiceImport {
	want := Encode(e)
	out := existing.DeepCopy()
	out.TypeMeta = want.TypeMeta
	out.Name = want.Name
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		out.Labels[k] = v
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	for _, k := range recordAnnotations {
		delete(out.Annotations, k)
	}
	for k, v := range want.Annotations {
		out.Annotations[k] = v
	}
	out.Spec = want.Spec
	return out
}

// InvalidError says why a record (or an Export about to become one) is not
// a valid export record. Each problem begins with the record field at
// fault: "label multicluster.kubernetes.io/source-cluster: missing".
type InvalidError struct {
	// Namespace and Name are the record's, when known.
	Namespace, Name string
	Problems        []string
}

func (e *InvalidError) Error() string {
	what := "export record"
	switch {
	case e.Namespace != "":
		what = fmt.Sprintf("export record %s/%s", e.Namespace, e.Name)
	case e.Name != "":
		what = fmt.Sprintf("export record %s", e.Name)
	}
	return fmt.Sprintf("invalid %s: %s", what, strings.Join(e.Problems, "; "))
}

func formatTime(t metav1.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// mustJSON encodes a map of strings, which cannot fail.
func mustJSON(m map[string]string) string {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("encoding a map of strings: %v", err))
	}
	return string(b)
}
