{{/*
Helpers for names, labels and the webhook configurations' shared parts.

Nothing here may depend on the time, randomness or the cluster's current state (no now,
randAlphaNum, genCA, lookup): two renders of the same values must be byte-identical, which is
what lets Argo CD and Helm 4's server-side apply own every field the chart renders while
pinhook owns the ones it writes at run time (caBundle and the TLS Secret's data in managed
mode).
*/}}

{{/* The app name: the chart name unless nameOverride. */}}
{{- define "pinhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/*
The base name of every object: the release name when it contains the app name (release
`pinhook` gives `pinhook`), else `<release>-<name>`. At most 52 characters, so that the longest
suffix (`-selfsigned`) still fits a 63-character name.
*/}}
{{- define "pinhook.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "pinhook.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "pinhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels of every object, as YAML. Call with (dict "ctx" $ "component" "webhook"); component is
optional. The chart's own labels win over commonLabels, so selectors cannot be broken by them.
*/}}
{{- define "pinhook.labels" -}}
{{- $ctx := .ctx -}}
{{- $own := dict "app.kubernetes.io/name" (include "pinhook.name" $ctx) -}}
{{- with .component -}}
{{- $_ := set $own "app.kubernetes.io/component" . -}}
{{- end -}}
{{- if $ctx.Values.helmLabels -}}
{{- $_ := set $own "app.kubernetes.io/instance" $ctx.Release.Name -}}
{{- $_ := set $own "app.kubernetes.io/version" ($ctx.Values.image.tag | default $ctx.Chart.AppVersion | trunc 63 | trimSuffix "-") -}}
{{- $_ := set $own "app.kubernetes.io/managed-by" $ctx.Release.Service -}}
{{- $_ := set $own "helm.sh/chart" (include "pinhook.chart" $ctx) -}}
{{- end -}}
{{- toYaml (merge $own (deepCopy ($ctx.Values.commonLabels | default dict))) -}}
{{- end -}}

