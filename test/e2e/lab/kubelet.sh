#!/usr/bin/env bash
# A real kubelet beside the lab's containerd: standalone (no API server, no kubeconfig, static
# pods only, hostNetwork pods), cgroupfs driver under the lab's cgroup root. Needs root, Go and
# the Go module proxy; runs against a lab that `lab.sh up` started in $LAB_DIR.
#
#   kubelet.sh install     build kubelet $KUBE_VERSION from the Go module proxy into
#                          $LAB_TOOLS/bin/kubelet (idempotent: kept while `kubelet --version`
#                          says $KUBE_VERSION; measured cold on 2 vCPUs: about 5 min idle,
#                          9 min 44 s while other builds ran; 2.1 GB peak RSS; a 92 MB binary)
#   kubelet.sh up          prepare (node state, cgroup root, config) and start kubelet in the
#                          background; returns once its sync loop runs
#   kubelet.sh prepare     only the preparation (then `exec` runs kubelet in the foreground)
#   kubelet.sh exec        exec kubelet in the foreground (its log goes to stdout/stderr)
#   kubelet.sh start       start kubelet in the background again (after stop or kill)
#   kubelet.sh stop        SIGTERM, SIGKILL after 10 s (its pods keep running)
#   kubelet.sh kill        SIGKILL
#   kubelet.sh down        stop kubelet and remove what it made: its root dir (unmounted), pod
#                          logs, the /var/log/containers links to them, its empty QoS and pod
#                          cgroups in every hierarchy (those of pods still running go with the
#                          lab's cgroup root at lab.sh down); the last kubelet lab of the node
#                          also restores the sysctls kubelet changed and removes what it created
#                          under /var/lib/kubelet and /var/log/containers. Pods and containerd
#                          stay: `lab.sh down` next.
#   kubelet.sh env         the paths as shell exports (KUBELET_*)
#   kubelet.sh status      kubelet's pid, static pods, node state
#
# Environment (all optional):
#   LAB_DIR=/tmp/nrihk-lab     the lab (containerd.sock in it)
#   LAB_TOOLS=/tmp/nrihk-tools install dir (bin/kubelet; the build module in kubelet-build/)
#   LAB_CGROUP_ROOT=/kubepods  kubelet's cgroupRoot: pods go to <root>/kubepods/<qos>/pod<uid>
#   KUBE_VERSION=v1.37.2       k8s.io/kubernetes version to build
#   KUBELET_DIR=$LAB_DIR/kubelet   config, manifests (static pods), root dir, pod logs, log
#   KUBELET_NODE=labnode       node name (static pods are named <name>-<node>)
#   KUBELET_V=2                kubelet's log verbosity
#   KUBELET_NODE_STATE=/run/nrihk-kubelet   node-wide record of what kubelet labs changed
#                              outside their dirs (saved sysctls, users); /run: gone at reboot,
#                              like the sysctls themselves
#
# Paths kubelet hard-codes and shares with every other kubelet of the node:
#   /var/log/containers/<pod>_<ns>_<ctr>-<id>.log   container log links
#   /var/lib/kubelet/device-plugins/                 its device-plugin socket and checkpoint
set -euo pipefail

LAB_DIR=${LAB_DIR:-/tmp/nrihk-lab}
LAB_DIR=${LAB_DIR%/}
LAB_TOOLS=${LAB_TOOLS:-/tmp/nrihk-tools}
LAB_CGROUP_ROOT=${LAB_CGROUP_ROOT:-/kubepods}
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
KUBELET_DIR=${KUBELET_DIR:-$LAB_DIR/kubelet}
KUBELET_DIR=${KUBELET_DIR%/}
KUBELET_NODE=${KUBELET_NODE:-labnode}
KUBELET_V=${KUBELET_V:-2}
NODE_STATE=${KUBELET_NODE_STATE:-/run/nrihk-kubelet}

