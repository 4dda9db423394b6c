#!/usr/bin/env bash
# nri-housekeeper e2e lab: a real containerd v2 (CRI + NRI enabled) with runc,
# registry-free images and a tiny CRI client. Needs root; no systemd, CNI or registry.
#
#   lab.sh install        install/build everything (idempotent; Go module proxy + apt only)
#   lab.sh up             start containerd in $LAB_DIR, wait until CRI is ready, import images.
#                         On an existing LAB_DIR (e.g. after kill -9 of containerd) it starts
#                         containerd again on the same state.
#   lab.sh restart        (re)start containerd on an existing LAB_DIR without wiping state
#                         (SIGTERM first if it runs) and wait until CRI is ready
#   lab.sh down           stop what `up` started (pods, containerd, shims, launched NRI plugins),
#                         unmount, remove cgroups and $LAB_DIR
#   lab.sh env            print the socket paths etc. as shell exports (eval "$(lab.sh env)")
#   lab.sh status         show what is running
#   lab.sh mem            memory of containerd, shims and container processes
#   lab.sh demo           pod lifecycle through CRI (runp, create, start, stop, remove) with states
#   lab.sh cri ARGS...    run the bundled CRI client (pods, ps, runp, up, rmall, ...) against the lab
#   lab.sh ctr ARGS...    run ctr against the lab (namespace k8s.io)
#   lab.sh selftest       install + up + demo + kill -9/restart + checks + down
#
# Environment (all optional):
#   LAB_DIR=/tmp/nrihk-lab       runtime dir: root/, state/, sockets, logs (removed by down).
#                                Labs with different LAB_DIRs can run side by side.
#   LAB_TOOLS=/tmp/nrihk-tools   install dir: bin/ (containerd, shim, ctr, lab tools), images/
#   CONTAINERD_VERSION=v2.4.2    containerd module version for `go install`
#   LAB_RUNC=                    OCI runtime binary (default: Debian's /usr/sbin/runc, from apt)
#   LAB_RUNC_VERSION=            e.g. v1.5.2: `go install` that runc (seccomp on) into $LAB_TOOLS/bin
#   LAB_NRI_PLUGIN_PATH=$LAB_DIR/nri/plugins         pre-registered NRI plugins (NN-name executables)
#   LAB_NRI_PLUGIN_CONFIG_PATH=$LAB_DIR/nri/conf.d   their configs (NN-name.conf or name.conf)
#   LAB_CGROUP_ROOT=/kubepods    cgroup root the CRI client puts pods under (cgroupfs driver).
#                                Side-by-side labs should use different roots (down removes
#                                every empty cgroup under it).
#   LAB_LOG_LEVEL=info           containerd log level
#   LAB_READY_TIMEOUT=120        seconds up/restart wait for CRI RuntimeReady
set -euo pipefail

LAB_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$LAB_SRC/../../.." && pwd)
LAB_DIR=${LAB_DIR:-/tmp/nrihk-lab}
LAB_DIR=${LAB_DIR%/}
LAB_TOOLS=${LAB_TOOLS:-/tmp/nrihk-tools}
LAB_BIN=$LAB_TOOLS/bin
LAB_IMAGES=$LAB_TOOLS/images
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
LAB_RUNC_VERSION=${LAB_RUNC_VERSION:-}
if [[ -n $LAB_RUNC_VERSION ]]; then
	LAB_RUNC=${LAB_RUNC:-$LAB_BIN/runc}
else
	LAB_RUNC=${LAB_RUNC:-/usr/sbin/runc}
fi
LAB_NRI_PLUGIN_PATH=${LAB_NRI_PLUGIN_PATH:-$LAB_DIR/nri/plugins}
LAB_NRI_PLUGIN_CONFIG_PATH=${LAB_NRI_PLUGIN_CONFIG_PATH:-$LAB_DIR/nri/conf.d}
LAB_CGROUP_ROOT=${LAB_CGROUP_ROOT:-/kubepods}
LAB_LOG_LEVEL=${LAB_LOG_LEVEL:-info}
LAB_READY_TIMEOUT=${LAB_READY_TIMEOUT:-120}
# Without CAP_SYS_RESOURCE nobody may lower oom_score_adj below 0 (sandboxes want -998).
if grep -q '^CapEff:' /proc/self/status &&
	(($(printf '%d' "0x$(awk '/^CapEff:/{print $2}' /proc/self/status)") & (1 << 24))); then
	LAB_RESTRICT_OOM=${LAB_RESTRICT_OOM:-false}
