{{/* The name every object carries: the release name when it already says etcd-operator. */}}
{{- define "etcd-operator.fullname" -}}
{{- if contains "etcd-operator" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-etcd-operator" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "etcd-operator.labels" -}}
app.kubernetes.io/name: etcd-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component (controller, worker, http, redis). */}}
{{- define "etcd-operator.selector" -}}
app.kubernetes.io/name: etcd-operator
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "etcd-operator.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "etcd-operator.redisUrl" -}}
{{- if .Values.redis.bundled -}}
redis://{{ include "etcd-operator.fullname" . }}-redis:6379
{{- else -}}
{{- required "redis.url is required when redis.bundled is false (or give redis.sentinel.addresses)" .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/* The sentinels, host:port joined by commas: the bundled group's pods, or redis.sentinel.addresses. */}}
{{- define "etcd-operator.sentinelAddresses" -}}
{{- $sentinel := .Values.redis.sentinel | default dict }}
{{- if $sentinel.bundled }}
{{- $name := include "etcd-operator.fullname" . }}
{{- $addresses := list }}
{{- range $i := until 3 }}
{{- $addresses = append $addresses (printf "%s-redis-%d.%s-redis-headless.%s.svc:26379" $name $i $name $.Release.Namespace) }}
{{- end }}
{{- join "," $addresses }}
{{- else }}
{{- join "," ($sentinel.addresses | default list) }}
{{- end }}
{{- end -}}

{{/* Where the operator finds Redis: a URL, or a Sentinel group (with optional Secrets). */}}
{{- define "etcd-operator.redisEnv" -}}
{{- $sentinel := .Values.redis.sentinel | default dict }}
{{- if $sentinel.bundled }}
{{- if $sentinel.addresses }}
{{- fail "redis.sentinel.bundled runs its own group: leave redis.sentinel.addresses empty" }}
{{- end }}
- name: REDIS_SENTINELS
  value: {{ include "etcd-operator.sentinelAddresses" . | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ $sentinel.masterName | default "mymaster" | quote }}
{{- else if $sentinel.addresses }}
{{- if .Values.redis.bundled }}
{{- fail "redis.sentinel.addresses needs redis.bundled=false (the bundled Redis is a single server)" }}
{{- end }}
{{- if .Values.redis.url }}
{{- fail "redis.url and redis.sentinel.addresses are both set: give one or the other" }}
{{- end }}
- name: REDIS_SENTINELS
  value: {{ join "," $sentinel.addresses | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ $sentinel.masterName | default "mymaster" | quote }}
{{- if $sentinel.tls }}
- name: REDIS_SENTINEL_TLS
  value: "true"
{{- end }}
{{- else }}
- name: REDIS_URL
  value: {{ include "etcd-operator.redisUrl" . | quote }}
{{- end }}
{{- with .Values.redis.passwordSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: { name: {{ . | quote }}, key: password, optional: true }
- name: REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef: { name: {{ . | quote }}, key: sentinel-password, optional: true }
{{- end }}
{{- if .Values.redis.caSecret }}
- name: REDIS_TLS_CA_FILE
  value: /etc/etcd-operator/redis-ca/ca.crt
{{- end }}
{{- end -}}

{{/* The volume and mount of redis.caSecret, for every operator container. */}}
{{- define "etcd-operator.redisCaVolume" -}}
{{- with .Values.redis.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ . | quote }}
{{- end }}
{{- end -}}
{{- define "etcd-operator.redisCaMount" -}}
{{- if .Values.redis.caSecret }}
- name: redis-ca
  mountPath: /etc/etcd-operator/redis-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* Environment every operator container shares. */}}
{{- define "etcd-operator.env" -}}
- name: MY_POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{ include "etcd-operator.redisEnv" . }}
- name: CLUSTER_WIDE
  value: {{ eq .Values.scope "cluster-wide" | quote }}
- name: LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: RECONCILE_INTERVAL_MS
  value: {{ .Values.config.reconcileIntervalMs | quote }}
- name: FULL_LOOK_INTERVAL_MS
  value: {{ .Values.config.fullLookIntervalMs | quote }}
{{- /* Restores run their init containers from the operator's own image. */}}
- name: OPERATOR_IMAGE
  value: {{ include "etcd-operator.image" . | quote }}
{{- with .Values.config.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "etcd-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "etcd-operator.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Health probes of a role without the HTTP server, on its metrics port. */}}
{{- define "etcd-operator.metricsProbes" -}}
livenessProbe:
  httpGet:
    path: /livez
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ .port }}
  periodSeconds: 5
  # /readyz itself waits up to 2 s for Redis and the API: the default 1 s would fail it first.
  timeoutSeconds: 3
{{- end -}}

{{- define "etcd-operator.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