{{/*
The webhook pods' selector. Without Helm's labels (helmLabels: false, manifests/base) it is
name + component, as the kustomize base has always had: a Deployment's selector is immutable.
*/}}
{{- define "pinhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pinhook.name" . }}
{{- if .Values.helmLabels }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
app.kubernetes.io/component: webhook
{{- end -}}

{{/*
metadata.annotations of every object (commonAnnotations) at indent 2 with a leading newline, or
nothing: use as `{{- include "pinhook.annotations" . }}` right after the labels.
*/}}
{{- define "pinhook.annotations" -}}
{{- with .Values.commonAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{/* registry/repository:tag@digest; tag defaults to appVersion, digest is optional. */}}
{{- define "pinhook.image" -}}
{{- $i := .Values.image -}}
{{- $name := $i.repository -}}
{{- if $i.registry -}}
{{- $name = printf "%s/%s" $i.registry $i.repository -}}
{{- end -}}
{{- printf "%s:%s" $name ($i.tag | default .Chart.AppVersion) -}}
{{- with $i.digest -}}@{{ . }}{{- end -}}
{{- end -}}

{{/* The same image by tag alone: what the helm test asks pinhook to pin. */}}
{{- define "pinhook.imageByTag" -}}
{{- $i := .Values.image -}}
{{- $name := $i.repository -}}
{{- if $i.registry -}}
{{- $name = printf "%s/%s" $i.registry $i.repository -}}
{{- end -}}
{{- printf "%s:%s" $name ($i.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "pinhook.serviceName" -}}
{{- include "pinhook.fullname" . -}}
{{- end -}}

{{- define "pinhook.serviceAccountName" -}}
{{- include "pinhook.fullname" . -}}
{{- end -}}

{{- define "pinhook.policyConfigMapName" -}}
{{- printf "%s-policy" (include "pinhook.fullname" .) -}}
{{- end -}}

{{/* Both webhook configurations (cluster-scoped) are named after the release. */}}
{{- define "pinhook.webhookConfigName" -}}
{{- include "pinhook.fullname" . -}}
{{- end -}}

{{- define "pinhook.tlsSecretName" -}}
{{- if eq .Values.tls.mode "existingSecret" -}}
{{- .Values.tls.existingSecret.name -}}
{{- else -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "pinhook.fullname" .)) -}}
{{- end -}}
{{- end -}}

{{/* The loop breaker's ledger: a ConfigMap in the release namespace. */}}
{{- define "pinhook.loopBreakerName" -}}
{{- printf "%s-loop-breaker" (include "pinhook.fullname" .) -}}
{{- end -}}

{{/* The Lease the replicas elect the one that writes certificates with (managed mode). */}}
{{- define "pinhook.tlsLeaseName" -}}
{{- printf "%s-tls" (include "pinhook.fullname" .) -}}
{{- end -}}

{{- define "pinhook.servingCertificateName" -}}
{{- printf "%s-serving" (include "pinhook.fullname" .) -}}
{{- end -}}

{{/* <service>.<namespace>.svc: the name the apiserver verifies the serving certificate for. */}}
{{- define "pinhook.serviceHost" -}}
{{- printf "%s.%s.svc" (include "pinhook.serviceName" .) .Release.Namespace -}}
{{- end -}}

{{/*
"true" on a cluster older than 1.21 (the end-to-end tier's 1.20): no policy/v1, no batch/v1
CronJob. A real install reads both from the apiserver's discovery; `helm template` has the
built-in API list, so --kube-version decides there.
*/}}
{{- define "pinhook.before121" -}}
{{- if or (semverCompare "<1.21.0-0" .Capabilities.KubeVersion.Version) (not (.Capabilities.APIVersions.Has "policy/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/*
Every namespace the webhooks skip by name: kube-system, kube-public, kube-node-lease and the
release's own namespace always (values cannot remove them), cert-manager's in certManager
mode, then webhook.excludeNamespaces.
*/}}
{{- define "pinhook.excludedNamespaces" -}}
{{- $ns := list "kube-system" "kube-public" "kube-node-lease" .Release.Namespace -}}
{{- if and (eq .Values.tls.mode "certManager") .Values.tls.certManager.namespace -}}
{{- $ns = append $ns .Values.tls.certManager.namespace -}}
{{- end -}}
{{- $ns = concat $ns .Values.webhook.excludeNamespaces -}}
{{- toYaml (uniq $ns) -}}
{{- end -}}

{{/* namespaceSelector of all three webhooks. */}}
{{- define "pinhook.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- include "pinhook.excludedNamespaces" . | nindent 6 }}
  - key: pinhook.dev/ignore
    operator: NotIn
    values: ["true"]
  {{- with .Values.webhook.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.webhook.namespaceSelector.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
clientConfig of a webhook: the Service, or webhook.url (pinhook outside the cluster). Call with
(dict "ctx" $ "path" "/mutate").
*/}}
{{- define "pinhook.clientConfig" -}}
{{- $ctx := .ctx -}}
{{- if $ctx.Values.webhook.url -}}
url: {{ printf "%s%s" $ctx.Values.webhook.url .path }}
{{- else -}}
service:
  name: {{ include "pinhook.serviceName" $ctx }}
  namespace: {{ $ctx.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- if and (eq $ctx.Values.tls.mode "existingSecret") (not $ctx.Values.tls.existingSecret.externalCaBundle) }}
caBundle: {{ $ctx.Values.tls.existingSecret.caBundle }}
{{- else if eq $ctx.Values.tls.mode "managed" }}
# caBundle: written by pinhook at run time (tls.mode managed), never rendered
{{- else if eq $ctx.Values.tls.mode "certManager" }}
# caBundle: injected by cert-manager's cainjector (cert-manager.io/inject-ca-from)
{{- else }}
# caBundle: added by an overlay (generated-certs patch or cert-manager CA injection)
{{- end }}
{{- end -}}

{{/*
metadata.annotations of a webhook configuration (indent 2, leading newline), or nothing. Call
with (dict "ctx" $ "failurePolicies" "pin.pinhook.dev=Fail"): its webhooks' configured
failurePolicy, the annotation pinhook.dev/failure-policy where pinhook raises them.
*/}}
{{- define "pinhook.webhookAnnotations" -}}
{{- $failurePolicies := .failurePolicies -}}
{{- with .ctx -}}
{{- $a := deepCopy (.Values.commonAnnotations | default dict) -}}
{{- $a = merge (deepCopy (.Values.webhook.annotations | default dict)) $a -}}
{{- if eq .Values.tls.mode "certManager" -}}
{{- $_ := set $a "cert-manager.io/inject-ca-from" (printf "%s/%s" .Release.Namespace (include "pinhook.servingCertificateName" .)) -}}
{{- end -}}
{{- if include "pinhook.raiseFailurePolicy" . -}}
{{- $_ := set $a "pinhook.dev/failure-policy" $failurePolicies -}}
{{- end -}}
{{- with $a }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* metadata.labels of both webhook configurations (indent 2, leading newline). */}}
{{- define "pinhook.webhookLabels" -}}
{{- $l := merge (include "pinhook.labels" (dict "ctx" .) | fromYaml) (deepCopy (.Values.webhook.labels | default dict)) }}
  labels:
    {{- toYaml $l | nindent 4 }}
{{- end -}}

{{/* The pod-bearing rules of pin.pinhook.dev and validate.pinhook.dev. */}}
{{- define "pinhook.podRules" -}}
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["pods", "podtemplates", "replicationcontrollers"]
  scope: Namespaced
- apiGroups: [""]
  apiVersions: ["v1"]
  operations: ["UPDATE"]
  resources: ["pods/ephemeralcontainers"]
  scope: Namespaced
- apiGroups: ["apps"]
  apiVersions: ["v1"]
  operations: ["CREATE", "UPDATE"]
  resources: ["deployments", "replicasets", "statefulsets", "daemonsets"]
  scope: Namespaced
{{- if include "pinhook.before121" . }}
# batch/v1beta1 too: before 1.21 CronJob is served only there, and a v1-only rule never
# matches it, even with matchPolicy Equivalent.
- apiGroups: ["batch"]
  apiVersions: ["v1", "v1beta1"]
{{- else }}
- apiGroups: ["batch"]
  apiVersions: ["v1"]
{{- end }}
  operations: ["CREATE", "UPDATE"]
  resources: ["jobs", "cronjobs"]
  scope: Namespaced
{{- /* The policy's extra pod-bearing kinds (Argo Rollouts' Rollout) and custom resources
       (CloudNativePG's Cluster): pinhook reads their images, so the webhooks must see them.
       Every version: pinhook finds images by group and kind, never by version. */}}
{{- range concat (.Values.policy.kinds | default list) (.Values.policy.customResources | default list) }}
- apiGroups: [{{ .group | default "" | quote }}]
  apiVersions: ["*"]
  operations: ["CREATE", "UPDATE"]
  resources: [{{ .resource | default (printf "%ss" (lower .kind)) | quote }}]
  scope: Namespaced
{{- end }}
{{- end -}}

{{/*
The policy written into the policy ConfigMap: .Values.policy with registries.hosts.<host>.ca set
to the mounted file of each registryCAs entry that names a host (templates/validate.yaml refuses
a host whose ca the policy already sets).
*/}}
{{- define "pinhook.policy" -}}
{{- $policy := deepCopy .Values.policy -}}
{{- range $i, $ca := .Values.registryCAs -}}
{{- if $ca.host -}}
{{- $registries := get $policy "registries" | default dict -}}
{{- $hosts := get $registries "hosts" | default dict -}}
{{- $host := get $hosts $ca.host | default dict -}}
{{- $_ := set $host "ca" (include "pinhook.registryCAPath" (dict "i" $i "ca" $ca)) -}}
{{- $_ := set $hosts $ca.host $host -}}
{{- $_ := set $registries "hosts" $hosts -}}
{{- $_ := set $policy "registries" $registries -}}
{{- end -}}
{{- end -}}
{{- toYaml $policy -}}
{{- end -}}

{{/* The file of registryCAs entry i inside the pods. Call with (dict "i" $i "ca" $ca). */}}
{{- define "pinhook.registryCAPath" -}}
{{- printf "/etc/pinhook/registry-ca/%d/%s" .i (.ca.key | default "ca.crt") -}}
{{- end -}}

{{/*
env of the webhook and watch containers for registryCAs and nodeCredentialProviders (indent 12,
leading newline), or nothing.
*/}}
{{- define "pinhook.registryEnv" -}}
{{- $global := list -}}
{{- range $i, $ca := .Values.registryCAs -}}
{{- if not $ca.host -}}
{{- $global = append $global (include "pinhook.registryCAPath" (dict "i" $i "ca" $ca)) -}}
{{- end -}}
{{- end -}}
{{- with $global }}
            # registryCAs without a host: trusted for every registry.
            - name: PINHOOK_REGISTRY_CA
              value: {{ join "," . | quote }}
{{- end }}
{{- $ncp := .Values.nodeCredentialProviders -}}
{{- if $ncp.enabled }}
            # nodeCredentialProviders: the kubelet's credential provider plugins, tried after
            # the pod's pull secrets.
            - name: PINHOOK_IMAGE_CREDENTIAL_PROVIDER_CONFIG
              value: {{ include "pinhook.credentialProviderConfigPath" . }}
            - name: PINHOOK_IMAGE_CREDENTIAL_PROVIDER_BIN_DIR
              value: /etc/pinhook/node/credential-provider-bin
{{- end }}
{{- end -}}

{{- define "pinhook.credentialProviderConfigPath" -}}
{{- $ncp := .Values.nodeCredentialProviders -}}
{{- if $ncp.configMap.name -}}
{{- printf "/etc/pinhook/node/credential-provider-config/%s" $ncp.configMap.key -}}
{{- else -}}
/etc/pinhook/node/credential-provider-config
{{- end -}}
{{- end -}}

{{/* volumeMounts for registryCAs and nodeCredentialProviders (indent 12, leading newline). */}}
{{- define "pinhook.registryVolumeMounts" -}}
{{- range $i, $ca := .Values.registryCAs }}
            - name: registry-ca-{{ $i }}
              mountPath: /etc/pinhook/registry-ca/{{ $i }}
              readOnly: true
{{- end }}
{{- range $key := .Values.signatureKeys }}
            - name: signature-key-{{ $key.name }}
              mountPath: /etc/pinhook/signature-keys/{{ $key.name }}
              readOnly: true
{{- end }}
{{- if .Values.nodeCredentialProviders.enabled }}
            - name: node-credential-provider-config
              mountPath: /etc/pinhook/node/credential-provider-config
              readOnly: true
            - name: node-credential-provider-bin
              mountPath: /etc/pinhook/node/credential-provider-bin
              readOnly: true
{{- end }}
{{- end -}}

{{/*
volumes for registryCAs and nodeCredentialProviders (indent 8, leading newline). A CA is mounted
as a directory with the one key (never subPath: the kubelet then keeps it current).
*/}}
{{- define "pinhook.registryVolumes" -}}
{{- range $i, $ca := .Values.registryCAs }}
        - name: registry-ca-{{ $i }}
          {{- if $ca.secret }}
          secret:
            secretName: {{ $ca.secret }}
            defaultMode: 0444
          {{- else }}
          configMap:
            name: {{ $ca.configMap }}
          {{- end }}
            items:
              - key: {{ $ca.key | default "ca.crt" }}
                path: {{ $ca.key | default "ca.crt" }}
{{- end }}
{{- range $key := .Values.signatureKeys }}
        - name: signature-key-{{ required "signatureKeys[].name is required" $key.name }}
          {{- if $key.secret }}
          secret:
            secretName: {{ $key.secret }}
            defaultMode: 0444
          {{- else }}
          configMap:
            name: {{ required "signatureKeys[] needs configMap or secret" $key.configMap }}
          {{- end }}
            items:
              - key: {{ $key.key | default "cosign.pub" }}
                path: {{ $key.key | default "cosign.pub" }}
{{- end }}
{{- $ncp := .Values.nodeCredentialProviders -}}
{{- if $ncp.enabled }}
        - name: node-credential-provider-config
          {{- if $ncp.configMap.name }}
          configMap:
            name: {{ $ncp.configMap.name }}
            items:
              - key: {{ $ncp.configMap.key }}
                path: {{ $ncp.configMap.key }}
          {{- else }}
          hostPath:
            path: {{ $ncp.configHostPath }}
            type: File
          {{- end }}
        - name: node-credential-provider-bin
          hostPath:
            path: {{ $ncp.binDirHostPath }}
            type: Directory
{{- end }}
{{- end -}}

{{/*
"true" when pinhook keeps its own namespace out of its webhooks itself (issue 26): a cluster
older than 1.21, where no namespaceSelector can name a namespace (the apiserver sets
kubernetes.io/metadata.name from 1.21), with pinhook running in the cluster (not webhook.url).
There every webhook is rendered failurePolicy Ignore, the configured policies go into the
annotation pinhook.dev/failure-policy, and pinhook labels its namespace pinhook.dev/ignore=true
and only then sets each webhook to its annotated policy (pinhook serve --raise-failure-policy).
*/}}
{{- define "pinhook.raiseFailurePolicy" -}}
{{- if and (include "pinhook.before121" .) (not .Values.webhook.url) -}}
true
{{- end -}}
{{- end -}}

{{/* A webhook's rendered failurePolicy. Call with (dict "ctx" $ "policy" "Fail"). */}}
{{- define "pinhook.failurePolicy" -}}
{{- if include "pinhook.raiseFailurePolicy" .ctx -}}
Ignore
{{- else -}}
{{- .policy -}}
{{- end -}}
{{- end -}}

{{/*
The matchConditions of pin.pinhook.dev and validate.pinhook.dev (Kubernetes 1.28+, GA in 1.30):
the apiserver calls pinhook unless the object is a Pod whose every image already is a valid
name[:tag]@sha256:<digest> (cel/call-unless-pinned-pod.cel, evaluated against pinhook itself
by tests/integration/admission/match_conditions.rs). Only while the chart's policy has pinhook
pass such a Pod unchanged: not under resolve: Always, not with verify entries. The condition
reads no namespaceObject (the apiserver passes none to webhook matchConditions).
*/}}
{{- define "pinhook.matchConditions" -}}
{{- $policy := .Values.policy | default dict -}}
{{- if and .Values.webhook.skipPinnedPods (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version) (ne (toString (get $policy "resolve")) "Always") (not (get $policy "verify")) -}}
matchConditions:
  - name: not-a-pinned-pod
    expression: {{ .Files.Get "cel/call-unless-pinned-pod.cel" | trim | quote }}
{{- end }}
{{- end }}

{{/*
Whether the ValidatingAdmissionPolicy and its binding are rendered (templates/
validatingadmissionpolicy.yaml): webhook.apiserverPolicy, Kubernetes 1.30+, and a policy whose
enforce refuses every unpinned image (not onResolutionFailure: allow).
*/}}
{{- define "pinhook.apiserverPolicy" -}}
{{- $policy := .Values.policy | default dict -}}
{{- if and .Values.webhook.apiserverPolicy (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) (ne (toString (get $policy "onResolutionFailure")) "allow") -}}
true
{{- end -}}
{{- end -}}

{{- define "pinhook.apiserverPolicyName" -}}
{{- printf "%s-pinned-pods" (include "pinhook.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The globs of a list in pinhook's policy (`*` any run of characters, `?` one, the rest literal,
the whole string) as one anchored RE2 regex for CEL's matches(), '' for none. Call with the list.
*/}}
{{- define "pinhook.globsRegex" -}}
{{- $parts := list -}}
{{- range . -}}
{{- $parts = append $parts (regexQuoteMeta (toString .) | replace "\\*" ".*" | replace "\\?" ".") -}}
{{- end -}}
{{- if $parts -}}
{{- printf "^(?:%s)$" (join "|" $parts) -}}
{{- end -}}
{{- end -}}
