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

{{/*
lagwatch's configuration file. With more than one replica every cluster gets
state.replicas: true (docs/design.md#replicas): the replicas share its groups through
their coordination group instead of each serving all of them. A cluster that turns its
state topic or its replicas off cannot be shared: the render fails and says so.
*/}}
{{- define "lagwatch.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- $clusters := list -}}
{{- range $c := ($cfg.clusters | default list) -}}
{{- $state := deepCopy ($c.state | default dict) -}}
{{- if or (eq (toString (dig "enabled" true $state)) "false") (eq (toString (dig "replicas" true $state)) "false") -}}
{{- fail (printf "replicaCount %d: cluster %s turns off state.enabled or state.replicas, so every replica would serve all its groups; remove that or set replicaCount 1" (int $.Values.replicaCount) ($c.name | default "default")) -}}
{{- end -}}
{{- $_ := set $state "replicas" true -}}
{{- $clusters = append $clusters (merge (dict "state" $state) (deepCopy $c)) -}}
{{- end -}}
{{- $_ := set $cfg "clusters" $clusters -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