else
	LAB_RESTRICT_OOM=${LAB_RESTRICT_OOM:-true}
fi

SOCK=$LAB_DIR/containerd.sock
NRI_SOCK=$LAB_DIR/nri.sock
SHIM_SOCK_DIR=$LAB_DIR/s
CONFIG=$LAB_DIR/containerd.toml
PIDFILE=$LAB_DIR/containerd.pid
READY_FILE=$LAB_DIR/ready-at           # unix microseconds of the last "CRI ready"
PLUGIN_PIDS=$LAB_DIR/nri-plugins.pids # "pid starttime" of plugins containerd launched
TASK_DIR=$LAB_DIR/state/io.containerd.runtime.v2.task
LOG_ROOT=$LAB_DIR/log/pods
PAUSE_IMAGE=localhost/pause:lab
SLEEPER_IMAGE=localhost/sleeper:lab

export PATH=$LAB_BIN:$PATH
export LAB_CRI_SOCK=$SOCK LAB_LOG_ROOT=$LOG_ROOT LAB_CGROUP_ROOT

log() { printf '[lab] %s\n' "$*" >&2; }
die() {
	printf '[lab] ERROR: %s\n' "$*" >&2
	exit 1
}

[[ $LAB_DIR == /?* ]] || die "LAB_DIR must be an absolute path, not '$LAB_DIR'"

# ---------------------------------------------------------------- install ---

apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null || die "need ${missing[*]} but apt-get is not available"
	# A fresh (CI) machine has no package lists yet.
	if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		log "apt-get update"
		apt-get update >/dev/null
	fi
	log "apt-get install ${missing[*]}"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; then
		log "apt-get install failed, retrying after apt-get update"
		apt-get update >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

install_runc() {
	if [[ -n $LAB_RUNC_VERSION ]]; then
		# runc >= 1.4 has no replace directives in go.mod, so `go install` works.
		if [[ -x $LAB_BIN/runc && $("$LAB_BIN/runc" --version | head -1) == "runc version ${LAB_RUNC_VERSION#v}" ]]; then
			log "runc ${LAB_RUNC_VERSION#v} already in $LAB_BIN"
			return
		fi
		log "go install runc@$LAB_RUNC_VERSION (with seccomp: needs libseccomp-dev)"
		apt_install libseccomp-dev pkg-config gcc
		(cd /tmp && GOBIN=$LAB_BIN GOFLAGS=-mod=mod go install -trimpath -tags seccomp \
			-ldflags "-X main.version=${LAB_RUNC_VERSION#v}" "github.com/opencontainers/runc@$LAB_RUNC_VERSION")
		log "runc: $("$LAB_BIN/runc" --version | head -1)"
		return
	fi
	if [[ -x $LAB_RUNC ]]; then
		log "runc: $("$LAB_RUNC" --version | head -1) ($LAB_RUNC)"
		return
	fi
	[[ $LAB_RUNC == /usr/sbin/runc ]] || die "LAB_RUNC=$LAB_RUNC is not executable"
	log "installing Debian's runc"
	apt_install runc
	log "runc: $("$LAB_RUNC" --version | head -1)"
}

