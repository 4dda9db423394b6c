{{/* Chart name, at most 63 characters. */}}
{{- define "nri-housekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it contains the chart name. */}}
{{- define "nri-housekeeper.fullname" -}}
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

{{- define "nri-housekeeper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nri-housekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-housekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nri-housekeeper.labels" -}}
helm.sh/chart: {{ include "nri-housekeeper.chart" . }}
{{ include "nri-housekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "nri-housekeeper.serviceAccountName" -}}
{{- if eq (toString .Values.serviceAccount.create) "true" }}
{{- default (include "nri-housekeeper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "nri-housekeeper.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the plugin finds its configuration in the container. */}}
{{- define "nri-housekeeper.configDir" -}}/etc/nri-housekeeper{{- end }}

{{/*
A boolean value as "true" or "false": (list KEY VALUE DEFAULT). VALUE is a
boolean or the string "true" or "false" (helm --set-string, a quoted YAML
value), null is DEFAULT; anything else fails the render, naming KEY. Every
boolean decision goes through eq (toString VALUE) "true", never plain
truthiness: the string "false" is truthy. tomlValue writes the strings of
the plugin's boolean keys as TOML booleans, so the mounts decided here and
the config the plugin reads agree.
*/}}
{{- define "nri-housekeeper.bool" -}}
{{- $key := index . 0 }}{{ $v := index . 1 }}
{{- if kindIs "invalid" $v }}{{ $v = index . 2 }}{{ end }}
{{- if not (and (or (kindIs "bool" $v) (kindIs "string" $v)) (has (toString $v) (list "true" "false"))) }}
{{- fail (printf "%s: expected a boolean (true or false), got %s %s" $key (kindOf $v) (toJson $v)) }}
{{- end }}
{{- if eq (toString $v) "true" }}true{{ else }}false{{ end }}
{{- end }}

{{/* Whether the kubelet pods dir is mounted read-only: unless config.pod_dirs.remove_orphaned. */}}
{{- define "nri-housekeeper.podsReadOnly" -}}
{{- $remove := dig "pod_dirs" "remove_orphaned" false (default dict .Values.config) }}
{{- if eq (include "nri-housekeeper.bool" (list "config.pod_dirs.remove_orphaned" $remove false)) "true" }}false{{ else }}true{{ end }}
{{- end }}

{{/* Whether config.dry_run is on: "true" or "false". */}}
{{- define "nri-housekeeper.dryRun" -}}
{{- include "nri-housekeeper.bool" (list "config.dry_run" (dig "dry_run" false (default dict .Values.config)) false) }}
{{- end }}

{{/*
Whether the network side is on: network.enabled, unless the config turns it
off (config.network.enabled: false). "true" or "false".
*/}}
{{- define "nri-housekeeper.networkEnabled" -}}
{{- $cfgOn := include "nri-housekeeper.bool" (list "config.network.enabled" (dig "network" "enabled" true (default dict .Values.config)) true) }}
{{- if and (eq (toString .Values.network.enabled) "true") (eq $cfgOn "true") }}true{{ else }}false{{ end }}
{{- end }}

{{/*
The state file in the container (housekeeping.state_file): state.json in
stateDir, which is mounted from the node at the same path; "" (keep nothing)
when stateDir is empty.
*/}}
{{- define "nri-housekeeper.stateFile" -}}
{{- if .Values.stateDir }}{{ printf "%s/state.json" (trimSuffix "/" (clean .Values.stateDir)) }}{{ end }}
{{- end }}

{{/*
The configuration: .Values.config with the keys that must match the
DaemonSet's mounts and ports set by the chart.
*/}}
{{- define "nri-housekeeper.config" -}}
{{- $v := .Values -}}
{{- $cfg := deepCopy (default dict $v.config) -}}
{{- $set := dict
  "nri" (dict "socket" (clean (printf "%s/%s" $v.nri.socketDir $v.nri.socketName)))
  "runtime" (dict "endpoint" (printf "unix://%s" (clean (printf "%s/%s" $v.containerd.socketDir $v.containerd.socketName))))
  "pods" (dict "kubelet_root" $v.kubelet.rootDir)
  "logs" (dict "pod_logs_dir" $v.kubelet.podLogsDir "container_logs_dir" $v.kubelet.containerLogsDir)
  "cgroups" (dict "mountpoint" (clean $v.cgroupMountpoint))
  "metrics" (dict "address" (printf ":%d" (int $v.metrics.port)))
  "log" (dict "target" "stderr")
  "housekeeping" (dict "state_file" (include "nri-housekeeper.stateFile" .))
  "network" (dict "enabled" (eq (include "nri-housekeeper.networkEnabled" .) "true") "cache_dir" $v.network.cacheDir "conf_dir" $v.network.confDir "bin_dir" $v.network.binDir "netns_dir" $v.network.netnsDir "exec_root" $v.network.execRoot)
-}}
{{- /* Set key by key: merge would let config fill a chart key whose value is empty ("", false). */ -}}
{{- range $section, $keys := $set }}
{{- $s := default dict (get $cfg $section) }}
{{- if not (kindIs "map" $s) }}
{{- fail (printf "config.%s: a section of keys, got %s" $section (kindOf $s)) }}
{{- end }}
{{- range $k, $val := $keys }}
{{- $_ := set $s $k $val }}
{{- end }}
{{- $_ := set $cfg $section $s }}
{{- end }}
{{- include "nri-housekeeper.toml" $cfg }}
{{- end }}

{{/*
TOML of a config map: top-level scalars, then one [section] per map, keys
sorted. A null value leaves the key out. Helm's toToml is not used: it turns
every YAML number into a float (4 -> 4.0), which the plugin rightly rejects
for integer keys.
*/}}
{{- define "nri-housekeeper.toml" -}}
# Rendered by the nri-housekeeper Helm chart from .Values.config.
# Every key, its default and meaning: nri-housekeeper config example
{{- range $k, $v := . }}
{{- if and (not (kindIs "map" $v)) (not (kindIs "invalid" $v)) }}
{{ $k }} = {{ include "nri-housekeeper.tomlValue" (list $k $v) }}
{{- end }}
{{- end }}
{{- range $section, $keys := . }}
{{- if kindIs "map" $keys }}
[{{ $section }}]
{{- range $k, $v := $keys }}
{{- if not (kindIs "invalid" $v) }}
{{ $k }} = {{ include "nri-housekeeper.tomlValue" (list (printf "%s.%s" $section $k) $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
One TOML value. The plugin's only number keys are listed here: whole numbers
are written as integers, and a number given as a string (helm --set turns
0.25 into "0.25") is written as a number. A number for any other key is
written as a string (helm --set turns plugin_index=20 into 20). So are its
boolean keys: a boolean, or the string "true" or "false" (helm --set-string,
a quoted YAML value), is written as a TOML boolean, anything else fails the
render (the plugin would refuse it: a crash loop). Other booleans and
strings are written as they are.
*/}}
{{- define "nri-housekeeper.tomlValue" -}}
{{- $key := index . 0 }}{{ $v := index . 1 }}
{{- $numberKeys := list "housekeeping.max_parallel" "containers.max_per_pod_container" "containers.max_containers" "budget.max_per_pass" "budget.max_fraction" "budget.min_per_pass" "budget.max_per_hour" }}
{{- $boolKeys := list "dry_run" "cgroups.enabled" "pod_dirs.remove_orphaned" "network.enabled" }}
{{- $isNumber := or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) }}
{{- if has $key $boolKeys }}{{ include "nri-housekeeper.bool" (list (printf "config.%s" $key) $v false) }}
{{- else if and (has $key $numberKeys) (kindIs "string" $v) (regexMatch "^-?[0-9]+(\\.[0-9]+)?$" $v) }}{{ $v }}
{{- else if and $isNumber (has $key $numberKeys) }}
{{- if eq (float64 $v) (float64 (int64 $v)) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if $isNumber }}{{ if eq (float64 $v) (float64 (int64 $v)) }}{{ int64 $v | toString | toJson }}{{ else }}{{ $v | toString | toJson }}{{ end }}
{{- else if kindIs "string" $v }}{{ toJson $v }}
{{- else if kindIs "bool" $v }}{{ $v }}
{{- else }}{{ fail (printf "config.%s: only strings, numbers and booleans (and one level of sections) are supported, got %s" $key (kindOf $v)) }}
{{- end }}
{{- end }}

{{/*
systemd's runtime dir to mount (systemdRunDir), or "" when the plugin
cannot use it: cgroups disabled, or the cgroupfs driver set.
*/}}
{{- define "nri-housekeeper.systemdRunDir" -}}
{{- $cgroups := dig "cgroups" dict (default dict .Values.config) -}}
{{- $enabled := include "nri-housekeeper.bool" (list "config.cgroups.enabled" (dig "enabled" true $cgroups) true) -}}
{{- if and .Values.systemdRunDir (eq $enabled "true") (ne (toString (dig "driver" "auto" $cgroups)) "cgroupfs") -}}
{{- clean .Values.systemdRunDir -}}
{{- end -}}
{{- end }}
