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

{{/*
A number or string value as the text a flag or field needs: Helm reads every number of a values
file as a float64 and prints a large one in exponent notation (ps.memoryBudget: 1073741824
would become --memory-budget=1.073741824e+09, which dlrm refuses); an integral float64 is printed
as an integer. include "dlrm.number" .Values.ps.memoryBudget
*/}}
{{- define "dlrm.number" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}
{{- int64 . }}
{{- else }}
{{- . }}
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

{{/*
Image of a role: the role's image values over the global `image`, tag defaulting to appVersion.
A numeric tag of a values file (tag: 20240101) is a float64 to Helm: "dlrm.number" prints it as an
integer, not 2.0240101e+07 (the schema refuses a non-integral one such as an unquoted 1.10).
include "dlrm.image" (list . .Values.ps.image); (list . dict) gives the global image.
*/}}
{{- define "dlrm.image" -}}
{{- $root := index . 0 }}
{{- $img := default dict (index . 1) }}
{{- $repository := default $root.Values.image.repository $img.repository }}
{{- $globalTag := default $root.Chart.AppVersion (include "dlrm.number" (default "" $root.Values.image.tag)) }}
{{- $tag := default $globalTag (include "dlrm.number" (default "" $img.tag)) }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* Pull policy of a role: include "dlrm.imagePullPolicy" (list . .Values.ps.image) */}}
{{- define "dlrm.imagePullPolicy" -}}
{{- $root := index . 0 }}
{{- $img := default dict (index . 1) }}
{{- default $root.Values.image.pullPolicy $img.pullPolicy }}
{{- end }}

{{/*
The workers' image values: worker.gpu.image when GPUs are on, its empty repository meaning
image.repository + "-cuda" (the image of deploy/Dockerfile.cuda); else worker.image.
*/}}
{{- define "dlrm.workerImageValues" -}}
{{- $w := .Values.worker }}
{{- if $w.gpu.enabled }}
{{- $img := deepCopy (default dict $w.gpu.image) }}
{{- if not $img.repository }}
{{- $_ := set $img "repository" (printf "%s-cuda" .Values.image.repository) }}
{{- end }}
{{- toYaml $img }}
{{- else }}
{{- toYaml (default dict $w.image) }}
{{- end }}
{{- end }}

{{/*
The checkpoint volume (checkpoints.enabled): hostPath, else existingClaim, else the chart's claim.
*/}}
{{- define "dlrm.checkpointVolume" -}}
{{- $ck := .Values.checkpoints -}}
- name: checkpoints
{{- if $ck.hostPath }}
  hostPath:
    path: {{ $ck.hostPath | quote }}
    type: Directory
{{- else }}
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-checkpoints" (include "dlrm.fullname" .)) $ck.existingClaim }}
{{- end }}
{{- end }}

{{- define "dlrm.checkpointMount" -}}
- name: checkpoints
  mountPath: {{ .Values.checkpoints.mountPath }}
{{- end }}

