{{/*
The image of both workloads and of the test: repository@digest when
image.digest is set (a digest names one image, whatever a tag says, so the
tag is then left out), else repository:tag, the tag defaulting to the
chart's appVersion.
*/}}
{{- define "mcsd.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The labels a component's pods are selected by, in workloads' selectors
and Services: the name and the component only, which no upgrade changes (a
workload's selector is immutable). Called with (list $ COMPONENT).
*/}}
{{- define "mcsd.selectorLabels" -}}
app.kubernetes.io/name: mcsd
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/*
The recommended labels every object of the chart carries, of a component:
the selector labels, the release, the version, the chart and who manages
it. Called with (list $ COMPONENT).
*/}}
{{- define "mcsd.labels" -}}
{{- $ := index . 0 -}}
{{ include "mcsd.selectorLabels" . }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | replace "+" "_" | trunc 63 | quote }}
app.kubernetes.io/part-of: mcsd
app.kubernetes.io/managed-by: {{ $.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/*
A workload's pod template metadata: the chart's labels with the
workload's podLabels, and its podAnnotations. A pod label may not replace
one of the chart's: the selectors and the tools that find mcsd's pods rely
on them. Called with (list $ COMPONENT KEY), KEY the workload's key in the
values (nodeAgent, controller).
*/}}
{{- define "mcsd.podMetadata" -}}
{{- $ := index . 0 -}}
{{- $key := index . 2 -}}
{{- $values := index $.Values $key -}}
{{- $labels := include "mcsd.labels" (list $ (index . 1)) | fromYaml -}}
{{- range $label, $_ := $values.podLabels }}
{{- if hasKey $labels $label }}
{{- fail (printf "%s.podLabels: %s is one of the chart's own labels, which a pod label may not replace" $key $label) }}
{{- end }}
{{- end -}}
labels:
  {{- merge $labels $values.podLabels | toYaml | nindent 2 }}
{{- with $values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
HOST:PORT for a listen flag, the host bracketed unless it is an IPv4
address or a name, so that an IPv6 address (or $(POD_IP) on an IPv6 node)
is HOST:PORT too. Called with (list HOST PORT).
*/}}
{{- define "mcsd.hostPort" -}}
{{- $host := index . 0 | toString -}}
{{- if or (contains ":" $host) (hasPrefix "$(" $host) -}}
[{{ $host }}]:{{ index . 1 }}
{{- else -}}
{{ $host }}:{{ index . 1 }}
{{- end -}}
{{- end -}}

{{/*
The flags both workloads take from the values: the cluster's identity, the
clusterset's VIP ranges and the served IP families, each only when set
(mcsd's defaults otherwise).
*/}}
{{- define "mcsd.clusterArgs" -}}
{{- with .Values.clusterID }}
- --cluster-id={{ . }}
{{- end }}
{{- with .Values.clustersetCIDRs }}
- --clusterset-cidrs={{ join "," . }}
{{- end }}
{{- with .Values.ipFamilies }}
- --ip-families={{ join "," . }}
{{- end }}
{{- end -}}

{{/*
A workload's update strategy from its values: rollingUpdate only with the
RollingUpdate type, which alone takes it (a value set for another type
would be refused by the API server).
*/}}
{{- define "mcsd.updateStrategy" -}}
{{- $type := .type | default "RollingUpdate" -}}
type: {{ $type }}
{{- if and (eq $type "RollingUpdate") .rollingUpdate }}
rollingUpdate:
  {{- toYaml .rollingUpdate | nindent 2 }}
{{- end }}
{{- end -}}


{{/*
"true" when /metrics listens where others than the node's own processes
reach it (metrics.bindAddress not loopback): only then do the pods declare
a metrics port and may a PodMonitor scrape it. Plain HTTP there is
refused.
*/}}
{{- define "mcsd.metricsReachable" -}}
{{- if not (has .Values.metrics.bindAddress (list "127.0.0.1" "localhost" "::1" "[::1]")) -}}
{{- if not .Values.metrics.secure }}
{{- fail "metrics.secure: false serves /metrics unauthenticated, so only on a loopback metrics.bindAddress; keep it secure to scrape it from elsewhere" }}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/*
The flags of /metrics, both workloads': where it listens, and how it is
secured.
*/}}
{{- define "mcsd.metricsArgs" -}}
- --metrics-address={{ include "mcsd.hostPort" (list .Values.metrics.bindAddress .Values.ports.metrics) }}
{{- if not .Values.metrics.secure }}
- --metrics-secure=false
{{- else if .Values.metrics.tlsSecret }}
- --metrics-tls-cert-file=/etc/mcsd/metrics-tls/tls.crt
- --metrics-tls-private-key-file=/etc/mcsd/metrics-tls/tls.key
{{- end }}
{{- end -}}

{{/*
The container's mount of metrics.tlsSecret, and the pod's volume of it.
Called with (list $ "mount") or (list $ "volume").
*/}}
{{- define "mcsd.metricsTLSVolume" -}}
{{- $ := index . 0 -}}
{{- if and $.Values.metrics.secure $.Values.metrics.tlsSecret -}}
{{- if eq (index . 1) "mount" -}}
volumeMounts:
- name: metrics-tls
  mountPath: /etc/mcsd/metrics-tls
  readOnly: true
{{- else -}}
volumes:
- name: metrics-tls
  secret:
    secretName: {{ $.Values.metrics.tlsSecret }}
{{- end -}}
{{- end -}}
{{- end -}}
