#!/usr/bin/env bash
# make demo: bring up the lab containerd, run nri-housekeeper against it,
# create kubelet-like pods, leave the kubernetes#107730 leak behind (pod
# deleted, sandbox stopped but never removed), and show the plugin reclaim
# it. Everything is torn down at the end, also on Ctrl-C or failure.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LAB="$REPO/test/e2e/lab/lab.sh"
BIN="$REPO/bin/nri-housekeeper"
export LAB_DIR=${DEMO_LAB_DIR:-/tmp/nrihk-demo}
export LAB_CGROUP_ROOT=/nrihk-demo
DEMO=$(mktemp -d /tmp/nrihk-demo-node.XXXXXX) # the demo "node": kubelet root, log links, config
KUBELET_ROOT=$DEMO/kubelet
LINKS=$DEMO/containers
CONF=$DEMO/nri-housekeeper.toml
LOG=$DEMO/nri-housekeeper.log
PLUGIN_PID=

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cri() { "$LAB" cri "$@"; }

cleanup() {
	set +e
	[[ -n $PLUGIN_PID ]] && kill "$PLUGIN_PID" 2>/dev/null && wait "$PLUGIN_PID" 2>/dev/null
	"$LAB" down >/dev/null 2>&1
	rm -rf "$DEMO"
}
trap cleanup EXIT

[[ -x $BIN ]] || { echo "build first: make build" >&2; exit 1; }
say "Bringing up the lab: a real containerd v2.4 with NRI and runc in $LAB_DIR"
"$LAB" up
eval "$("$LAB" env)"
mkdir -p "$KUBELET_ROOT/pods" "$LINKS"

cat >"$CONF" <<EOF
# Demo settings: short periods so the demo takes seconds, not minutes.
[housekeeping]
period = "2s"
startup_delay = "0s"
leak_grace = "4s"
state_file = "$DEMO/state.json"

[nri]
socket = "$NRI_SOCKET"

[runtime]
endpoint = "unix://$LAB_CRI_SOCK"

[pods]
kubelet_root = "$KUBELET_ROOT"

[logs]
pod_logs_dir = "$LAB_LOG_ROOT"
container_logs_dir = "$LINKS"

[cgroups]
root = "${LAB_CGROUP_ROOT#/}"

[metrics]
address = "127.0.0.1:${DEMO_METRICS_PORT:-9560}"

[log]
target = "file"
file = "$LOG"
EOF
"$BIN" config check "$CONF"

say "Starting nri-housekeeper (external mode, config $CONF)"
"$BIN" run --config "$CONF" 2>>"$LOG" &
PLUGIN_PID=$!
for _ in $(seq 50); do grep -q 'synchronized with the runtime' "$LOG" 2>/dev/null && break; sleep 0.1; done
grep -q 'synchronized with the runtime' "$LOG" || { cat "$LOG"; echo "plugin did not connect" >&2; exit 1; }

# Kubelet creates the pod dir before the sandbox; the plugin uses it to know
# which pods the node still wants.
run_pod() { # run_pod NAME -> "SANDBOX CONTAINER"
	local uid
	uid=$(cat /proc/sys/kernel/random/uuid)
	mkdir -p "$KUBELET_ROOT/pods/$uid/volumes"
	read -r sb ctr < <(cri up -name "$1" -ns demo -uid "$uid")
	echo "$sb $ctr $uid"
}
say "Kubelet starts two pods: web and batch"
read -r WEB_SB WEB_CTR WEB_UID < <(run_pod web)
read -r BATCH_SB BATCH_CTR BATCH_UID < <(run_pod batch)
ln -s "$LAB_LOG_ROOT/demo_batch_$BATCH_UID/sleeper/0.log" "$LINKS/batch_demo_sleeper-$BATCH_CTR.log"
sleep 3
cri pods
say "What the plugin tracks (its log):"
grep -E 'pod demo/' "$LOG" | sed -e 's/^time="[^"]*" //' -e 's/ phase=.*//'

say "batch is deleted, but kubelet's pod worker is stuck (kubernetes#107730):"
echo "   container stopped, sandbox stopped, pod dir removed - and nothing ever removes them"
cri stop -t 2 "$BATCH_CTR" >/dev/null
cri stopp "$BATCH_SB" >/dev/null
rm -rf "${KUBELET_ROOT:?}/pods/$BATCH_UID"
cri pods
cri ps

say "nri-housekeeper report (a one-shot look, as an SRE would run it):"
"$BIN" report --config "$CONF" 2>/dev/null

say "Waiting for the plugin to reclaim the leak (leak_grace 4s, period 2s)"
start=$(date +%s.%N)
for _ in $(seq 300); do
	if ! cri pods | grep -q "${BATCH_SB:0:13}" && [[ ! -e $LAB_LOG_ROOT/demo_batch_$BATCH_UID ]]; then break; fi
	sleep 0.1
done
cri pods | grep -q "${BATCH_SB:0:13}" && { tail -30 "$LOG"; echo "leak not reclaimed" >&2; exit 1; }
awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "reclaimed %.1fs after the pod dir was removed\n", e - s }'
cri pods
cri ps
say "What it did and why (its log):"
grep -E 'msg="(removed|stopped|killed|reduced|would)' "$LOG" | sed -e 's/^time="[^"]*" //'
echo "(the batch container's /var/log/containers link went right after its pod log dir, in the same pass)"

say "What Prometheus sees (non-zero nri_housekeeper_actions_total and leaked_objects series):"
metrics() { # a scrape without curl: bash's /dev/tcp
	exec 3<>"/dev/tcp/127.0.0.1/${DEMO_METRICS_PORT:-9560}"
	printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
	cat <&3
	exec 3<&-
}
# leaked_objects is what the last pass found: the reclaim pass still counts
# the leak it removed. Wait for the pass after it.
for _ in $(seq 50); do metrics | grep -q '^nri_housekeeper_leaked_objects{kind="sandbox"} 0$' && break; sleep 0.2; done
metrics | grep -E '^nri_housekeeper_(actions_total|leaked_objects|tracked_pods|nri_connected)' | grep -v ' 0$' || true

[[ -n $(cri pods | grep "${WEB_SB:0:13}") ]] || { echo "the live pod was touched!" >&2; exit 1; }
say "The live pod web is untouched. Tearing the lab down."