install_containerd() {
	local want=${CONTAINERD_VERSION#v} have=""
	if [[ -x $LAB_BIN/containerd && -x $LAB_BIN/containerd-shim-runc-v2 && -x $LAB_BIN/ctr ]]; then
		have=$("$LAB_BIN/containerd" --version | awk '{print $3}')
	fi
	if [[ $have == "$want" || $have == "$want+unknown" ]]; then
		log "containerd $have already in $LAB_BIN"
		return
	fi
	log "go install containerd, containerd-shim-runc-v2, ctr @$CONTAINERD_VERSION (takes a few minutes)"
	# Outside the repo (cd /tmp), so the project's go.mod is not involved. The
	# shim is built static like upstream's release build.
	(cd /tmp && GOBIN=$LAB_BIN CGO_ENABLED=0 go install \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION")
	(cd /tmp && GOBIN=$LAB_BIN go install \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION")
	log "containerd: $("$LAB_BIN/containerd" --version)"
}

# The lab tools are packages of the main module, built from the repo root.
install_tools() {
	local pkg=./${LAB_SRC#"$REPO_ROOT"/}/cmd stamp=$LAB_TOOLS/.tools-stamp
	# Fast path: nothing in the lab package, its tools or go.mod/go.sum changed
	# since the last build.
	if [[ -f $stamp && -x $LAB_BIN/cri && -x $LAB_BIN/sleeper && -f $LAB_IMAGES/pause.tar && -f $LAB_IMAGES/sleeper.tar ]] &&
		[[ $(<"$stamp") == "$REPO_ROOT" ]] &&
		[[ -z $(find "$LAB_SRC" "$REPO_ROOT/go.mod" "$REPO_ROOT/go.sum" -name '*.go' -newer "$stamp" -o \
			-name 'go.*' -newer "$stamp" 2>/dev/null | head -1) ]]; then
		log "lab tools up to date in $LAB_BIN"
		return
	fi
	log "building lab tools (cri, sleeper, mkimage) from $REPO_ROOT"
	(cd "$REPO_ROOT" && go build -o "$LAB_BIN/" "$pkg/cri" "$pkg/mkimage" &&
		CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$LAB_BIN/sleeper" "$pkg/sleeper")
	"$LAB_BIN/mkimage" -o "$LAB_IMAGES/pause.tar" -name "$PAUSE_IMAGE" \
		-add "$LAB_BIN/sleeper:/pause" -- /pause -name pause >/dev/null
	"$LAB_BIN/mkimage" -o "$LAB_IMAGES/sleeper.tar" -name "$SLEEPER_IMAGE" \
		-add "$LAB_BIN/sleeper:/sleeper" -- /sleeper >/dev/null
	echo "$REPO_ROOT" >"$stamp"
	log "images: $LAB_IMAGES/{pause,sleeper}.tar ($PAUSE_IMAGE, $SLEEPER_IMAGE)"
}

install_locked() {
	flock 9
	install_runc
	install_containerd
	install_tools
}

cmd_install() {
	command -v go >/dev/null || die "go is not installed"
	mkdir -p "$LAB_BIN" "$LAB_IMAGES"
	# Several test packages may install concurrently into the same LAB_TOOLS.
	install_locked 9>"$LAB_TOOLS/.install.lock"
	log "install done: $LAB_BIN"
}

# --------------------------------------------------------------------- up ---

# pid_matches PID PATTERN: /proc/PID/cmdline (NUL -> space) contains PATTERN.
pid_matches() {
	[[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"
}

# alive PIDFILE PATTERN: the pid in PIDFILE runs (not a zombie: nobody may reap
# a kill -9'd containerd) and its cmdline contains PATTERN (guards against pid reuse).
alive() {
	local pid stat
	[[ -f $1 ]] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]] || return 1
	pid_matches "$pid" "$2"
}
containerd_alive() { alive "$PIDFILE" "--config $CONFIG "; }

write_config() {
	cat >"$CONFIG" <<EOF
# Generated by lab.sh. Config version 3 is understood by every containerd 2.x
# (2.4 migrates it to version 4 on load).
version = 3
root = "$LAB_DIR/root"
state = "$LAB_DIR/state"
temp = "$LAB_DIR/tmp"
imports = []
oom_score = 0

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  level = "$LAB_LOG_LEVEL"

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$PAUSE_IMAGE"

  [plugins."io.containerd.cri.v1.runtime"]
    enable_selinux = false
    disable_apparmor = true
    # Without CAP_SYS_RESOURCE the sandbox's oom_score_adj=-998 is refused by
    # the kernel ("can't get final child's PID from pipe: EOF" from runc).
    # Clamp OOM scores to containerd's own then.
    restrict_oom_score_adj = $LAB_RESTRICT_OOM
    cdi_spec_dirs = []
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        sandboxer = "podsandbox"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$LAB_RUNC"
          Root = "$LAB_DIR/state/runc"
          SystemdCgroup = false
    # No CNI plugins: only hostNetwork pods are used, which never call CNI.
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$LAB_DIR/cni/bin"]
      conf_dir = "$LAB_DIR/cni/net.d"

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = "$NRI_SOCK"
    plugin_path = "$LAB_NRI_PLUGIN_PATH"
    plugin_config_path = "$LAB_NRI_PLUGIN_CONFIG_PATH"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
    disable_connections = false

  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = "$SHIM_SOCK_DIR"

  [plugins."io.containerd.internal.v1.opt"]
    path = "$LAB_DIR/opt"

  [plugins."io.containerd.image-verifier.v1.bindir"]
    bin_dir = "$LAB_DIR/opt/image-verifier/bin"
EOF
}

wait_ready() {
	local i
	for ((i = 0; i < LAB_READY_TIMEOUT * 20; i++)); do
		if ! containerd_alive; then
			# Right after the fork the child may not have exec'd containerd yet
			# (its cmdline is still this script's, seen on a loaded machine):
			# while the process lives, give it two seconds before judging.
			if ((i < 40)) && alive "$PIDFILE" ""; then
				sleep 0.05
				continue
			fi
			tail -20 "$LAB_DIR/containerd.log" >&2
			die "containerd exited (log: $LAB_DIR/containerd.log)"
		fi
		if [[ -S $SOCK ]] && cri -timeout 2s status 2>/dev/null | grep -q '^RuntimeReady=true'; then
			echo "${EPOCHREALTIME/./}" >"$READY_FILE"
			return 0
		fi
		sleep 0.05
	done
	die "containerd did not become ready in ${LAB_READY_TIMEOUT}s (see $LAB_DIR/containerd.log)"
}

# proc_start PID: start time of PID (field 22 of /proc/PID/stat), for pid-reuse checks.
proc_start() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	read -ra stat <<<"$stat"
	echo "${stat[19]}"
}

# record_plugins: remember the NRI plugins containerd launched (its children
# other than shims), so that down can kill them even when their binaries live
# outside LAB_DIR and containerd was killed with -9.
record_plugins() {
	local cpid f stat comm rest pid ppid
	cpid=$(<"$PIDFILE")
	for f in /proc/[0-9]*/stat; do
		stat=$(cat "$f" 2>/dev/null) || continue
		rest=${stat##*) }
		read -r _ ppid _ <<<"$rest"
		[[ $ppid == "$cpid" ]] || continue
		comm=${stat#*(}
		comm=${comm%)*}
		[[ $comm == containerd-shim* ]] && continue
		pid=${f#/proc/}
		pid=${pid%/stat}
		echo "$pid $(proc_start "$pid")" >>"$PLUGIN_PIDS"
		log "NRI plugin running: pid $pid ($comm)"
	done
}

import_images() {
	local name tar out
	for name in pause sleeper; do
		tar=$LAB_IMAGES/$name.tar
		[[ -f $tar ]] || die "$tar missing, run: $0 install"
		# ctr prints a cgroup v1 deprecation warning on every call: keep stderr for failures only.
		out=$(ctr --address "$SOCK" -n k8s.io images import --local "$tar" 2>&1) || die "import $tar: $out"
	done
	out=$(ctr --address "$SOCK" -n k8s.io images ls -q 2>/dev/null)
	if ! grep -qx "$PAUSE_IMAGE" <<<"$out" || ! grep -qx "$SLEEPER_IMAGE" <<<"$out"; then
		die "images not imported: $out"
	fi
}

start_containerd() {
	log "starting containerd ($CONTAINERD_VERSION, runc $LAB_RUNC) in $LAB_DIR"
	# setsid: own session, so the caller's Ctrl-C or exit does not reach it.
	setsid "$LAB_BIN/containerd" --config "$CONFIG" >>"$LAB_DIR/containerd.log" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	disown # no "Killed" job message when a test kill -9s it
	wait_ready
	record_plugins
}

cmd_up() {
	[[ -x $LAB_BIN/containerd && -x $LAB_BIN/cri && -f $LAB_IMAGES/pause.tar ]] || die "run: $0 install"
	if containerd_alive; then
		log "containerd already running (pid $(<"$PIDFILE"))"
		return 0
	fi
	((${#SHIM_SOCK_DIR} <= 42)) || die "LAB_DIR too long: shim socket dir $SHIM_SOCK_DIR must be <= 42 chars"
	[[ -d $TASK_DIR ]] && log "reusing the state in $LAB_DIR (containerd is not running)"
	mkdir -p "$LAB_DIR"/{root,state,tmp,cni/bin,cni/net.d,nri/plugins,nri/conf.d,opt,log/pods} "$SHIM_SOCK_DIR"
	write_config
	start_containerd
	import_images
	log "ready: pid $(<"$PIDFILE"), CRI $SOCK, NRI $NRI_SOCK"
}

cmd_restart() {
	[[ -f $CONFIG ]] || die "no lab in $LAB_DIR: $0 up"
	if containerd_alive; then
		log "stopping containerd $(<"$PIDFILE")"
		stop_pid "$(<"$PIDFILE")" 15
	fi
	start_containerd
	log "ready: pid $(<"$PIDFILE"), CRI $SOCK, NRI $NRI_SOCK"
}

# ------------------------------------------------------------------- down ---

stop_pid() { # stop_pid PID [seconds]
	local pid=$1 t=${2:-10} i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < t * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		is_zombie "$pid" && return 0
		sleep 0.1
	done
	log "pid $pid did not exit after SIGTERM, sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		is_zombie "$pid" && return 0
		sleep 0.1
	done
}

is_zombie() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} == Z ]]
}

# lab_shims: pids of containerd-shim-runc-v2 processes serving this lab's
# containerd (their cmdline names our socket; containerd 2.4 writes no shim.pid).
lab_shims() {
	local f pid i args
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		mapfile -d '' args 2>/dev/null <"$f" || continue
		[[ ${#args[@]} -gt 2 && ${args[0]##*/} == containerd-shim-runc-v2 ]] || continue
		for ((i = 1; i < ${#args[@]} - 1; i++)); do
			[[ ${args[i]} == -address && ${args[i + 1]} == "$SOCK" ]] && echo "$pid"
		done
	done
	return 0
}

# lab_plugins: recorded launched NRI plugins that still run (same start time).
lab_plugins() {
	local pid start
	[[ -f $PLUGIN_PIDS ]] || return 0
	while read -r pid start; do
		[[ -n $start && $(proc_start "$pid" 2>/dev/null) == "$start" ]] && ! is_zombie "$pid" && echo "$pid"
	done <"$PLUGIN_PIDS"
	return 0
}

# Kill shims, container processes and launched plugins that survived containerd
# (e.g. after a kill -9 of containerd). Only processes proven to belong to this
# lab are touched: container inits recorded in our bundle dirs whose cgroup
# names the container id, shims whose cmdline names our socket and plugin pids
# recorded by up/restart.
kill_leftovers() {
	local f pid id
	shopt -s nullglob
	for f in "$TASK_DIR"/*/*/init.pid; do
		id=${f%/init.pid}
		id=${id##*/}
		pid=$(cat "$f" 2>/dev/null || true)
		if [[ -z $pid ]] || ! grep -qF -- "$id" "/proc/$pid/cgroup" 2>/dev/null; then
			continue
		fi
		log "killing leftover container process $pid (${id:0:12})"
		kill -KILL "$pid" 2>/dev/null || true
	done
	shopt -u nullglob
	for pid in $(lab_shims); do
		log "stopping leftover shim $pid"
		stop_pid "$pid" 5
	done
	for pid in $(lab_plugins); do
		log "killing leftover NRI plugin $pid"
		kill -KILL "$pid" 2>/dev/null || true
	done
}

unmount_all() {
	local mp n=0
	# Deepest first; mountinfo field 5 is the mount point (octal escapes for spaces).
	while read -r mp; do
		umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || log "cannot unmount $mp"
		n=$((n + 1))
	done < <(awk -v d="$LAB_DIR" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
	((n == 0)) || log "unmounted $n mounts under $LAB_DIR"
}

lab_mounts() { awk -v d="$LAB_DIR" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo; }

remove_cgroups() {
	local base d sub n=0
	for base in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		d=${base%/}$LAB_CGROUP_ROOT
		[[ -d $d ]] || continue
		# rmdir only succeeds for cgroups without tasks and children: safe,
		# also for another lab that shares the cgroup root.
		while read -r sub; do
			if rmdir "$sub" 2>/dev/null; then n=$((n + 1)); fi
		done < <(find "$d" -depth -type d 2>/dev/null)
	done
	((n == 0)) || log "removed $n cgroup dirs under $LAB_CGROUP_ROOT (all hierarchies)"
}

# lab_ids: ids of this lab's tasks (sandboxes and containers).
lab_ids() {
	local d
	shopt -s nullglob
	for d in "$TASK_DIR"/*/*/; do
		d=${d%/}
		echo "${d##*/}"
	done
	shopt -u nullglob
}

# lab_procs IDS...: pids whose cmdline mentions $LAB_DIR/ (containerd, shims,
# plugins from a plugin dir inside it), recorded plugins, and processes in a
# cgroup named after one of IDS (pause and container processes).
lab_procs() {
	local f pid args d
	local -A ids=()
	for d in "$@"; do ids[$d]=1; done
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		[[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
		mapfile -d '' args 2>/dev/null <"$f" || continue
		[[ "${args[*]}" == *"$LAB_DIR/"* ]] && ! is_zombie "$pid" && echo "$pid"
	done
	lab_plugins
	if (($#)); then
		while read -r d; do
			[[ -n ${ids[${d##*/}]:-} ]] && cat "$d/cgroup.procs" 2>/dev/null
		done < <(find /sys/fs/cgroup/memory"$LAB_CGROUP_ROOT" -type d 2>/dev/null)
	fi
	return 0
}

cmd_down() {
	local left ids
	if containerd_alive; then
		log "removing all pods through CRI"
		cri -timeout 300s rmall >&2 || log "rmall failed, continuing"
		log "stopping containerd $(<"$PIDFILE")"
		stop_pid "$(<"$PIDFILE")" 15
	fi
	mapfile -t ids < <(lab_ids)
	if [[ -d $LAB_DIR ]]; then
		kill_leftovers
		unmount_all
	fi
	# Wait a moment for killed processes to leave their cgroups.
	for _ in {1..50}; do
		[[ -z $(lab_procs "${ids[@]}") ]] && break
		sleep 0.1
	done
	left=$(lab_procs "${ids[@]}" | sort -u | tr '\n' ' ')
	remove_cgroups
	[[ -n $left ]] || rm -rf "$LAB_DIR"
	[[ -z $left ]] || log "WARNING: processes left: $left"
	[[ -z $(lab_mounts) ]] || log "WARNING: mounts left under $LAB_DIR: $(lab_mounts | tr '\n' ' ')"
	[[ -z $left && -z $(lab_mounts) ]] || return 1
	log "down: nothing left of $LAB_DIR"
}

# --------------------------------------------------------------- the rest ---

cmd_env() {
	cat <<EOF
export LAB_DIR=$LAB_DIR
export LAB_TOOLS=$LAB_TOOLS
export LAB_BIN=$LAB_BIN
export CONTAINERD_ADDRESS=$SOCK
export CONTAINERD_NAMESPACE=k8s.io
export CONTAINER_RUNTIME_ENDPOINT=unix://$SOCK
export LAB_CRI_SOCK=$SOCK
export NRI_SOCKET=$NRI_SOCK
export LAB_NRI_SOCK=$NRI_SOCK
export LAB_NRI_PLUGIN_PATH=$LAB_NRI_PLUGIN_PATH
export LAB_NRI_PLUGIN_CONFIG_PATH=$LAB_NRI_PLUGIN_CONFIG_PATH
export LAB_LOG_ROOT=$LOG_ROOT
export LAB_CGROUP_ROOT=$LAB_CGROUP_ROOT
export LAB_CONTAINERD_LOG=$LAB_DIR/containerd.log
export LAB_PAUSE_IMAGE=$PAUSE_IMAGE
export LAB_SLEEPER_IMAGE=$SLEEPER_IMAGE
EOF
}

cmd_status() {
	if containerd_alive; then
		echo "containerd: running pid $(<"$PIDFILE") ($SOCK)"
		cri version
		cri status
		cri pods
		cri ps
	else
		echo "containerd: not running"
	fi
	local p
	p=$(lab_plugins | tr '\n' ' ')
	[[ -z $p ]] || echo "launched NRI plugins: $p"
}

# mem_of PID...: prints "N RSS_MiB PSS_MiB" summed over the pids.
mem_of() {
	local pid rss=0 pss=0 n=0 r p
	for pid in "$@"; do
		read -r r p < <(awk '/^Rss:/{r=$2} /^Pss:/{p=$2} END{print r+0, p+0}' "/proc/$pid/smaps_rollup" 2>/dev/null) || continue
		((r > 0)) || continue
		rss=$((rss + r)) pss=$((pss + p)) n=$((n + 1))
	done
	echo "$n $((rss / 1024)) $((pss / 1024))"
}

cmd_mem() {
	containerd_alive || die "containerd is not running"
	local cpid shims ctrs
	cpid=$(<"$PIDFILE")
	shims=$(lab_shims | tr '\n' ' ')
	ctrs=$(for f in "$TASK_DIR"/*/*/init.pid; do cat "$f" 2>/dev/null; done | tr '\n' ' ')
	printf '%-28s %5s %9s %9s\n' WHAT N RSS_MiB PSS_MiB
	# shellcheck disable=SC2046,SC2086,SC2183 # word splitting is intended
	printf '%-28s %5s %9s %9s\n' containerd $(mem_of "$cpid") \
		containerd-shim-runc-v2 $(mem_of $shims) \
		"container inits (pause+ctr)" $(mem_of $ctrs)
}

cmd_demo() {
	containerd_alive || die "containerd is not running: $0 up"
	cri lifecycle -name demo -ns lab -uid "${1:-$(cat /proc/sys/kernel/random/uuid)}"
}

cmd_selftest() {
	local uid pod ctr n old
	cmd_install
	cmd_down
	cmd_up
	uid=$(cat /proc/sys/kernel/random/uuid)
	cmd_demo "$uid"
	log "checking log directory"
	[[ -s $LOG_ROOT/lab_demo_$uid/sleeper/0.log ]] || die "no container log in $LOG_ROOT/lab_demo_$uid"
	log "checking cgroups of a running pod"
	read -r pod ctr < <(cri up -name cgcheck -ns lab)
	n=$(find /sys/fs/cgroup/memory"$LAB_CGROUP_ROOT"/besteffort -maxdepth 2 -name "$ctr" | wc -l)
	((n == 1)) || die "container cgroup $ctr not found under memory$LAB_CGROUP_ROOT/besteffort"
	log "kill -9 containerd, then up again on the same state"
	old=$(<"$PIDFILE")
	kill -KILL "$old"
	while containerd_alive; do sleep 0.05; done
	[[ -n $(lab_shims) ]] || die "shims did not survive kill -9 of containerd"
	cmd_up
	[[ $(<"$PIDFILE") != "$old" ]] || die "containerd was not restarted"
	cri pods | grep -q "^${pod:0:13}.*SANDBOX_READY" || die "pod $pod not ready after restart"
	cri ps | grep -q "^${ctr:0:13}.*CONTAINER_RUNNING" || die "container $ctr not running after restart"
	log "restart"
	cmd_restart
	cri ps | grep -q "^${ctr:0:13}.*CONTAINER_RUNNING" || die "container $ctr not running after restart"
	log "kill -9 containerd, then down"
	kill -KILL "$(<"$PIDFILE")"
	while containerd_alive; do sleep 0.05; done
	cmd_down
	[[ -z $(lab_procs) ]] || die "processes survived down: $(lab_procs | tr '\n' ' ')"
	[[ -z $(lab_mounts) ]] || die "mounts under $LAB_DIR survived down"
	[[ ! -e $LAB_DIR ]] || die "$LAB_DIR survived down"
	log "selftest passed"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d'; }

main() {
	local cmd=${1:-help}
	shift || true
	case $cmd in
	install) cmd_install ;;
	up) cmd_up ;;
	restart) cmd_restart ;;
	down) cmd_down ;;
	env) cmd_env ;;
	status) cmd_status ;;
	mem) cmd_mem ;;
	demo) cmd_demo "$@" ;;
	cri) exec cri "$@" ;;
	ctr) exec ctr --address "$SOCK" -n k8s.io "$@" ;;
	selftest) cmd_selftest ;;
	help | -h | --help) usage ;;
	*)
		usage >&2
		exit 2
		;;
	esac
}

main "$@"
