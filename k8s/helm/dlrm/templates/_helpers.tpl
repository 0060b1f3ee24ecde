{{/*
Names. Every resource is named <fullname>-<component>; fullname is <release>-dlrm, or the release
name alone when it already contains the chart name.
*/}}
{{- define "dlrm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dlrm.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dlrm.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "dlrm.labels" -}}
helm.sh/chart: {{ include "dlrm.chart" . }}
app.kubernetes.io/name: {{ include "dlrm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dlrm
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include "dlrm.selectorLabels" (list . "ps") */}}
{{- define "dlrm.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "dlrm.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* All labels of one component: include "dlrm.componentLabels" (list . "ps") */}}
{{- define "dlrm.componentLabels" -}}
{{ include "dlrm.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "dlrm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dlrm.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dlrm.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* host:port of the coordinator's client Service, as dialled from inside the namespace. */}}
{{- define "dlrm.coordinatorAddress" -}}
{{- printf "%s-coordinator:%d" (include "dlrm.fullname" .) (int .Values.coordinator.port) }}
{{- end }}

{{/*
Pod annotations: the prometheus.io/* scrape annotations (when metrics.podAnnotations), the global
podAnnotations and the component's. include "dlrm.podAnnotations" (list . .Values.ps.podAnnotations)
*/}}
{{- define "dlrm.podAnnotations" -}}
{{- $root := index . 0 }}
{{- $ann := dict }}
{{- if $root.Values.metrics.podAnnotations }}
{{- $_ := set $ann "prometheus.io/scrape" "true" }}
{{- $_ := set $ann "prometheus.io/port" (toString $root.Values.metrics.port) }}
{{- $_ := set $ann "prometheus.io/path" "/metrics" }}
{{- end }}
{{- $ann = merge (deepCopy (default dict (index . 1))) (deepCopy (default dict $root.Values.podAnnotations)) $ann }}
{{- if $ann }}
{{- toYaml $ann }}
{{- end }}
{{- end }}

{{/*
A probe from values, with the component's gRPC port filled in when a `grpc:` probe names none.
include "dlrm.probe" (list .Values.ps.readinessProbe .Values.ps.port)
*/}}
{{- define "dlrm.probe" -}}
{{- $probe := deepCopy (index . 0) }}
{{- if hasKey $probe "grpc" }}
{{- $grpc := default dict $probe.grpc }}
{{- if not (hasKey $grpc "port") }}
{{- $_ := set $grpc "port" (int (index . 1)) }}
{{- end }}
{{- $_ := set $probe "grpc" $grpc }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* Environment every dlrm container gets: its pod's name, namespace and IP. */}}
{{- define "dlrm.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* Pod-spec fields shared by every component: include "dlrm.podCommon" (list . .Values.ps) */}}
{{- define "dlrm.podCommon" -}}
{{- $root := index . 0 }}
{{- $c := index . 1 -}}
serviceAccountName: {{ include "dlrm.serviceAccountName" $root }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
