{{/* Names and labels, the usual way. */}}
{{- define "lagwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lagwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lagwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lagwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lagwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lagwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lagwatch
{{- end -}}

{{- define "lagwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lagwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lagwatch.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "lagwatch.configMapName" -}}
{{- default (printf "%s-config" (include "lagwatch.fullname" .)) .Values.existingConfigMap -}}
{{- end -}}

{{- define "lagwatch.scheme" -}}
{{- if .Values.webConfig.tls }}HTTPS{{ else }}HTTP{{ end -}}
{{- end -}}

{{/* The scrape settings shared by the ServiceMonitor endpoint and the PodMonitor endpoint. */}}
{{- define "lagwatch.scrapeEndpoint" -}}
path: /metrics
interval: {{ .monitor.interval }}
scrapeTimeout: {{ .monitor.scrapeTimeout }}
scheme: {{ include "lagwatch.scheme" .root | lower }}
{{- if .root.Values.webConfig.tls }}
tlsConfig:
  {{- if .root.Values.webConfig.scrapeTLSConfig }}
  {{- toYaml .root.Values.webConfig.scrapeTLSConfig | nindent 2 }}
  {{- else }}
  insecureSkipVerify: true
  {{- end }}
{{- end }}
{{- with .root.Values.webConfig.basicAuthSecretName }}
basicAuth:
  username: {name: {{ . }}, key: username}
  password: {name: {{ . }}, key: password}
{{- end }}
relabelings:
  # The job the shipped alerts expect, whatever the release is called.
  - action: replace
    targetLabel: job
    replacement: lagwatch
  {{- with .monitor.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .monitor.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