KUBELET=$LAB_TOOLS/bin/kubelet
BUILD_DIR=$LAB_TOOLS/kubelet-build
SOCK=$LAB_DIR/containerd.sock
CONFIG=$KUBELET_DIR/config.yaml
MANIFESTS=$KUBELET_DIR/manifests
ROOT=$KUBELET_DIR/root
PODLOGS=$KUBELET_DIR/log/pods
KLOG=$KUBELET_DIR/kubelet.log
PIDFILE=$KUBELET_DIR/kubelet.pid
MARKER=$KUBELET_DIR/.made-by-kubelet.sh # down removes KUBELET_DIR only with it
LINKS=/var/log/containers
VAR_LIB=/var/lib/kubelet
DEVICE_PLUGINS=$VAR_LIB/device-plugins
# What kubelet writes with protectKernelDefaults: false (setupKernelTunables in
# pkg/kubelet/cm/container_manager_linux.go of v1.37.2).
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
CRI="$LAB_TOOLS/bin/cri -sock $SOCK -timeout 10s"

log() { printf '[kubelet] %s\n' "$*" >&2; }
die() {
	printf '[kubelet] ERROR: %s\n' "$*" >&2
	exit 1
}

[[ $KUBELET_DIR == /?* && $KUBELET_DIR != / ]] || die "KUBELET_DIR must be an absolute path, not '$KUBELET_DIR'"
[[ $LAB_CGROUP_ROOT == /?* && $LAB_CGROUP_ROOT != / ]] || die "LAB_CGROUP_ROOT must be a cgroup below /, not '$LAB_CGROUP_ROOT'"

# ---------------------------------------------------------------- install ---

