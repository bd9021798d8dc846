{{/*
The image of both workloads: repository:tag, the tag defaulting to the
chart's appVersion.
*/}}
{{- define "mcsd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
