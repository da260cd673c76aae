{{/*
The chart's name, truncated to 63 characters (a DNS label).
*/}}
{{- define "taskgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: <release>-<chart>, or the release name
alone when it already contains the chart's name.
*/}}
{{- define "taskgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of the admin Service and other admin objects.
*/}}
{{- define "taskgate.adminName" -}}
{{- printf "%s-admin" (include "taskgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the bundled Redis Deployment and Service.
*/}}
{{- define "taskgate.redisName" -}}
{{- printf "%s-redis" (include "taskgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "taskgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels common to every object.
*/}}
{{- define "taskgate.labels" -}}
helm.sh/chart: {{ include "taskgate.chart" . }}
{{ include "taskgate.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: taskgate
{{- end }}

{{/*
Labels that select the gateway's pods.
*/}}
{{- define "taskgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "taskgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/*
Labels that select the bundled Redis pod.
*/}}
{{- define "taskgate.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "taskgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/*
Labels of the bundled Redis objects.
*/}}
{{- define "taskgate.redisLabels" -}}
helm.sh/chart: {{ include "taskgate.chart" . }}
{{ include "taskgate.redisSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: taskgate
{{- end }}

{{/*
The ServiceAccount the gateway runs as.
*/}}
{{- define "taskgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "taskgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The gateway image reference: repository@digest, else repository:tag (tag
defaults to the chart's appVersion).
*/}}
{{- define "taskgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Whether the gateway counts in a shared Redis ("true") or in process ("").
*/}}
{{- define "taskgate.sharedStore" -}}
{{- if or .Values.redis.enabled .Values.redis.existingSecret .Values.redis.url }}true{{- end }}
{{- end }}

{{/*
The REDIS_URL environment variable, from the bundled Redis, an existing
Secret, the url value, or empty (the in-process store).
*/}}
{{- define "taskgate.redisEnv" -}}
- name: REDIS_URL
{{- if .Values.redis.enabled }}
  value: {{ printf "redis://%s:6379/0" (include "taskgate.redisName" .) | quote }}
{{- else if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret | quote }}
      key: {{ .Values.redis.existingSecretKey | quote }}
{{- else }}
  value: {{ .Values.redis.url | quote }}
{{- end }}
{{- end }}

{{/*
Seconds the pod gets between the start of its termination and SIGKILL: the
preStop sleep plus the gateway's drain, plus a margin.
*/}}
{{- define "taskgate.terminationGrace" -}}
{{- $need := add (int .Values.shutdownGraceSeconds) (int .Values.preStopSleepSeconds) }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $need 10 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed shutdownGraceSeconds + preStopSleepSeconds (%d)" (int .Values.terminationGracePeriodSeconds) (int $need)) }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
Refuse settings that would make replicas count limits apart.
*/}}
{{- define "taskgate.validate" -}}
{{- if not (include "taskgate.sharedStore" .) }}
{{- if .Values.autoscaling.enabled }}
{{- fail "autoscaling.enabled needs a shared Redis: set redis.url, redis.existingSecret or redis.enabled (the in-process store counts per replica)" }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "replicaCount > 1 needs a shared Redis: set redis.url, redis.existingSecret or redis.enabled (the in-process store counts per replica)" }}
{{- end }}
{{- end }}
{{- end }}