# The wrapper module: k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the
# staging modules with ./staging/...), so a module of our own requires it and replaces each
# staging module with its published v0.X.Y.
build_kubelet() {
	local want="Kubernetes $KUBE_VERSION" dir sv gov minor t0 v=k8s.io/component-base/version
	if [[ -x $KUBELET && $("$KUBELET" --version 2>/dev/null) == "$want" ]]; then
		log "kubelet $KUBE_VERSION already in $LAB_TOOLS/bin"
		return
	fi
	command -v go >/dev/null || die "go is not installed"
	t0=$EPOCHREALTIME
	sv=${KUBE_VERSION/#v1./v0.} # staging modules: v1.37.2 -> v0.37.2
	minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	rm -rf "$BUILD_DIR"
	mkdir -p "$BUILD_DIR" "$LAB_TOOLS/bin"
	cd "$BUILD_DIR"
	export GOWORK=off GOFLAGS=-mod=mod
	log "go mod download k8s.io/kubernetes@$KUBE_VERSION"
	dir=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
	[[ -f $dir/go.mod ]] || die "go mod download k8s.io/kubernetes@$KUBE_VERSION failed (needs the Go module proxy)"
	gov=$(awk '$1 == "go" {print $2; exit}' "$dir/go.mod")
	{
		printf 'module nrihk-kubelet-build\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "${gov:-1.26.0}" "$KUBE_VERSION"
		awk -v sv="$sv" '$2 == "=>" && $3 ~ /^\.\/staging\// {printf "\t%s => %s %s\n", $1, $1, sv}' "$dir/go.mod"
		echo ")"
	} >go.mod
	log "go get k8s.io/kubernetes/cmd/kubelet@$KUBE_VERSION (staging modules at $sv)"
	go get "k8s.io/kubernetes/cmd/kubelet@$KUBE_VERSION" >&2
	log "go build kubelet (5-10 min and 2.1 GB of RAM cold on 2 cores)"
	# Without the -X flags --version says v0.0.0-master.
	go build -trimpath -o "$KUBELET.tmp" -ldflags "-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 \
		-X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		k8s.io/kubernetes/cmd/kubelet
	[[ $("$KUBELET.tmp" --version) == "$want" ]] || die "built kubelet says '$("$KUBELET.tmp" --version)', not '$want'"
	mv "$KUBELET.tmp" "$KUBELET"
	log "built $("$KUBELET" --version) in $(printf '%.0f' "$(bc <<<"$EPOCHREALTIME - $t0")") s: $KUBELET"
}

cmd_install() {
	mkdir -p "$LAB_TOOLS"
	# Concurrent installs (several test packages, several labs) build once.
	(
		flock 9
		build_kubelet
	) 9>"$LAB_TOOLS/.kubelet-install.lock"
}

# ------------------------------------------------------------- node state ---

# Everything a kubelet changes outside its own dirs is shared by every kubelet of the node:
# the sysctls, /var/lib/kubelet/device-plugins and /var/log/containers. The first kubelet lab
# records their state before (sysctls saved, which paths were absent), each one registers as a
# user, and the last one to go restores them. A user whose KUBELET_DIR is gone (its lab went
# down without `kubelet.sh down`) no longer counts.
user_file() { echo "$NODE_STATE/users/$(printf '%s' "$KUBELET_DIR" | sha256sum | cut -c1-16)"; }

prune_users() {
	local f d
	shopt -s nullglob
	for f in "$NODE_STATE"/users/*; do
		d=$(<"$f")
		[[ -d $d ]] || {
			log "kubelet lab $d is gone: no longer a user of the node state"
			rm -f "$f"
		}
	done
	shopt -u nullglob
}

users_left() { compgen -G "$NODE_STATE/users/*" >/dev/null; }

node_register() {
	local s p
	mkdir -p "$NODE_STATE/users"
	prune_users
	if ! users_left && [[ ! -f $NODE_STATE/sysctl.saved ]]; then
		for s in $SYSCTLS; do echo "$s=$(sysctl -n "$s")"; done >"$NODE_STATE/sysctl.saved.tmp"
		mv "$NODE_STATE/sysctl.saved.tmp" "$NODE_STATE/sysctl.saved"
		: >"$NODE_STATE/absent"
		for p in "$LINKS" "$VAR_LIB" "$DEVICE_PLUGINS" "$DEVICE_PLUGINS/kubelet.sock" "$DEVICE_PLUGINS/kubelet_internal_checkpoint"; do
			[[ -e $p || -L $p ]] || echo "$p" >>"$NODE_STATE/absent"
		done
		log "node state saved in $NODE_STATE: $(tr '\n' ' ' <"$NODE_STATE/sysctl.saved")"
	fi
	echo "$KUBELET_DIR" >"$(user_file)"
}

# node_release: drop this user; the last one restores the node.
node_release() {
	local s v p cur
	[[ -d $NODE_STATE ]] || return 0
	rm -f "$(user_file)"
	prune_users
	if users_left; then
		log "other kubelet labs still run ($(cat "$NODE_STATE"/users/* | tr '\n' ' ')): node state kept"
		return 0
	fi
	if [[ -f $NODE_STATE/sysctl.saved ]]; then
		while IFS='=' read -r s v; do
			cur=$(sysctl -n "$s")
			[[ $cur == "$v" ]] || sysctl -q -w "$s=$v"
		done <"$NODE_STATE/sysctl.saved"
		log "sysctls restored: $(tr '\n' ' ' <"$NODE_STATE/sysctl.saved")"
	fi
	if [[ -f $NODE_STATE/absent ]]; then
		# Deepest first: the files, then the dirs if they are empty (what another program put
		# there since stays, and so does its dir).
		while read -r p; do
			if [[ $p == "$DEVICE_PLUGINS"/* ]]; then
				rm -f "$p"
			elif [[ -d $p ]]; then
				rmdir "$p" 2>/dev/null || log "$p was made by kubelet but is not empty: kept"
			fi
		done < <(sort -r "$NODE_STATE/absent")
	fi
	rm -rf "$NODE_STATE"
}

# The node state's lock lives with the tools (like lab.sh's install lock), not next to the state:
# it would be a leftover on the node.
lock_file() {
	mkdir -p "$LAB_TOOLS"
	echo "$LAB_TOOLS/.kubelet-node.lock"
}

# --------------------------------------------------------------------- up ---

# kubelet_alive: the pid in the pidfile runs kubelet with this config (not a zombie: nobody
# may reap a killed kubelet).
kubelet_alive() {
	local pid stat
	[[ -f $PIDFILE ]] || return 1
	pid=$(<"$PIDFILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]] || return 1
	[[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "--config $CONFIG "
}

# The cgroup root must exist in every v1 hierarchy before kubelet starts (it checks cpu,
# cpuacct, cpuset, memory, pids, systemd), cpuset with cpus and mems to be usable.
make_cgroup_root() {
	local h cs=/sys/fs/cgroup/cpuset
	for h in /sys/fs/cgroup/*/; do
		[[ $h == /sys/fs/cgroup/unified/ ]] && continue
		mkdir -p "${h%/}$LAB_CGROUP_ROOT"
	done
	if [[ -f $cs$LAB_CGROUP_ROOT/cpuset.cpus && -z $(<"$cs$LAB_CGROUP_ROOT/cpuset.cpus") ]]; then
		cat "$cs/cpuset.cpus" >"$cs$LAB_CGROUP_ROOT/cpuset.cpus"
		cat "$cs/cpuset.mems" >"$cs$LAB_CGROUP_ROOT/cpuset.mems"
	fi
}

write_config() {
	cat >"$CONFIG.tmp" <<EOF
# Generated by kubelet.sh. Standalone: no kubeconfig, so no API server, no node
# registration, static pods from staticPodPath only.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $MANIFESTS
fileCheckFrequency: 1s
syncFrequency: 10s
podLogsDir: $PODLOGS
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
runtimeRequestTimeout: 2m
# cgroup v1 (hybrid) with cgroupfs: pods go to $LAB_CGROUP_ROOT/kubepods/<qos>/pod<uid>
cgroupDriver: cgroupfs
cgroupRoot: $LAB_CGROUP_ROOT
cgroupsPerQOS: true
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
# kubelet then sets vm.overcommit_memory, kernel.panic, ... itself; down restores them.
protectKernelDefaults: false
localStorageCapacityIsolation: false
# No listening ports at all (10250, 10255, 10248).
enableServer: false
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
resolvConf: ""
hairpinMode: none
makeIPTablesUtilChains: false
registerNode: false
volumePluginDir: $ROOT/volume-plugins
# No eviction and no image GC: the lab's disk and memory are the machine's.
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  imagefs.available: "0%"
  nodefs.inodesFree: "0%"
mergeDefaultEvictionSettings: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
	mv "$CONFIG.tmp" "$CONFIG"
}

cmd_prepare() {
	[[ -x $KUBELET ]] || die "no kubelet in $LAB_TOOLS/bin: run kubelet.sh install"
	[[ -S $SOCK ]] || die "no containerd socket $SOCK: run lab.sh up (LAB_DIR=$LAB_DIR)"
	! kubelet_alive || die "kubelet of $KUBELET_DIR already runs: $(<"$PIDFILE")"
	if [[ -e $KUBELET_DIR && ! -e $MARKER ]] && [[ -n $(find "$KUBELET_DIR" -mindepth 1 -maxdepth 1 2>/dev/null | head -1) ]]; then
		die "$KUBELET_DIR exists and was not made by kubelet.sh: choose another KUBELET_DIR"
	fi
	mkdir -p "$KUBELET_DIR"
	touch "$MARKER"
	mkdir -p "$MANIFESTS" "$ROOT" "$PODLOGS"
	(
		flock 9
		node_register
	) 9>"$(lock_file)"
	make_cgroup_root
	write_config
}

# cmd_exec: kubelet in the foreground, as this very process (its caller can wait for it).
cmd_exec() {
	[[ -f $CONFIG ]] || die "no $CONFIG: run kubelet.sh prepare"
	echo "=== kubelet.sh exec $(date -u +%FT%T.%NZ) pid $$" >&2
	echo $$ >"$PIDFILE"
	exec "$KUBELET" --config "$CONFIG" --root-dir "$ROOT" --cert-dir "$ROOT/pki" \
		--hostname-override "$KUBELET_NODE" --v="$KUBELET_V"
}

# wait_started N: until the log has more than N "Starting kubelet main sync loop" lines.
wait_started() {
	local n=$1 i
	for ((i = 0; i < 1200; i++)); do
		if ! kubelet_alive && ((i > 30)); then
			tail -20 "$KLOG" >&2
			die "kubelet exited (log $KLOG)"
		fi
		(($(grep -c 'Starting kubelet main sync loop' "$KLOG" 2>/dev/null || true) > n)) && return 0
		sleep 0.1
	done
	die "kubelet's sync loop did not start within 120 s (log $KLOG)"
}

cmd_start() {
	local n
	if kubelet_alive; then
		log "kubelet already runs: $(<"$PIDFILE")"
		return
	fi
	n=$(grep -c 'Starting kubelet main sync loop' "$KLOG" 2>/dev/null || true)
	setsid "$0" exec >>"$KLOG" 2>&1 </dev/null &
	disown
	wait_started "${n:-0}"
	log "kubelet runs: pid $(<"$PIDFILE") (log $KLOG)"
}

cmd_up() {
	cmd_install
	cmd_prepare
	cmd_start
}

# stop_kubelet SIGNAL: signal kubelet and wait until it is gone (or a zombie); SIGKILL after 10 s.
stop_kubelet() {
	local sig=$1 pid i
	kubelet_alive || return 0
	pid=$(<"$PIDFILE")
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kubelet_alive || break
		sleep 0.1
	done
	if kubelet_alive; then
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kubelet_alive || break
			sleep 0.1
		done
	fi
	! kubelet_alive || die "kubelet $pid does not go"
	log "kubelet $pid gone after SIG$sig (its pods keep running)"
}

# ------------------------------------------------------------------- down ---

kubelet_mounts() { awk -v d="$ROOT" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo; }

cmd_down() {
	local mp l p n=0
	stop_kubelet TERM
	# kubelet bind-mounts its root dir onto itself (shared propagation); deepest first.
	while read -r mp; do
		umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || log "cannot unmount $mp"
	done < <(kubelet_mounts | sort -r)
	# The container log links of its pods: those pointing into its pod logs dir.
	shopt -s nullglob
	for l in "$LINKS"/*.log; do
		[[ -L $l && $(readlink "$l") == "$PODLOGS"/* ]] || continue
		rm -f "$l" && n=$((n + 1))
	done
	shopt -u nullglob
	((n == 0)) || log "removed $n container log links from $LINKS"
	# The QoS and pod cgroups kubelet made, where empty (those of running pods go at lab.sh down:
	# the same root).
	for p in /sys/fs/cgroup/*"$LAB_CGROUP_ROOT"/kubepods /sys/fs/cgroup"$LAB_CGROUP_ROOT"/kubepods; do
		[[ -d $p ]] && find "$p" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
	if [[ -n $(kubelet_mounts) ]]; then
		log "WARNING: mounts left under $ROOT: $(kubelet_mounts | tr '\n' ' ')"
	elif [[ -e $MARKER ]]; then
		rm -rf "$KUBELET_DIR"
	elif [[ -e $KUBELET_DIR ]]; then
		log "$KUBELET_DIR was not made by kubelet.sh (no $MARKER): left alone"
	fi
	(
		flock 9
		node_release
	) 9>"$(lock_file)"
	[[ -z $(kubelet_mounts) ]] || return 1
	log "down: nothing left of $KUBELET_DIR"
}

cmd_env() {
	cat <<EOF
export KUBELET_BIN=$KUBELET
export KUBELET_DIR=$KUBELET_DIR
export KUBELET_CONFIG=$CONFIG
export KUBELET_MANIFESTS=$MANIFESTS
export KUBELET_ROOT=$ROOT
export KUBELET_POD_LOGS_DIR=$PODLOGS
export KUBELET_CONTAINER_LOGS_DIR=$LINKS
export KUBELET_CGROUP_ROOT=$LAB_CGROUP_ROOT
export KUBELET_PODS_CGROUP=$LAB_CGROUP_ROOT/kubepods
export KUBELET_NODE=$KUBELET_NODE
export KUBELET_LOG=$KLOG
export KUBELET_PIDFILE=$PIDFILE
EOF
}

cmd_status() {
	if kubelet_alive; then echo "kubelet: pid $(<"$PIDFILE")"; else echo "kubelet: not running"; fi
	echo "manifests: $(find "$MANIFESTS" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null)"
	echo "pod dirs: $(find "$ROOT/pods" -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null)"
	echo "node state users: $(cat "$NODE_STATE"/users/* 2>/dev/null | tr '\n' ' ')"
	[[ -S $SOCK ]] && $CRI pods -a 2>/dev/null
	return 0
}

main() {
	local cmd=${1:-help}
	shift || true
	case $cmd in
	install) cmd_install ;;
	prepare) cmd_prepare ;;
	exec) cmd_exec ;;
	up) cmd_up ;;
	start) cmd_start ;;
	stop) stop_kubelet TERM ;;
	kill) stop_kubelet KILL ;;
	down) cmd_down ;;
	env) cmd_env ;;
	status) cmd_status ;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d' >&2
		exit 2
		;;
	esac
}

main "$@"