{{/* Where the workers' init container writes the `helm test` job's data (tests.enabled). */}}
{{- define "dlrm.selftestDir" -}}
/var/lib/dlrm/selftest
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
With tls.enabled a `grpc:` probe becomes a tcpSocket probe on the same port: Kubernetes' gRPC
probes speak plaintext only, and the TLS server would fail their handshake. A TCP connect shows
that the server listens, not its grpc.health.v1 status.
include "dlrm.probe" (list . .Values.ps.readinessProbe .Values.ps.port)
*/}}
{{- define "dlrm.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if hasKey $probe "grpc" }}
{{- $grpc := default dict $probe.grpc }}
{{- if not (hasKey $grpc "port") }}
{{- $_ := set $grpc "port" (int (index . 2)) }}
{{- end }}
{{- if $root.Values.tls.enabled }}
{{- $_ := unset $probe "grpc" }}
{{- $_ := set $probe "tcpSocket" (dict "port" (int $grpc.port)) }}
{{- else }}
{{- $_ := set $probe "grpc" $grpc }}
{{- end }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/*
TLS (values `tls`). Every container that runs a dlrm process or dlrmctl gets "dlrm.tlsArgs" in its
args and, with tls.enabled, "dlrm.tlsMount" in its volumeMounts and "dlrm.tlsVolume" (the Secret
of its identity: coordinator, ps, worker, admin) in its pod. Without tls.enabled: --insecure.
*/}}
{{- define "dlrm.tlsDir" -}}
/etc/dlrm/tls
{{- end }}

{{/* Name of an identity's Secret: include "dlrm.tlsSecretName" (list . "ps") */}}
{{- define "dlrm.tlsSecretName" -}}
{{- $root := index . 0 }}
{{- $identity := index . 1 }}
{{- $name := index (default dict $root.Values.tls.secrets) $identity }}
{{- default (printf "%s-tls-%s" (include "dlrm.fullname" $root) $identity) $name }}
{{- end }}

{{/* The TLS flags, as args list items: --tls-dir (and --tls-server-name), or --insecure. */}}
{{- define "dlrm.tlsArgs" -}}
{{- if .Values.tls.enabled -}}
- --tls-dir={{ include "dlrm.tlsDir" . }}
{{- with .Values.tls.serverName }}
- --tls-server-name={{ . }}
{{- end }}
{{- else -}}
- --insecure
{{- end }}
{{- end }}

{{/* The volumeMount of the TLS Secret (with tls.enabled). */}}
{{- define "dlrm.tlsMount" -}}
- name: tls
  mountPath: {{ include "dlrm.tlsDir" . }}
  readOnly: true
{{- end }}

{{/*
The pod volume of an identity's TLS Secret (with tls.enabled). Mode 0440: the files are readable
by the pod's fsGroup (podSecurityContext.fsGroup, the image's group 10001), not by other users.
include "dlrm.tlsVolume" (list . "ps")
*/}}
{{- define "dlrm.tlsVolume" -}}
- name: tls
  secret:
    secretName: {{ include "dlrm.tlsSecretName" . }}
    defaultMode: 288  # 0440
{{- end }}

{{/*
Bearer tokens (values auth.tokens): with auth.tokens.existingSecret set, the coordinator container
alone gets "dlrm.tokensArgs" in its args, "dlrm.tokensMount" in its volumeMounts and
"dlrm.tokensVolume" in its pod; parameter servers, workers and the chart's dlrmctl pods keep
their certificates. "dlrm.tokensCheck" fails the render without tls.enabled: the coordinator
refuses --tokens without TLS at start-up.
*/}}
{{- define "dlrm.tokensDir" -}}
/etc/dlrm/tokens
{{- end }}

{{- define "dlrm.tokensCheck" -}}
{{- if and .Values.auth.tokens.existingSecret (not .Values.tls.enabled) }}
{{- fail "auth.tokens.existingSecret needs tls.enabled=true: the coordinator refuses --tokens without TLS (a bearer token is never accepted in plaintext)" }}
{{- end }}
{{- end }}

{{/* The --tokens flag, as an args list item (with auth.tokens.existingSecret). */}}
{{- define "dlrm.tokensArgs" -}}
- --tokens={{ include "dlrm.tokensDir" . }}/{{ .Values.auth.tokens.key }}
{{- end }}

{{/* The volumeMount of the tokens Secret (with auth.tokens.existingSecret). */}}
{{- define "dlrm.tokensMount" -}}
- name: tokens
  mountPath: {{ include "dlrm.tokensDir" . }}
  readOnly: true
{{- end }}

{{/*
The pod volume of the tokens Secret: only its key auth.tokens.key (a Secret without that key
keeps the pod in ContainerCreating, naming the key). Mode 0440 as for the TLS Secrets: the
files belong to root and the pod's fsGroup, and the coordinator runs as uid 10001 of that group.
*/}}
{{- define "dlrm.tokensVolume" -}}
- name: tokens
  secret:
    secretName: {{ .Values.auth.tokens.existingSecret }}
    defaultMode: 288  # 0440
    items:
      - key: {{ .Values.auth.tokens.key | quote }}
        path: {{ .Values.auth.tokens.key | quote }}
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
{{- /* No pod calls the Kubernetes API: no token, also when serviceAccount.create is false and
the pods run as an existing account (e.g. the namespace's default, which mounts one). */}}
automountServiceAccountToken: false
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

{{/*
Init container that tries `dlrmctl list` until the coordinator answers, at most
job.submit.waitForCoordinator.attempts times (dlrmctl itself fails at once when it cannot connect).
Its args are dlrmctl's TLS flags ("$@" of the script, after $0 = wait-for-coordinator); with
tls.enabled the pod needs the "dlrm.tlsVolume" of identity admin.
include "dlrm.waitForCoordinator" (list . resources)
*/}}
{{- define "dlrm.waitForCoordinator" -}}
{{- $root := index . 0 }}
{{- $w := $root.Values.job.submit.waitForCoordinator -}}
- name: wait-for-coordinator
  image: {{ include "dlrm.image" (list $root dict) }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command:
    - /bin/sh
    - -c
    - |
      tries=0
      until /usr/local/bin/dlrmctl --coordinator="$COORDINATOR" --timeout=5 "$@" list >/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -ge "$ATTEMPTS" ]; then
          echo "coordinator $COORDINATOR did not answer after $tries tries" >&2
          exit 1
        fi
        sleep "$PERIOD"
      done
    - wait-for-coordinator
  args:
    {{- include "dlrm.tlsArgs" $root | nindent 4 }}
  env:
    - name: COORDINATOR
      value: {{ include "dlrm.coordinatorAddress" $root | quote }}
    - name: ATTEMPTS
      value: {{ include "dlrm.number" $w.attempts | quote }}
    - name: PERIOD
      value: {{ include "dlrm.number" $w.periodSeconds | quote }}
  resources:
    {{- toYaml (index . 1) | nindent 4 }}
  securityContext:
    {{- toYaml $root.Values.securityContext | nindent 4 }}
  {{- if $root.Values.tls.enabled }}
  volumeMounts:
    {{- include "dlrm.tlsMount" $root | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
Bytes (or cores) of a Kubernetes quantity, as a float: include "dlrm.quantity" "5Gi" -> 5368709120,
"250m" -> 0.25; "" for what it cannot read (then no check is made on it).
*/}}
{{- define "dlrm.quantity" -}}
{{- $s := toString . | trim }}
{{- $num := regexFind "^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $s }}
{{- $unit := trimPrefix $num $s }}
{{- $mult := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18
      "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 }}
{{- if and $num (hasKey $mult $unit) }}
{{- mulf (float64 (trimPrefix "+" $num)) (index $mult $unit) }}
{{- end }}
{{- end }}

{{/* Bytes of a dlrm byte size (`--memory-budget`: K, M, G are 1024-based, KB, MB, GB 1000-based). */}}
{{- define "dlrm.byteSize" -}}
{{- $s := toString . | trim }}
{{- $num := regexFind "^[0-9]*\\.?[0-9]+" $s }}
{{- $unit := trimPrefix $num $s | trim }}
{{- $mult := dict "" 1.0 "B" 1.0 "K" 1024.0 "Ki" 1024.0 "KiB" 1024.0 "M" 1048576.0 "Mi" 1048576.0
      "MiB" 1048576.0 "G" 1073741824.0 "Gi" 1073741824.0 "GiB" 1073741824.0 "KB" 1e3 "MB" 1e6
      "GB" 1e9 }}
{{- if and $num (hasKey $mult $unit) }}
{{- mulf (float64 $num) (index $mult $unit) }}
{{- end }}
{{- end }}

{{/*
A duration of the binaries' form (coordinator.leaseTtl: 14s, 1m30s, 1500ms) in milliseconds, as a
float: the sum of its number-and-unit parts.
include "dlrm.durationMs" "1m30s"  =>  90000
*/}}
{{- define "dlrm.durationMs" -}}
{{- $ms := dict "ns" 0.000001 "us" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 }}
{{- $total := 0.0 }}
{{- range $part := regexFindAll "[0-9.]+(ns|us|ms|s|m|h)" (toString .) -1 }}
{{- $unit := regexFind "(ns|us|ms|s|m|h)$" $part }}
{{- $total = addf $total (mulf (float64 (trimSuffix $unit $part)) (index $ms $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Fails the render on a coordinator.leaseTtl under 1s, which `dlrm coordinator` refuses at start-up
(its pod would crash-loop); the schema checks only the duration's form.
include "dlrm.leaseTtlCheck" .
*/}}
{{- define "dlrm.leaseTtlCheck" -}}
{{- if lt (float64 (include "dlrm.durationMs" .Values.coordinator.leaseTtl)) 1000.0 }}
{{- fail (printf "coordinator.leaseTtl %v is shorter than 1s, which the coordinator refuses (members heartbeat every leaseTtl/8: a shorter lease would drop live members on any pause); give 1s or more, e.g. 14s" .Values.coordinator.leaseTtl) }}
{{- end }}
{{- end }}

{{/*
Fails the render on resources that Kubernetes would refuse or that cannot work: a request above
its limit (Helm merges a user's `resources` with the defaults, so `ps.resources.limits.memory=2Gi`
alone keeps the default 5Gi request and the API server rejects every PS pod), and a PS memory
limit below its memory tier's budget (the PS would be OOM-killed once the tier fills).
include "dlrm.resourcesCheck" .
*/}}
{{- define "dlrm.resourcesCheck" -}}
{{- $root := . }}
{{- $all := dict "coordinator" .Values.coordinator.resources "ps" .Values.ps.resources
      "worker" .Values.worker.resources "job.submit" .Values.job.submit.resources
      "tests" .Values.tests.resources }}
{{- range $name, $r := $all }}
{{- $requests := default dict (default dict $r).requests }}
{{- $limits := default dict (default dict $r).limits }}
{{- range $key := list "cpu" "memory" }}
{{- if and (hasKey $requests $key) (hasKey $limits $key) }}
{{- $req := include "dlrm.quantity" (index $requests $key) }}
{{- $lim := include "dlrm.quantity" (index $limits $key) }}
{{- if and $req $lim (gt (float64 $req) (float64 $lim)) }}
{{- fail (printf "%s.resources: requests.%s %v is above limits.%s %v, which Kubernetes refuses (Helm merges your resources with the chart's defaults: set both, or the request to null)" $name $key (index $requests $key) $key (index $limits $key)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $psLimit := (default dict (default dict .Values.ps.resources).limits).memory }}
{{- if $psLimit }}
{{- $lim := include "dlrm.quantity" $psLimit }}
{{- $budget := include "dlrm.byteSize" (include "dlrm.number" .Values.ps.memoryBudget) }}
{{- if and $lim $budget (lt (float64 $lim) (float64 $budget)) }}
{{- fail (printf "ps.resources.limits.memory %v is below ps.memoryBudget %v: the PS would be OOM-killed once its memory tier fills (keep the limit above about 1.7 x the budget + 0.5GiB, values.yaml)" $psLimit (include "dlrm.number" .Values.ps.memoryBudget)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails on a Kubernetes one-of field that Helm's merge of the user's values with the defaults gave
two members: a worker.data.volume of {hostPath: ...} kept the default emptyDir beside it, and a
probe with exec or tcpSocket kept the default grpc (or httpGet); the API server would refuse the
workload ("may not specify more than 1 volume type" / "handler type"). include "dlrm.oneOfCheck" .
*/}}
{{- define "dlrm.oneOfCheck" -}}
{{- $v := .Values }}
{{- $probes := dict }}
{{- range $c := list "coordinator" "ps" "worker" }}
{{- range $p := list "startupProbe" "readinessProbe" "livenessProbe" }}
{{- $probe := index (index $v $c) $p }}
{{- if $probe }}
{{- $_ := set $probes (printf "%s.%s" $c $p) $probe }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $probe := $probes }}
{{- $handlers := list }}
{{- range $k := list "exec" "grpc" "httpGet" "tcpSocket" }}
{{- if hasKey $probe $k }}
{{- $handlers = append $handlers $k }}
{{- end }}
{{- end }}
{{- if gt (len $handlers) 1 }}
{{- $default := ternary "httpGet" "grpc" (hasPrefix "worker." $name) }}
{{- fail (printf "%s has %d handlers (%s) and Kubernetes takes one: Helm merges your probe with the chart's default, so set the one you do not want to null (e.g. the default's: --set %s.%s=null)" $name (len $handlers) (join ", " $handlers) $name $default) }}
{{- end }}
{{- end }}
{{- $sources := keys (default dict $v.worker.data.volume) | sortAlpha }}
{{- if gt (len $sources) 1 }}
{{- fail (printf "worker.data.volume has %d volume sources (%s) and Kubernetes takes one: Helm merges your volume with the default emptyDir, so set that to null (worker.data.volume.emptyDir: null, or --set worker.data.volume.emptyDir=null)" (len $sources) (join ", " $sources)) }}
{{- end }}
{{- end }}

{{/*
Fails when metrics.port is the gRPC port of the coordinator or the parameter servers: both
servers of the process would bind the same port, and the second fails ("cannot listen on
'0.0.0.0:50051' (address in use?)"), a crash loop. include "dlrm.portsCheck" .
*/}}
{{- define "dlrm.portsCheck" -}}
{{- $metrics := int .Values.metrics.port }}
{{- range $c := list "coordinator" "ps" }}
{{- if eq $metrics (int (index $.Values $c).port) }}
{{- fail (printf "metrics.port %d is also %s.port: the %s would bind it twice and exit (address in use); give them different ports" $metrics $c $c) }}
{{- end }}
{{- end }}
{{- end }}
