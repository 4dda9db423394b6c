#!/bin/sh
# Build the nri-housekeeper Debian package with nfpm (run through the Go
# module proxy: no nfpm installation needed).
#
#   packaging/deb/build.sh [OUTDIR]        default OUTDIR: bin/
#   packaging/deb/build.sh --deb-version V  print the Debian version of V and exit
#
# Environment:
#   VERSION            version of the binary; default: git describe --tags --always --dirty
#   GOARCH             target architecture (Go and Debian names agree for amd64, arm64); default amd64
#   NFPM_VERSION       nfpm module version; default v2.45.2 (v2.46.0 and later need
#                      go.digitalxero.dev modules that the Go module proxy does not serve)
#   DEB_MAINTAINER     the package's Maintainer field
#   SOURCE_DATE_EPOCH  file times in the package; default: the commit time (reproducible builds)
#   GO                 go command; default go
# Prints the path of the .deb on its last line.
set -eu
LC_ALL=C
export LC_ALL
umask 022

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

out=${1:-bin}
GO=${GO:-go}
GOARCH=${GOARCH:-amd64}
NFPM_VERSION=${NFPM_VERSION:-v2.45.2}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
DEB_MAINTAINER=${DEB_MAINTAINER:-nri-housekeeper maintainers <nri-housekeeper@users.noreply.github.com>}
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi

# untagged H: H is what git describe --always prints without a tag, an
# abbreviated commit hash of this repository (not a tag's name).
untagged() {
	case $1 in
	'' | *[!0-9a-f]*) return 1 ;;
	esac
	[ ${#1} -ge 4 ] &&
		git rev-parse -q --verify "$1^{commit}" >/dev/null 2>&1 &&
		! git rev-parse -q --verify "refs/tags/$1" >/dev/null 2>&1
}

# A Debian version must start with a digit and may only hold [A-Za-z0-9.+~-]:
# v1.2.3 -> 1.2.3, v1.2.3-4-gabcdef-dirty -> 1.2.3+4.gabcdef.dirty (4: commits
# since the tag: after the tag, +). A pre-release tag sorts before its
# release (~): v1.2.3-rc1 -> 1.2.3~rc1, v1.2.3-rc1-4-gabcdef ->
# 1.2.3~rc1+4.gabcdef, so that apt upgrades an RC to its release. Without a tag (a bare hash, which may start with a digit):
# abcdef-dirty -> 0.0.0+git.169.abcdef.dirty, 169 being the number of commits
# up to abcdef (git rev-list --count), so that dpkg orders untagged builds by
# history, not by hash. The "." after "git" sorts after every character the
# earlier 0.0.0+git<hash> versions had there, so these upgrade those too.
# Anything else not starting with a digit: 0.0.0+git<version>.
deb_version() {
	v=${1#v}
	h=${1%-dirty}
	if untagged "$h"; then
		n=$(git rev-list --count "$h" --)
		if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
			echo "build.sh: warning: shallow clone: the commit count $n in the version is not the history's (git fetch --unshallow)" >&2
		fi
		v=0.0.0+git.$n.$1
	else
		case $v in
		[0-9]*) ;;
		*) v=0.0.0+git$v ;;
		esac
	fi
	dirty=
	case $v in
	*+*) ;;
	*-dirty) v=${v%-dirty} dirty=1 ;;
	esac
	case $v in
	*+*) v=$(printf '%s' "$v" | tr -c 'A-Za-z0-9.+~\n' '.') ;;
	*-*) v=$(printf '%s' "$v" | sed -E 's/-([0-9]+-g[0-9a-f]+)$/+\1/; s/^([^+-]*)-/\1~/' | tr -c 'A-Za-z0-9.+~\n' '.') ;;
	esac
	if [ -n "$dirty" ]; then
		case $v in
		*+*) v=$v.dirty ;;
		*) v=$v+dirty ;;
		esac
	fi
	printf '%s\n' "$v"
}

if [ "${1-}" = --deb-version ]; then
	deb_version "${2?--deb-version needs a version}"
	exit 0
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
trap 'exit 1' HUP INT TERM

# Static, so that the package needs no libc of a particular version.
CGO_ENABLED=0 GOOS=linux GOARCH=$GOARCH "$GO" build -trimpath -ldflags "-X main.version=$VERSION" \
	-o "$stage/nri-housekeeper" ./cmd/nri-housekeeper
host=$stage/nri-housekeeper
if [ "$GOARCH" != "$("$GO" env GOHOSTARCH)" ]; then
	# The configuration files come from the binary's own example: build one
	# that runs here.
	mkdir "$stage/host"
	CGO_ENABLED=0 "$GO" build -trimpath -o "$stage/host/nri-housekeeper" ./cmd/nri-housekeeper
	host=$stage/host/nri-housekeeper
fi

# The conffile sets no key: every key is optional, and one written at its
# default would pin that default across upgrades that change it. It holds
# only what rarely changes, so that dpkg seldom asks about an edited copy;
# the documented list of every key is the example beside README.Debian.
cat >"$stage/config.toml" <<'EOF'
# nri-housekeeper configuration, external mode: read by the systemd service
# nri-housekeeper.service (nri-housekeeper run --config
# /etc/nri-housekeeper/config.toml), which connects to containerd's NRI socket.
#
# Every key is optional: set here only what you change. Each key, its
# default and its meaning:
#   /usr/share/doc/nri-housekeeper/config.example.toml
#   nri-housekeeper config example
# For instance:
#   dry_run = true
#   [housekeeping]
#   leak_grace = "10m"
#
# A dpkg conffile: your changes are kept on upgrades. Check a change, then
# apply it:
#   nri-housekeeper config check /etc/nri-housekeeper/config.toml
#   systemctl restart nri-housekeeper
# Logs: journalctl -t nri-housekeeper (log.target = "auto" finds journald).
# The service cannot write below /usr, /boot or /etc, does not see /home or
# /root, and has its own /tmp: keep configured paths (log.file, ...) in /var.
EOF
"$host" config check "$stage/config.toml" >/dev/null
"$host" config example >"$stage/config.example.toml"
"$host" config check "$stage/config.example.toml" >/dev/null

# The pre-registered configuration, exactly as `make install` writes it.
"$here/../install/install.sh" config BINARY="$host" >"$stage/10-nri-housekeeper.conf"
"$host" config check "$stage/10-nri-housekeeper.conf" >/dev/null

mkdir -p "$out"
NFPM_STAGE=$stage DEB_VERSION=$(deb_version "$VERSION") DEB_ARCH=$GOARCH DEB_MAINTAINER=$DEB_MAINTAINER \
	SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH \
	"$GO" run "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION" \
	pkg --packager deb --config packaging/deb/nfpm.yaml --target "$stage/pkg.deb" >&2
deb=$out/nri-housekeeper_$(deb_version "$VERSION")_$GOARCH.deb
mv -f "$stage/pkg.deb" "$deb"
printf '%s\n' "$deb"
