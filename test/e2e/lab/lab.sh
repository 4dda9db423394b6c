#!/usr/bin/env bash
# nri-housekeeper e2e lab: a real containerd v2 (CRI + NRI enabled) with runc, CNI
# (bridge + host-local + portmap), registry-free images and a tiny CRI client.
# Needs root; no systemd or registry.
#
#   lab.sh install        install/build everything (idempotent; Go module proxy + apt only)
#   lab.sh up             start containerd in $LAB_DIR, wait until CRI is ready, import images.
#                         On an existing LAB_DIR (e.g. after kill -9 of containerd) it starts
#                         containerd again on the same state.
#   lab.sh restart        (re)start containerd on an existing LAB_DIR without wiping state
#                         (SIGTERM first if it runs) and wait until CRI is ready
#   lab.sh reboot [-keep-netns]
#                         a node reboot: kill -9 containerd, shims, pods and launched NRI
#                         plugins, unmount and delete containerd's root and state, remove the
#                         lab's netns mounts, veths, bridge and portmap chains (all kept with
#                         -keep-netns), then up on the empty state. Kept: the CNI cache
#                         (/var/lib/cni), host-local's reservations, the conflist, logs, NRI dirs.
#   lab.sh cni-conf       rewrite the lab's CNI conflist with LAB_CNI_RANGE_START/END from the
#                         environment (empty: the whole subnet); containerd reloads it at once
#   lab.sh down           stop what `up` started (pods, containerd, shims, launched NRI plugins),
#                         unmount, remove cgroups, the lab's CNI leftovers (bridge, veths,
#                         /var/lib/cni/results entries, portmap chains) and $LAB_DIR
#   lab.sh env            print the socket paths etc. as shell exports (eval "$(lab.sh env)")
#   lab.sh status         show what is running
#   lab.sh mem            memory of containerd, shims and container processes
#   lab.sh demo           pod lifecycle through CRI (runp, create, start, stop, remove) with states
#   lab.sh cri ARGS...    run the bundled CRI client (pods, ps, runp, up, rmall, ...) against the lab
#   lab.sh ctr ARGS...    run ctr against the lab (namespace k8s.io)
#   lab.sh selftest       install + up + demo + pod network + kill -9/restart + checks + down
#
# Environment (all optional):
#   LAB_DIR=/tmp/nrihk-lab       runtime dir: root/, state/, sockets, logs (removed by down).
#                                Labs with different LAB_DIRs can run side by side.
#   LAB_TOOLS=/tmp/nrihk-tools   install dir: bin/ (containerd, shim, ctr, lab tools), cni/bin/
#                                (CNI plugins), images/
#   CONTAINERD_VERSION=v2.4.2    containerd module version for `go install`
#   CNI_PLUGINS_VERSION=v1.9.1   github.com/containernetworking/plugins version for `go install`
#   LAB_RUNC=                    OCI runtime binary (default: Debian's /usr/sbin/runc, from apt)
#   LAB_RUNC_VERSION=            e.g. v1.5.2: `go install` that runc (seccomp on) into $LAB_TOOLS/bin
#   LAB_NRI_PLUGIN_PATH=$LAB_DIR/nri/plugins         pre-registered NRI plugins (NN-name executables)
#   LAB_NRI_PLUGIN_CONFIG_PATH=$LAB_DIR/nri/conf.d   their configs (NN-name.conf or name.conf)
#   LAB_CGROUP_ROOT=/kubepods    cgroup root the CRI client puts pods under (cgroupfs driver).
#                                Side-by-side labs should use different roots (down removes
#                                every empty cgroup under it).
#   LAB_LOG_LEVEL=info           containerd log level
#   LAB_DEBUG_ADDRESS=           containerd's debug socket ([debug] address: pprof under
#                                /debug/pprof/, e.g. curl --unix-socket); empty: none
#   LAB_STATS_COLLECT_PERIOD=    CRI's CPU stats collector period (stats_collect_period of
#                                io.containerd.cri.v1.runtime, e.g. 10s); empty: containerd's
#                                default, 1s. For benchmarks that ask what the collector costs.
#   LAB_CONFIG_EXTRA=            TOML appended to containerd's config as is (new tables only,
#                                e.g. [plugins."io.containerd.gc.v1.scheduler"]); empty: none
#   LAB_READY_TIMEOUT=120        seconds up/restart wait for CRI RuntimeReady
#   The lab's CNI network (read at the first up of a LAB_DIR and kept in $LAB_DIR/cni/settings,
#   which wins over the environment until down; defaults derive from a hash of LAB_DIR, so
#   side-by-side labs get different ones):
#   LAB_CNI_NAME=nrihk-<hash>    CNI network name (cache files /var/lib/cni/results/<name>-*)
#   LAB_CNI_BRIDGE=nrihk<hash>   bridge device (at most 15 characters)
#   LAB_CNI_SUBNET=10.<200-249>.<0-255>.0/24   pod subnet; the bridge (gateway) gets .1
#   LAB_CNI_RANGE_START=, LAB_CNI_RANGE_END=   host-local's range, inclusive (empty: the subnet);
#                                a few addresses let tests exhaust it. Also for `cni-conf`.
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
LAB_DEBUG_ADDRESS=${LAB_DEBUG_ADDRESS:-}
LAB_STATS_COLLECT_PERIOD=${LAB_STATS_COLLECT_PERIOD:-}
LAB_CONFIG_EXTRA=${LAB_CONFIG_EXTRA:-}
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

