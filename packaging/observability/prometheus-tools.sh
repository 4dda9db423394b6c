#!/bin/bash
# Installs Debian's prometheus package when promtool or prometheus is
# missing: promtool checks and unit-tests alerts.yaml (make rules), and the
# e2e test runs prometheus against the plugin. The package's service is not
# started.
set -euo pipefail

if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "promtool or prometheus is missing: run as root, or apt-get install prometheus" >&2
	exit 1
fi

# The package's postinst starts the service with invoke-rc.d (or
# deb-systemd-invoke under systemd), which first asks policy-rc.d: 101 is
# "not now". Without a policy, whether it starts depends on the machine
# (here: an init installed by e2e-tools, no runlevel, so no start; with a
# runlevel, the init script would leave a prometheus on :9090 that nothing
# stops, and a failed start fails the install). A policy the machine
# already has is its own and is kept.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# nri-housekeeper prometheus-tools.sh: no service starts during its install\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi
apt-get update >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null && command -v prometheus >/dev/null
