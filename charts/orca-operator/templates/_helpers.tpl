{{/* The chart's name, or nameOverride. */}}
{{- define "orca-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: fullnameOverride, else the release name when it
already holds the chart's name, else "<release>-<chart>"; 63 characters at
most, as Kubernetes names allow.
*/}}
{{- define "orca-operator.fullname" -}}
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

{{- define "orca-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "orca-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "orca-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "orca-operator.labels" -}}
helm.sh/chart: {{ include "orca-operator.chart" . }}
{{ include "orca-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The operator's ServiceAccount: the chart's (its full name unless named),
or, with serviceAccount.create false, the one serviceAccount.name names —
never a namespace's `default`, which every other pod there runs as, and
which the admission policies would then exempt.
*/}}
{{- define "orca-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "orca-operator.fullname" .) .Values.serviceAccount.name }}
{{- else if .Values.serviceAccount.name }}
{{- .Values.serviceAccount.name }}
{{- else }}
{{- fail "serviceAccount.name is required when serviceAccount.create is false: the operator's own ServiceAccount, which the admission policies exempt (not the namespace's default one)" }}
{{- end }}
{{- end }}

{{/*
The admission policies' bindings: the namespaces the operator watches, the
same list its --namespace arguments give (all of them with
watchAllNamespaces).
*/}}
{{- define "orca-operator.policyNamespaces" -}}
{{- if not .Values.watchAllNamespaces }}
# The namespaces this operator watches, no others.
matchResources:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values:
          {{- range $namespace := include "orca-operator.watchNamespaces" . | trim | splitList "\n" }}
          - {{ $namespace | quote }}
          {{- end }}
{{- end }}
{{- end }}

{{- define "orca-operator.leaseName" -}}
{{- default (include "orca-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
The namespaces reconciled, one a line: watchNamespaces, or the release
namespace when it is empty. Unused when watchAllNamespaces is true.
*/}}
{{- define "orca-operator.watchNamespaces" -}}
{{- $namespaces := .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- range $namespaces | uniq }}
{{ . }}
{{- end }}
{{- end }}

{{/*
What the operator does in a watched namespace, and nothing more: read its
custom resources and write their status; run scheduler pods and register
Jobs; read the database Secret a Scheduler names (get only: never list or
watch every Secret); record events.
*/}}
{{- define "orca-operator.rules" -}}
# patch: the finalizers that hold a Scheduler until its instances have
# drained, and a WarmPool until its instances are terminated.
- apiGroups: ["orca.dev"]
  resources: ["schedulers", "warmpools"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["orca.dev"]
  resources: ["schedulers/status", "warmpools/status"]
  verbs: ["patch"]
# The pods and Jobs it creates name their Scheduler as controller with
# blockOwnerDeletion, which clusters enforcing owner-reference permissions
# (OpenShift) allow only with update on the owner's finalizers.
- apiGroups: ["orca.dev"]
  resources: ["schedulers/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Secrets: get reads the database URL in the one a Scheduler names; list
# and watch are of metadata only (the operator asks for PartialObjectMetadata
# and keeps no Secret's data), so a changed URL reaches the WarmPools within
# seconds; patch adds and removes the finalizer orca.dev/in-use, which keeps
# a Secret while a Scheduler or WarmPool uses it (its metadata only).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* Values that contradict each other; values.schema.json says so too. */}}
{{- define "orca-operator.validate" -}}
{{- if not .Values.clusterName }}
{{- fail "clusterName is required: a name for this cluster, unique among the clusters whose operators share an AWS account (e.g. --set clusterName=prod-eu-1); every EC2 instance a WarmPool launches is tagged with it, and only instances so tagged are touched" }}
{{- end }}
{{- if and .Values.watchAllNamespaces .Values.watchNamespaces }}
{{- fail "watchAllNamespaces: true and a watchNamespaces list contradict each other; set one of them" }}
{{- end }}
{{- /* An image of an earlier release (a tag kept from the install by
       --reset-then-reuse-values) would not take this chart's arguments
       and never start. Tags that are not a release's (a digest, a
       build's) are the user's to know. */}}
{{- $tag := toString (.Values.image.tag | default .Chart.AppVersion) }}
{{- if and (regexMatch "^v?[0-9]+\\.[0-9]+\\.[0-9]+$" $tag) (semverCompare (printf "< %s" .Chart.AppVersion) $tag) }}
{{- fail (printf "image.tag %s is an earlier release than this chart (%s): its operator does not take this chart's arguments and would not start; set image.tag=%s (a tag set at install is kept by --reset-then-reuse-values)" $tag .Chart.AppVersion .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The tenancy switches, as "true" or "". A release made before they existed
and upgraded with --reuse-values has no `tenancy` at all (Helm then keeps
the old chart's defaults, not this one's): its aggregated roles are added,
its admission policy is not — it would refuse changes to the inline pools
such a release runs.
*/}}
{{- define "orca-operator.requireClass" -}}
{{- $tenancy := .Values.tenancy | default dict }}
{{- if and (hasKey $tenancy "requireClass") $tenancy.requireClass }}true{{ end }}
{{- end }}
{{- define "orca-operator.trustEveryEditor" -}}
{{- $tenancy := .Values.tenancy | default dict }}
{{- if and (hasKey $tenancy "trustEveryEditor") $tenancy.trustEveryEditor }}true{{ end }}
{{- end }}
{{- define "orca-operator.aggregateRoles" -}}
{{- $tenancy := .Values.tenancy | default dict }}
{{- if or (not (hasKey $tenancy "aggregateRoles")) $tenancy.aggregateRoles }}true{{ end }}
{{- end }}

{{/*
Values this chart added since the previous release, when a release of it
is upgraded with --reuse-values (Helm then renders with the old chart's
defaults, which lack them: nil, not this chart's defaults): read as this
chart's defaults say.
*/}}
{{- define "orca-operator.installCrds" -}}
{{- $crds := .Values.crds | default dict }}
{{- if or (not (hasKey $crds "install")) $crds.install }}true{{ end }}
{{- end }}
{{- define "orca-operator.databaseCaDirectories" -}}
{{- if hasKey .Values "databaseCaDirectories" }}
{{- toJson (.Values.databaseCaDirectories | default list) }}
{{- else }}
{{- toJson (list "/etc/orca/db-ca") }}
{{- end }}
{{- end }}
{{- define "orca-operator.credentialSources" -}}
{{- $policy := .Values.networkPolicy | default dict }}
{{- if or (not (hasKey $policy "credentialSources")) $policy.credentialSources }}true{{ end }}
{{- end }}