# CNI. containerd (libcni) keeps its result cache in /var/lib/cni/results/<network>-<id>-<ifname>,
# which cannot be moved: that is the only place outside LAB_DIR (and the bridge, veths and
# portmap's iptables chains) where the lab leaves network state; down removes this lab's.
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CNI_PLUGINS=(main/bridge ipam/host-local main/loopback meta/portmap)
CNI_BIN=$LAB_TOOLS/cni/bin
CNI_CONF_DIR=$LAB_DIR/cni/net.d
CNI_DATA_DIR=$LAB_DIR/cni/networks # host-local's dataDir: <dir>/<network>/<ip> = "<id>\r\n<ifname>"
CNI_SETTINGS=$LAB_DIR/cni/settings
CNI_CACHE_DIR=/var/lib/cni
CRI_STATE_DIR=$LAB_DIR/state/io.containerd.grpc.v1.cri
NETNS_DIR=$CRI_STATE_DIR/netns # netns_mounts_under_state_dir = true

# The network's identity: recorded at the first up of LAB_DIR, so that later commands
# (down in particular) find this lab's bridge and cache entries whatever the environment.
cni_hash=$(printf '%s' "$LAB_DIR" | sha256sum | cut -c1-8)
LAB_CNI_NAME=${LAB_CNI_NAME:-nrihk-$cni_hash}
LAB_CNI_BRIDGE=${LAB_CNI_BRIDGE:-nrihk$cni_hash}
LAB_CNI_SUBNET=${LAB_CNI_SUBNET:-10.$((200 + 0x${cni_hash:0:2} % 50)).$((0x${cni_hash:2:2})).0/24}
LAB_CNI_RANGE_START=${LAB_CNI_RANGE_START:-}
LAB_CNI_RANGE_END=${LAB_CNI_RANGE_END:-}
CNI_CUR_START=$LAB_CNI_RANGE_START CNI_CUR_END=$LAB_CNI_RANGE_END
CNI_IP_FORWARD= # net.ipv4.ip_forward before the lab's first up (the bridge plugin sets it to 1)
CNI_IGNORED=    # knobs that differ from the recorded network
if [[ -f $CNI_SETTINGS ]]; then
	while IFS='=' read -r k v; do
		case $k in
		NAME) [[ $v == "$LAB_CNI_NAME" ]] || CNI_IGNORED+=" LAB_CNI_NAME=$LAB_CNI_NAME" && LAB_CNI_NAME=$v ;;
		BRIDGE) [[ $v == "$LAB_CNI_BRIDGE" ]] || CNI_IGNORED+=" LAB_CNI_BRIDGE=$LAB_CNI_BRIDGE" && LAB_CNI_BRIDGE=$v ;;
		SUBNET) [[ $v == "$LAB_CNI_SUBNET" ]] || CNI_IGNORED+=" LAB_CNI_SUBNET=$LAB_CNI_SUBNET" && LAB_CNI_SUBNET=$v ;;
		RANGE_START) CNI_CUR_START=$v ;;
		RANGE_END) CNI_CUR_END=$v ;;
		IP_FORWARD) CNI_IP_FORWARD=$v ;;
		esac
	done <"$CNI_SETTINGS"
	unset k v
fi
CNI_CONF=$CNI_CONF_DIR/10-$LAB_CNI_NAME.conflist

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

# The reference CNI plugins the lab's network uses. containerd runs loopback itself
# for every pod netns when it is in the bin dir. portmap's iptables backend needs the
# iptables binaries (iptables-nft on Debian 12; the legacy backend works too).
install_cni_plugins() {
	local p have ok=true pkgs=()
	apt_install iptables
	iptables -w -t nat -S >/dev/null 2>&1 ||
		die "iptables does not work here ('iptables -t nat -S' fails): portmap needs it (kernel without nf_tables/ip_tables?)"
	for p in "${CNI_PLUGINS[@]}"; do
		# The module version the binary was built from (not a stamp file that could lie).
		have=$(go version -m "$CNI_BIN/${p#*/}" 2>/dev/null | awk '$1 == "mod" {print $3}') || have=""
		[[ $have == "$CNI_PLUGINS_VERSION" ]] || ok=false
		pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION")
	done
	if $ok; then
		log "CNI plugins $CNI_PLUGINS_VERSION already in $CNI_BIN"
		return
	fi
	log "go install CNI plugins bridge, host-local, loopback, portmap @$CNI_PLUGINS_VERSION (~20s cold)"
	mkdir -p "$CNI_BIN"
	(cd /tmp && GOBIN=$CNI_BIN CGO_ENABLED=0 go install -trimpath \
		-ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" \
		"${pkgs[@]}") || die "go install of the CNI plugins @$CNI_PLUGINS_VERSION failed (needs the Go module proxy; set CNI_PLUGINS_VERSION to an existing tag)"
	log "CNI plugins: $("$CNI_BIN/bridge" </dev/null 2>&1 | head -1) in $CNI_BIN"
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
	install_cni_plugins
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
# An empty PATTERN takes any cmdline, an empty one too: in the middle of its
# execve a process's cmdline reads empty (the kernel has switched to the new
# program's memory but not yet set its arguments), and a containerd caught
# there was taken for one that had exited (restart: "exited 0.00s after it
# was started", with nothing in its log).
alive() {
	local pid stat
	[[ -f $1 ]] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != Z ]] || return 1
	[[ -z $2 ]] || pid_matches "$pid" "$2"
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
  level = "$LAB_LOG_LEVEL"${LAB_DEBUG_ADDRESS:+
  address = \"$LAB_DEBUG_ADDRESS\"}

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
    # Pod netns mounts in $NETNS_DIR instead of /var/run/netns.
    netns_mounts_under_state_dir = true${LAB_STATS_COLLECT_PERIOD:+
    stats_collect_period = \"$LAB_STATS_COLLECT_PERIOD\"}
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        sandboxer = "podsandbox"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$LAB_RUNC"
          Root = "$LAB_DIR/state/runc"
          SystemdCgroup = false
    # The lab's network (written by up into conf_dir, reloaded by containerd
    # on every change there). hostNetwork pods never call CNI.
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$CNI_BIN"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1

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
	[[ -z $LAB_CONFIG_EXTRA ]] || printf '\n# LAB_CONFIG_EXTRA\n%s\n' "$LAB_CONFIG_EXTRA" >>"$CONFIG"
}

# ---------------------------------------------------------------- network ---

ip2int() {
	local a b c d
	IFS=. read -r a b c d <<<"$1"
	echo $(((10#$a << 24) | (10#$b << 16) | (10#$c << 8) | 10#$d))
}
int2ip() { echo "$(($1 >> 24 & 255)).$(($1 >> 16 & 255)).$(($1 >> 8 & 255)).$(($1 & 255))"; }
is_ip4() {
	local o
	[[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || return 1
	for o in ${1//./ }; do ((10#$o <= 255)) || return 1; done
}

# cni_net: checks LAB_CNI_SUBNET and sets CNI_NET, CNI_BCAST (as integers) and
# CNI_GATEWAY (the bridge's address, the subnet's first).
cni_net() {
	local ip=${LAB_CNI_SUBNET%/*} len=${LAB_CNI_SUBNET#*/} mask
	if ! is_ip4 "$ip" || [[ $LAB_CNI_SUBNET != */* || ! $len =~ ^[0-9]+$ ]] || ((len < 8 || len > 29)); then
		die "LAB_CNI_SUBNET=$LAB_CNI_SUBNET: want an IPv4 CIDR with a prefix length of 8..29, e.g. 10.222.1.0/24"
	fi
	mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
	CNI_NET=$(($(ip2int "$ip") & mask))
	[[ $(int2ip "$CNI_NET") == "$ip" ]] ||
		die "LAB_CNI_SUBNET=$LAB_CNI_SUBNET is not a network address (did you mean $(int2ip "$CNI_NET")/$len?)"
	CNI_BCAST=$((CNI_NET | (~mask & 0xffffffff)))
	CNI_GATEWAY=$(int2ip $((CNI_NET + 1)))
}

# cni_range_check IP KNOB: IP is a pod address of the subnet (not the network
# address, the gateway or the broadcast address).
cni_range_check() {
	local n
	is_ip4 "$1" || die "$2=$1 is not an IPv4 address"
	n=$(ip2int "$1")
	((n > CNI_NET + 1 && n < CNI_BCAST)) ||
		die "$2=$1 is not a pod address of $LAB_CNI_SUBNET ($(int2ip $((CNI_NET + 2)))..$(int2ip $((CNI_BCAST - 1))))"
}

# cni_check_knobs: validates the network's identity before the first up of LAB_DIR.
# Another lab (or the host) on the same bridge or subnet would mix up pods and
# cleanups: refuse, and name the knob to change.
cni_check_knobs() {
	local l
	[[ $LAB_CNI_NAME =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] ||
		die "LAB_CNI_NAME=$LAB_CNI_NAME: want letters, digits, '_', '.', '-' (a CNI network name)"
	[[ $LAB_CNI_BRIDGE =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$ ]] ||
		die "LAB_CNI_BRIDGE=$LAB_CNI_BRIDGE: want a device name of at most 15 letters, digits, '_', '.', '-'"
	cni_net
	[[ ! -e /sys/class/net/$LAB_CNI_BRIDGE ]] ||
		die "network device $LAB_CNI_BRIDGE exists already (another lab with this LAB_CNI_BRIDGE, or a leftover: ip link del $LAB_CNI_BRIDGE); set another LAB_CNI_BRIDGE"
	l=$(ip -4 -o addr show to "$LAB_CNI_SUBNET" 2>/dev/null | awk '{print $4 " on " $2}' | head -1)
	[[ -z $l ]] || die "LAB_CNI_SUBNET=$LAB_CNI_SUBNET holds the node's address $l (another lab's bridge?): set another LAB_CNI_SUBNET"
	l=$(ip -4 -o route show exact "$LAB_CNI_SUBNET" 2>/dev/null | head -1)
	[[ -z $l ]] || die "LAB_CNI_SUBNET=$LAB_CNI_SUBNET is routed already ($l): set another LAB_CNI_SUBNET"
}

# write_cni_conf START END: (re)writes the conflist with host-local's range START..END
# (empty: the subnet's bound) and records the settings. The conflist is renamed into
# place: containerd reloads on the rename and never reads half a file.
write_cni_conf() {
	local start=$1 end=$2 range tmp
	cni_net
	[[ -z $start ]] || cni_range_check "$start" LAB_CNI_RANGE_START
	[[ -z $end ]] || cni_range_check "$end" LAB_CNI_RANGE_END
	if [[ -n $start && -n $end ]] && (($(ip2int "$start") > $(ip2int "$end"))); then
		die "LAB_CNI_RANGE_START=$start is after LAB_CNI_RANGE_END=$end"
	fi
	range="\"subnet\": \"$LAB_CNI_SUBNET\", \"gateway\": \"$CNI_GATEWAY\""
	[[ -z $start ]] || range+=", \"rangeStart\": \"$start\""
	[[ -z $end ]] || range+=", \"rangeEnd\": \"$end\""
	mkdir -p "$CNI_CONF_DIR" "$CNI_DATA_DIR"
	tmp=$CNI_CONF_DIR/.conflist.tmp # not *.conf, *.conflist or *.json: libcni ignores it
	cat >"$tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$LAB_CNI_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$LAB_CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CNI_DATA_DIR",
        "ranges": [[{$range}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {
      "type": "portmap",
      "backend": "iptables",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
	[[ -n $CNI_IP_FORWARD ]] || CNI_IP_FORWARD=$(cat /proc/sys/net/ipv4/ip_forward)
	printf 'NAME=%s\nBRIDGE=%s\nSUBNET=%s\nRANGE_START=%s\nRANGE_END=%s\nIP_FORWARD=%s\n' \
		"$LAB_CNI_NAME" "$LAB_CNI_BRIDGE" "$LAB_CNI_SUBNET" "$start" "$end" "$CNI_IP_FORWARD" >"$CNI_SETTINGS.tmp"
	mv -f "$CNI_SETTINGS.tmp" "$CNI_SETTINGS"
	mv -f "$tmp" "$CNI_CONF"
	CNI_CUR_START=$start CNI_CUR_END=$end
}

cmd_cni_conf() {
	[[ -f $CNI_SETTINGS ]] || die "no lab in $LAB_DIR: $0 up"
	write_cni_conf "$LAB_CNI_RANGE_START" "$LAB_CNI_RANGE_END"
	log "wrote $CNI_CONF (range ${LAB_CNI_RANGE_START:-subnet start}..${LAB_CNI_RANGE_END:-subnet end})"
	echo "$CNI_CONF"
}

# cni_ids: sandbox ids of the lab's network: from its cache entries
# (<network>-<64 hex id>-<ifname>) and the lab's task dirs.
cni_ids() {
	local f rest
	shopt -s nullglob
	for f in "$CNI_CACHE_DIR/results/$LAB_CNI_NAME"-*; do
		rest=${f##*/}
		rest=${rest#"$LAB_CNI_NAME"-}
		[[ $rest =~ ^([0-9a-f]{64})-[A-Za-z0-9_.-]+$ ]] && echo "${BASH_REMATCH[1]}"
	done
	shopt -u nullglob
	lab_ids
}

# cni_cache_files: this lab's entries in libcni's cache: <network>-<64 hex id>-<ifname>,
# and containerd's loopback entries cni-loopback-<id>-lo of the lab's sandboxes or of a
# netns inside LAB_DIR. Nothing of other networks or labs.
cni_cache_files() {
	local f rest id
	local -A ids=()
	for id in $(cni_ids); do ids[$id]=1; done
	shopt -s nullglob
	for f in "$CNI_CACHE_DIR/results/$LAB_CNI_NAME"-*; do
		rest=${f##*/}
		rest=${rest#"$LAB_CNI_NAME"-}
		[[ $rest =~ ^[0-9a-f]{64}-[A-Za-z0-9_.-]+$ ]] && echo "$f"
	done
	for f in "$CNI_CACHE_DIR"/results/cni-loopback-*-lo; do
		rest=${f##*/cni-loopback-}
		rest=${rest%-lo}
		if [[ -n ${ids[$rest]:-} ]] || grep -qF "\"netns\":\"$LAB_DIR/" "$f" 2>/dev/null; then
			echo "$f"
		fi
	done
	shopt -u nullglob
}

# cni_chains: portmap's per-pod nat chains (CNI-DN-<hash>) of this lab's network: the
# targets of the jumps whose comment is `dnat name: "<network>" id: "<id>"`, and the
# chains named after the lab's sandboxes (CNI-DN- + sha512(<network><id>)[:21], as
# portmap names them), also when their jump is gone.
cni_chains() {
	local rules id c
	command -v iptables-save >/dev/null || return 0
	rules=$(iptables-save -t nat 2>/dev/null) || return 0
	{
		grep -F -- "dnat name: \\\"$LAB_CNI_NAME\\\" id: " <<<"$rules" |
			awk '$1 == "-A" && $(NF-1) == "-j" && $NF ~ /^CNI-DN-/ {print $NF}'
		for id in $(cni_ids | sort -u); do
			c=CNI-DN-$(printf '%s' "$LAB_CNI_NAME$id" | sha512sum | cut -c1-21)
			if grep -q "^:$c " <<<"$rules"; then echo "$c"; fi
		done
	} | sort -u
}

# cni_veths: host ends of pod veths on the lab's bridge, and those named in the lab's
# cache entries (a pod veth whose bridge is gone).
cni_veths() {
	local f
	{
		[[ ! -d /sys/class/net/$LAB_CNI_BRIDGE/brif ]] || ls "/sys/class/net/$LAB_CNI_BRIDGE/brif"
		for f in $(cni_cache_files); do
			grep -o '"name":"veth[0-9a-f]*"' "$f" 2>/dev/null | cut -d'"' -f4
		done
	} | sort -u | while read -r f; do
		[[ -n $f && -e /sys/class/net/$f ]] && echo "$f"
	done
	return 0
}

# cni_netns_mounts: pod netns mounts in the lab's netns dir.
cni_netns_mounts() { awk -v d="$NETNS_DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo; }

# cni_leftovers: what of the lab's network is there, one line each (nothing after down).
cni_leftovers() {
	local x
	[[ ! -e /sys/class/net/$LAB_CNI_BRIDGE ]] || echo "bridge $LAB_CNI_BRIDGE"
	for x in $(cni_veths); do echo "veth $x"; done
	for x in $(cni_cache_files); do echo "cache entry $x"; done
	for x in $(cni_chains); do echo "iptables nat chain $x"; done
	for x in $(cni_netns_mounts); do echo "netns mount $x"; done
	return 0
}

# ipt_delete_refs CHAIN: deletes every nat rule that jumps to CHAIN, by its spec
# (not by number: other labs may change the shared chains meanwhile).
ipt_delete_refs() {
	local rule
	while read -r rule; do
		# eval: the words as iptables-save quoted them (comments hold spaces and
		# \"). Only rules of harmless characters: no $, `, ;, |, &, (, <, >.
		if [[ $rule =~ ^[-A-Za-z0-9_\ ./:=,!\"\\]+$ ]]; then
			eval "iptables -w -t nat -D ${rule#-A }" 2>/dev/null || log "cannot delete iptables rule: $rule"
		else
			log "not deleting the iptables rule (unexpected characters): $rule"
		fi
	done < <(iptables-save -t nat 2>/dev/null | awk -v c="$1" '$1 == "-A" && $(NF-1) == "-j" && $NF == c')
}

# cni_cleanup [-kernel]: removes this lab's network leftovers: pod veths, the bridge,
# portmap's chains and (unless -kernel: what a reboot loses) the cache entries.
# portmap's shared chains (CNI-HOSTPORT-*) go too once no per-pod chain of any
# network is left.
cni_cleanup() {
	local x n=0
	for x in $(cni_veths); do
		if ip link del "$x" 2>/dev/null; then n=$((n + 1)); fi
	done
	((n == 0)) || log "removed $n pod veths"
	if [[ -e /sys/class/net/$LAB_CNI_BRIDGE/bridge ]]; then
		if ip link del "$LAB_CNI_BRIDGE"; then log "removed bridge $LAB_CNI_BRIDGE"; else log "cannot remove bridge $LAB_CNI_BRIDGE"; fi
	fi
	if command -v iptables-save >/dev/null; then
		n=0
		for x in $(cni_chains); do
			ipt_delete_refs "$x"
			iptables -w -t nat -F "$x" 2>/dev/null || true
			if iptables -w -t nat -X "$x" 2>/dev/null; then n=$((n + 1)); else log "cannot delete iptables chain $x"; fi
		done
		((n == 0)) || log "removed $n portmap chains of network $LAB_CNI_NAME"
		# Shared by every portmap network on the host: only when this lab had a network.
		if [[ -f $CNI_SETTINGS ]] || ((n > 0)) && iptables-save -t nat 2>/dev/null | grep -q '^:CNI-HOSTPORT-DNAT ' &&
			! iptables-save -t nat 2>/dev/null | grep -qE '^:CNI-DN-|^-A CNI-HOSTPORT-DNAT '; then
			for x in CNI-HOSTPORT-DNAT CNI-HOSTPORT-MASQ CNI-HOSTPORT-SETMARK; do
				ipt_delete_refs "$x"
				iptables -w -t nat -F "$x" 2>/dev/null || true
				iptables -w -t nat -X "$x" 2>/dev/null || true
			done
			log "removed portmap's shared CNI-HOSTPORT-* chains (no portmap pod left on this host)"
		fi
	fi
	[[ ${1:-} != -kernel ]] || return 0
	n=0
	for x in $(cni_cache_files); do
		if rm -f "$x"; then n=$((n + 1)); fi
	done
	((n == 0)) || log "removed $n entries of $LAB_DIR's network from $CNI_CACHE_DIR/results"
	# The bridge plugin (isGateway) turned on forwarding: off again when it was off
	# before the lab and no CNI attachment of any network is left on this host.
	if [[ $CNI_IP_FORWARD == 0 && $(cat /proc/sys/net/ipv4/ip_forward) == 1 ]] &&
		[[ -z $(find "$CNI_CACHE_DIR/results" -mindepth 1 -maxdepth 1 2>/dev/null | head -1) ]]; then
		echo 0 >/proc/sys/net/ipv4/ip_forward && log "net.ipv4.ip_forward back to 0"
	fi
}

wait_ready() {
	local i
	for ((i = 0; i < LAB_READY_TIMEOUT * 20; i++)); do
		if ! containerd_alive; then
			# Right after the fork the child may not have exec'd containerd yet
			# (its cmdline is still this script's, seen on a loaded machine).
			# It is this script's child, so its pid cannot be reused before
			# this script exits: while it lives (not a zombie) it is waited for.
			if alive "$PIDFILE" ""; then
				sleep 0.05
				continue
			fi
			tail -20 "$LAB_DIR/containerd.log" >&2
			die "containerd (pid $(<"$PIDFILE")) exited $(printf '%d.%02d' $((i / 20)) $((i % 20 * 5)))s after it was started (log: $LAB_DIR/containerd.log)"
		fi
		if [[ -S $SOCK ]] && cri -timeout 2s status 2>/dev/null | grep -q '^RuntimeReady=true'; then
			echo "${EPOCHREALTIME/./}" >"$READY_FILE"
			return 0
		fi
		sleep 0.05
	done
	die "containerd did not become ready in ${LAB_READY_TIMEOUT}s (see $LAB_DIR/containerd.log)"
}

# wait_network: CRI's NetworkReady (containerd loads the conflist before it serves CRI,
# so this is a check rather than a wait).
wait_network() {
	local i st
	for ((i = 0; i < 100; i++)); do
		st=$(cri -timeout 2s status 2>&1) || true
		grep -q '^NetworkReady=true' <<<"$st" && return 0
		sleep 0.05
	done
	die "CRI network not ready with $CNI_CONF and plugins in $CNI_BIN: $(grep NetworkReady <<<"$st")"
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
	[[ -x $CNI_BIN/bridge && -x $CNI_BIN/host-local && -x $CNI_BIN/loopback && -x $CNI_BIN/portmap ]] ||
		die "CNI plugins missing in $CNI_BIN, run: $0 install"
	if containerd_alive; then
		log "containerd already running (pid $(<"$PIDFILE"))"
		return 0
	fi
	((${#SHIM_SOCK_DIR} <= 42)) || die "LAB_DIR too long: shim socket dir $SHIM_SOCK_DIR must be <= 42 chars"
	[[ -d $TASK_DIR ]] && log "reusing the state in $LAB_DIR (containerd is not running)"
	[[ -z $CNI_IGNORED ]] || log "ignoring${CNI_IGNORED}: $LAB_DIR keeps the network of its first up ($CNI_SETTINGS) until down"
	if [[ ! -f $CNI_SETTINGS ]]; then
		cni_check_knobs
		write_cni_conf "$LAB_CNI_RANGE_START" "$LAB_CNI_RANGE_END"
		log "CNI network $LAB_CNI_NAME: bridge $LAB_CNI_BRIDGE, subnet $LAB_CNI_SUBNET, range ${LAB_CNI_RANGE_START:-start}..${LAB_CNI_RANGE_END:-end}"
	elif [[ ! -f $CNI_CONF ]]; then
		write_cni_conf "$CNI_CUR_START" "$CNI_CUR_END"
	fi
	mkdir -p "$LAB_DIR"/{root,state,tmp,nri/plugins,nri/conf.d,opt,log/pods} "$SHIM_SOCK_DIR"
	write_config
	start_containerd
	wait_network
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
	wait_network
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
	local left ids net
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
	cni_cleanup
	net=$(cni_leftovers | tr '\n' ';')
	[[ -n $left ]] || rm -rf "$LAB_DIR"
	[[ -z $left ]] || log "WARNING: processes left: $left"
	[[ -z $(lab_mounts) ]] || log "WARNING: mounts left under $LAB_DIR: $(lab_mounts | tr '\n' ' ')"
	[[ -z $net ]] || log "WARNING: network leftovers of $LAB_DIR: $net"
	[[ -z $left && -z $(lab_mounts) && -z $net ]] || return 1
	log "down: nothing left of $LAB_DIR"
}

# ----------------------------------------------------------------- reboot ---

# kill_hard: SIGKILL to containerd, the lab's container processes, shims and
# launched NRI plugins (the same proofs of ownership as kill_leftovers), then
# waits until they are gone.
kill_hard() {
	local f pid id ids
	mapfile -t ids < <(lab_ids)
	if containerd_alive; then kill -KILL "$(<"$PIDFILE")" 2>/dev/null || true; fi
	shopt -s nullglob
	for f in "$TASK_DIR"/*/*/init.pid; do
		id=${f%/init.pid}
		id=${id##*/}
		pid=$(cat "$f" 2>/dev/null || true)
		if [[ -n $pid ]] && grep -qF -- "$id" "/proc/$pid/cgroup" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	shopt -u nullglob
	for pid in $(lab_shims) $(lab_plugins); do kill -KILL "$pid" 2>/dev/null || true; done
	for _ in {1..100}; do
		[[ -z $(lab_procs "${ids[@]}") ]] && return 0
		sleep 0.1
	done
	die "processes of $LAB_DIR survived kill -9: $(lab_procs "${ids[@]}" | sort -u | tr '\n' ' ')"
}

# cmd_reboot [-keep-netns]: what a node reboot does to the lab, then up. Every
# process dies; containerd's root and state go (no sandbox records, images are
# imported again); the kernel's network state of the lab goes too: pod netns
# mounts, veths, the bridge, portmap's chains, unless -keep-netns (then all of
# these stay, unknown to the new containerd). Kept, as on a node whose disk
# survives: the CNI cache in /var/lib/cni, host-local's reservations, the
# conflist, logs and the NRI dirs.
cmd_reboot() {
	local keep=false mp n=0
	case ${1:-} in
	"") ;;
	-keep-netns | --keep-netns) keep=true ;;
	*) die "reboot: unknown argument '$1' (want -keep-netns or nothing)" ;;
	esac
	[[ -f $CONFIG && -f $CNI_SETTINGS ]] || die "no lab in $LAB_DIR: $0 up"
	log "reboot: kill -9 of containerd, shims, pods and launched NRI plugins"
	kill_hard
	while read -r mp; do
		if $keep && [[ $mp == "$NETNS_DIR"/* ]]; then continue; fi
		umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || die "reboot: cannot unmount $mp"
		n=$((n + 1))
	done < <(lab_mounts | sort -r)
	log "reboot: unmounted $n mounts$($keep && echo ", kept $(cni_netns_mounts | wc -l) netns mounts")"
	# --one-file-system: never into something still mounted (the kept netns files).
	rm -rf --one-file-system "$LAB_DIR/root" "$LAB_DIR/tmp" "$PIDFILE" "$READY_FILE" "$PLUGIN_PIDS"
	if $keep && [[ -d $NETNS_DIR ]]; then
		find "$LAB_DIR/state" -mindepth 1 -maxdepth 1 ! -name "${CRI_STATE_DIR##*/}" -exec rm -rf --one-file-system {} +
		find "$CRI_STATE_DIR" -mindepth 1 -maxdepth 1 ! -name netns -exec rm -rf --one-file-system {} +
	else
		rm -rf --one-file-system "$LAB_DIR/state"
	fi
	$keep || cni_cleanup -kernel
	remove_cgroups
	cmd_up
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
export LAB_CNI_NAME=$LAB_CNI_NAME
export LAB_CNI_BRIDGE=$LAB_CNI_BRIDGE
export LAB_CNI_SUBNET=$LAB_CNI_SUBNET
export LAB_CNI_GATEWAY=$(cni_net && echo "$CNI_GATEWAY")
export LAB_CNI_RANGE_START=$CNI_CUR_START
export LAB_CNI_RANGE_END=$CNI_CUR_END
export LAB_CNI_CONF=$CNI_CONF
export LAB_CNI_CONF_DIR=$CNI_CONF_DIR
export LAB_CNI_BIN=$CNI_BIN
export LAB_CNI_CACHE_DIR=$CNI_CACHE_DIR
export LAB_CNI_DATA_DIR=$CNI_DATA_DIR
export LAB_NETNS_DIR=$NETNS_DIR
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
	echo "CNI network $LAB_CNI_NAME: bridge $LAB_CNI_BRIDGE, subnet $LAB_CNI_SUBNET, range ${CNI_CUR_START:-start}..${CNI_CUR_END:-end}"
	cni_leftovers | sed 's/^/  /'
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
	local uid pod ctr n old ip netns port left
	cmd_install
	cmd_down
	cmd_up
	uid=$(cat /proc/sys/kernel/random/uuid)
	cmd_demo "$uid"
	log "checking log directory"
	[[ -s $LOG_ROOT/lab_demo_$uid/sleeper/0.log ]] || die "no container log in $LOG_ROOT/lab_demo_$uid"
	log "pod network: a pod with its own netns and a hostPort on $LAB_CNI_NAME"
	port=$((20000 + RANDOM % 10000))
	read -r pod ctr < <(cri up -name netcheck -ns lab -port "$port:8080")
	read -r _ ip netns < <(cri netinfo "$pod")
	cni_net
	n=$(ip2int "$ip")
	((n > CNI_NET + 1 && n < CNI_BCAST)) || die "pod IP $ip is not in $LAB_CNI_SUBNET"
	if [[ $netns != "$NETNS_DIR"/* ]] || ! cni_netns_mounts | grep -qxF "$netns"; then
		die "pod netns $netns is not a mount in $NETNS_DIR"
	fi
	[[ -f $CNI_CACHE_DIR/results/$LAB_CNI_NAME-$pod-eth0 ]] || die "no CNI cache entry $CNI_CACHE_DIR/results/$LAB_CNI_NAME-$pod-eth0"
	[[ $(cat "$CNI_DATA_DIR/$LAB_CNI_NAME/$ip" 2>/dev/null) == "$pod"$'\r'$'\n'eth0 ]] ||
		die "host-local reservation $CNI_DATA_DIR/$LAB_CNI_NAME/$ip does not name $pod"
	iptables-save -t nat 2>/dev/null | grep -qF -- "--dport $port -j DNAT --to-destination $ip:8080" || die "no portmap DNAT rule for $ip:8080"
	[[ -n $(cni_chains) && -n $(cni_veths) ]] || die "no portmap chain or veth of $pod"
	log "pod network: StopPodSandbox + RemovePodSandbox leave nothing but the bridge"
	cri down "$pod"
	left=$(cni_leftovers | grep -v '^bridge ' || true)
	[[ -z $left ]] || die "left after removing pod $pod: $left"
	log "reboot -keep-netns: containerd forgets a pod, the node keeps its network"
	read -r pod ctr < <(cri up -name leak -ns lab -port "$((port + 1)):8080")
	read -r _ ip netns < <(cri netinfo "$pod")
	cmd_reboot -keep-netns
	[[ -z $(cri pods | sed 1d) ]] || die "pods after reboot: $(cri pods)"
	left=$(cni_leftovers)
	for n in "cache entry $CNI_CACHE_DIR/results/$LAB_CNI_NAME-$pod-eth0" "netns mount $netns" "iptables nat chain " "veth "; do
		grep -qF -- "$n" <<<"$left" || die "after reboot -keep-netns: no '$n' in: $left"
	done
	[[ -f $CNI_DATA_DIR/$LAB_CNI_NAME/$ip ]] || die "after reboot -keep-netns: reservation of $ip gone"
	read -r pod ctr < <(cri up -name afterboot -ns lab -port "$((port + 2)):8080")
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
	left=$(cni_leftovers)
	[[ -z $left ]] || die "network leftovers survived down: $left"
	! iptables-save -t nat 2>/dev/null | grep -qF -- "\"$LAB_CNI_NAME\"" || die "iptables rules naming $LAB_CNI_NAME survived down"
	[[ -z $(find "$CNI_CACHE_DIR/results" -name "$LAB_CNI_NAME-*" 2>/dev/null) ]] || die "cache entries of $LAB_CNI_NAME survived down"
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
	reboot) cmd_reboot "$@" ;;
	cni-conf) cmd_cni_conf ;;
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
