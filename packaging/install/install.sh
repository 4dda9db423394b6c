#!/bin/sh
# Install or remove nri-housekeeper as a pre-registered NRI plugin: containerd
# launches every NN-name executable in its NRI plugin_path when it starts and
# passes it the contents of plugin_config_path/NN-name.conf.
#
#   install.sh install   [VAR=value ...]   binary + config
#   install.sh uninstall [VAR=value ...]   binary; config only if unedited
#   install.sh config    [VAR=value ...]   print the config that install writes
#
# The config: install writes it when there is none. On an upgrade (install over
# an existing one), a config nobody edited is replaced by the new version's,
# and an edited one is kept (the new one is written next to it as .example)
# after the NEW binary accepted it (`config check`); if it does not, nothing
# is changed: the old binary and the config stay as they are. Whether the file
# was edited is told by the checksum that install writes into it
# ("# shipped-sha256: ..."), so it also holds after an upgrade changed the
# shipped text; uninstall removes an unedited config and keeps an edited one.
#
# Variables, from the environment or as VAR=value arguments:
#   DESTDIR     prepended to every installed path (staging root); default empty
#   PLUGIN_DIR  containerd's NRI plugin_path; default /opt/nri/plugins
#   CONF_DIR    containerd's NRI plugin_config_path; default /etc/nri/conf.d
#   NAME        file name: two digits (the plugin index), a dash, a name;
#               default 10-nri-housekeeper
#   BINARY      the nri-housekeeper binary to install; default bin/nri-housekeeper
#   FORCE       1: replace a file at PLUGIN_DIR/NAME that is not nri-housekeeper
#
# `make install` / `make uninstall` call this script with BINARY=bin/nri-housekeeper.
set -eu
LC_ALL=C
export LC_ALL

DESTDIR=${DESTDIR-}
PLUGIN_DIR=${PLUGIN_DIR:-/opt/nri/plugins}
CONF_DIR=${CONF_DIR:-/etc/nri/conf.d}
NAME=${NAME:-10-nri-housekeeper}
BINARY=${BINARY:-bin/nri-housekeeper}
FORCE=${FORCE:-0}

prog=$(basename "$0")

say() { printf '%s\n' "$*"; }
die() {
	printf '%s: %s\n' "$prog" "$*" >&2
	exit 1
}
usage() {
	printf 'usage: %s install|uninstall|config [DESTDIR=dir] [PLUGIN_DIR=dir] [CONF_DIR=dir] [NAME=NN-name] [BINARY=file] [FORCE=1]\n' "$prog" >&2
	exit 2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
for arg in "$@"; do
	case $arg in
	DESTDIR=*) DESTDIR=${arg#*=} ;;
	PLUGIN_DIR=*) PLUGIN_DIR=${arg#*=} ;;
	CONF_DIR=*) CONF_DIR=${arg#*=} ;;
	NAME=*) NAME=${arg#*=} ;;
	BINARY=*) BINARY=${arg#*=} ;;
	FORCE=*) FORCE=${arg#*=} ;;
	*) usage ;;
	esac
done
case $cmd in
install | uninstall | config) ;;
*) usage ;;
esac

# valid_name NAME: what containerd's NRI (api.ParsePluginName and
# api.CheckPluginName) accepts for a pre-registered plugin: two decimal digits,
# a dash, then one or more of [a-zA-Z0-9_.+-].
valid_name() {
	case $1 in
	[0-9][0-9]-?*) ;;
	*) return 1 ;;
	esac
	case ${1#??-} in
	*[!a-zA-Z0-9_.+-]*) return 1 ;;
	esac
	return 0
}

if ! valid_name "$NAME"; then
	die "refusing NAME=\"$NAME\": a pre-registered NRI plugin must be named NN-name:
  two digits (its index, e.g. 10), a dash, then letters, digits or _ . + - (e.g. 10-nri-housekeeper).
  containerd treats every executable in its NRI plugin_path ($PLUGIN_DIR) as a plugin; one with
  any other name makes NRI plugin discovery fail, and with it containerd's CRI service does not
  start (\"failed to set up NRI for CRI service\"): no pods on this node. Nothing was installed."
fi
for v in "$PLUGIN_DIR" "$CONF_DIR"; do
	case $v in
	/*) ;;
	*) die "PLUGIN_DIR and CONF_DIR must be absolute paths (got \"$v\")" ;;
	esac
done

plugin_dir=$DESTDIR$PLUGIN_DIR
conf_dir=$DESTDIR$CONF_DIR
bin=$plugin_dir/$NAME
conf=$conf_dir/$NAME.conf

# is_housekeeper FILE: FILE runs and says it is nri-housekeeper. Run with a
# timeout: another plugin given these arguments might try to connect to NRI.
is_housekeeper() {
	if [ ! -f "$1" ] || [ ! -x "$1" ]; then
		return 1
	fi
	v=$(timeout 10 "$1" version 2>/dev/null) || return 1
	case $v in
	nri-housekeeper\ *) return 0 ;;
	esac
	return 1
}

# sum_line is the prefix of the line, in the header of the config this script
# writes, that holds the SHA-256 of the file as written without that line.
sum_line='# shipped-sha256: '

sha256() {
	sha256sum | cut -d' ' -f1
}

# version_of BINARY: "nri-housekeeper <version>".
version_of() {
	timeout 10 "$1" version 2>/dev/null | awk 'NR == 1 { print $1, $2 }'
}

# config_header: the start of the configuration this script installs.
config_header() {
	cat <<EOF
# nri-housekeeper: configuration of the pre-registered NRI plugin
# $PLUGIN_DIR/$NAME.
#
# containerd launches $PLUGIN_DIR/$NAME when it starts and passes it the
# contents of this file ($CONF_DIR/$NAME.conf). Edits take effect when
# containerd restarts; check them first with
#   $PLUGIN_DIR/$NAME config check $CONF_DIR/$NAME.conf
# An invalid file does not stop containerd: the plugin fails containerd's
# Configure call, and containerd runs without the plugin (and logs why).
#
# Logging: containerd discards the plugin's stdout and stderr. With
# log.target = "auto" (below) the plugin logs to journald when its socket
# exists (journalctl -t nri-housekeeper); without journald, to log.file, or
# to /var/log/nri-housekeeper.log when that is empty. To log to a file even
# with journald, set in [log]:
#   target = "file"
#   file = "/var/log/nri-housekeeper.log"
#
# [nri] is ignored in this mode: containerd passes the connection, and the name
# and index come from the file name ($NAME).
#
EOF
}

# legacy_header: the whole header as installed before the checksum line
# existed. Keep it as it is: legacy_text recognises configs installed then
# by it. (config_header is what is installed now: a config with a checksum
# line is recognised by its own checksum, whatever its header says.)
legacy_header() {
	cat <<EOF
# nri-housekeeper: configuration of the pre-registered NRI plugin
# $PLUGIN_DIR/$NAME.
#
# containerd launches $PLUGIN_DIR/$NAME when it starts and passes it the
# contents of this file ($CONF_DIR/$NAME.conf). Edits take effect when
# containerd restarts; check them first with
#   $PLUGIN_DIR/$NAME config check $CONF_DIR/$NAME.conf
# An invalid file does not stop containerd: the plugin fails containerd's
# Configure call, and containerd runs without the plugin (and logs why).
#
# Logging: containerd discards the plugin's stdout and stderr. With
# log.target = "auto" (below) the plugin logs to journald when its socket
# exists (journalctl -t nri-housekeeper); on a host without journald its logs
# are lost. To debug, or without journald, set in [log]:
#   target = "file"
#   file = "/var/log/nri-housekeeper.log"
#
# [nri] is ignored in this mode: containerd passes the connection, and the name
# and index come from the file name ($NAME).
#
EOF
}

# sum_header: the part of the header that says what the checksum is for,
# without the checksum line.
sum_header() {
	cat <<EOF
# Unedited, this file is replaced by the next version's when the plugin is
# upgraded (make install) and removed by make uninstall. Once edited, it is
# kept: an upgrade first checks it with the new binary, then writes the new
# version's config next to it as <this file>.example. The installer tells
# the two apart by this checksum of the file as shipped (without its line):
EOF
}

# example BINARY: BINARY's documented example (`nri-housekeeper config
# example`), into $example (trailing newlines kept).
example() {
	example=$(timeout 10 "$1" config example && echo x) || return 1
	example=${example%x}
}

# config_text BINARY: the configuration this script installs: the header, the
# checksum line, then the documented example of BINARY.
config_text() {
	example "$1" || return 1
	sum=$({
		config_header
		sum_header
		printf '#\n%s' "$example"
	} | sha256)
	config_header
	sum_header
	printf '%s%s\n#\n%s' "$sum_line" "$sum" "$example"
}

# legacy_text BINARY: what versions of this script without the checksum line
# installed for BINARY's example.
legacy_text() {
	example "$1" || return 1
	legacy_header
	printf '%s' "$example"
}

# is_shipped FILE [BINARY...]: FILE is a config this script wrote, unedited:
# it holds one checksum line and the checksum matches; or, for a file without
# a checksum line (installed by an earlier version of this script), it is the
# legacy text of one of the BINARYs that is nri-housekeeper (the installed
# binary, that the file was shipped with, and the one being installed).
is_shipped() {
	f=$1
	shift
	n=$(grep -c "^$sum_line" "$f" 2>/dev/null) || true
	case $n in
	1)
		want=$(sed -n "s/^$sum_line//p" "$f")
		have=$(sed "/^$sum_line/d" "$f" | sha256)
		[ "$want" = "$have" ]
		return
		;;
	0) ;;
	*) return 1 ;;
	esac
	for b in "$@"; do
		if is_housekeeper "$b" && legacy_text "$b" >"$tmp/legacy" && cmp -s "$tmp/legacy" "$f"; then
			return 0
		fi
	done
	return 1
}

# scan_plugin_dir: warn about entries that break containerd's NRI plugin
# discovery (executables or symlinks not named NN-name) or that would run a
# second copy of nri-housekeeper.
scan_plugin_dir() {
	for f in "$plugin_dir"/* "$plugin_dir"/.[!.]* "$plugin_dir"/..?*; do
		[ -e "$f" ] || [ -L "$f" ] || continue
		n=${f##*/}
		if [ -L "$f" ] || { [ ! -d "$f" ] && [ -x "$f" ]; }; then
			if ! valid_name "$n"; then
				say "WARNING: $f is executable (or a symlink) but not named NN-name:"
				say "  containerd's NRI plugin discovery fails on it and the CRI service does not start."
			elif [ "$n" != "$NAME" ] && [ "${n#??-}" = "${NAME#??-}" ]; then
				say "WARNING: $f is another copy of ${NAME#??-}; containerd would launch both."
			fi
		fi
	done
}

do_install() {
	if [ ! -f "$BINARY" ] || [ ! -x "$BINARY" ]; then
		die "BINARY=$BINARY is not an executable file (run make build, or set BINARY)"
	fi
	is_housekeeper "$BINARY" || die "BINARY=$BINARY does not run as nri-housekeeper (\`$BINARY version\` failed)"
	if [ -d "$bin" ] && [ ! -L "$bin" ]; then
		die "$bin is a directory; not replacing it"
	fi
	if { [ -e "$bin" ] || [ -L "$bin" ]; } && [ "$FORCE" != 1 ] && ! is_housekeeper "$bin"; then
		die "$bin exists and is not nri-housekeeper (another plugin?); choose another NAME, or FORCE=1 to replace it"
	fi
	command -v sha256sum >/dev/null || die "sha256sum (coreutils) is needed and not found"
	mkdir -p "$plugin_dir" "$conf_dir"

	tmp=$(mktemp -d)
	# The binary is staged in a directory inside the plugin dir, so that the
	# final mv is an atomic rename on the same file system. containerd skips
	# directories when it scans the plugin dir, so it never sees the staged
	# file, nor a half-written executable under the final name; a running
	# plugin keeps its (replaced) executable.
	stage=$(mktemp -d "$plugin_dir/.$NAME.install.XXXXXX")
	trap 'rm -rf "$tmp" "$stage"' EXIT
	trap 'exit 1' HUP INT TERM
	new=$stage/$NAME
	cp "$BINARY" "$new"
	chmod 0755 "$new"
	is_housekeeper "$new" || die "the staged copy $new of BINARY=$BINARY does not run; nothing was installed"
	new_version=$(version_of "$new")

	# Everything is decided and checked with the NEW binary before anything
	# is replaced: a config the new version rejects would make the plugin
	# fail containerd's Configure after containerd's next restart.
	config_text "$new" >"$tmp/conf" || die "\`$new config example\` failed; nothing was installed"
	chmod 0644 "$tmp/conf"
	if ! out=$("$new" config check "$tmp/conf" 2>&1); then
		printf '%s\n' "$out" >&2
		die "the new version ($new_version) rejects its own example config; nothing was installed"
	fi
	# action: new (no config), same (already the shipped one), replace (an
	# unedited config of an earlier version), keep (edited: kept, and the new
	# one written as .example).
	if [ -L "$conf" ]; then
		action=keep # a symlink is the administrator's
	elif [ ! -e "$conf" ]; then
		action=new
	elif cmp -s "$tmp/conf" "$conf"; then
		action=same
	elif is_shipped "$conf" "$bin" "$new"; then
		action=replace
	else
		action=keep
	fi
	if [ "$action" = keep ] && ! out=$("$new" config check "$conf" 2>&1); then
		printf '%s\n' "$out" >&2
		old="no nri-housekeeper at $bin"
		if is_housekeeper "$bin"; then
			old="$bin ($(version_of "$bin")) is still installed"
		fi
		die "not upgrading: the new version ($new_version) rejects your edited config $conf (above: the key and line).
  Nothing was changed: $old, and $conf is as it was.
  Fix $conf for the new version (the new documented example: $BINARY config example),
  check it with:  $BINARY config check $conf
  then install again."
	fi
	if [ "$action" = keep ]; then
		# Accepted, but what it warns of (a log target this node lacks)
		# would stop the plugin containerd launches: said, not hidden.
		printf '%s\n' "$out" | grep '^warning: ' | sed "s|^warning: |warning: $conf: |" >&2 || true
	fi

	# An unedited .example left by an earlier upgrade is obsolete once the
	# config itself is the shipped one.
	obsolete=
	if [ "$action" != keep ] && [ -f "$conf.example" ] && [ ! -L "$conf.example" ] &&
		is_shipped "$conf.example" "$bin" "$new"; then
		obsolete=1
	fi

	mv -f "$new" "$bin"
	rmdir "$stage"
	say "installed $bin (0755): $("$bin" version)"

	case $action in
	new)
		cp "$tmp/conf" "$conf.tmp"
		mv -f "$conf.tmp" "$conf"
		say "installed $conf (0644)"
		;;
	same)
		say "config $conf is already the shipped one"
		;;
	replace)
		cp "$tmp/conf" "$conf.tmp"
		mv -f "$conf.tmp" "$conf"
		say "replaced $conf (unedited) with the new version's (0644)"
		;;
	keep)
		cp "$tmp/conf" "$conf.example.tmp"
		mv -f "$conf.example.tmp" "$conf.example"
		say "kept existing config $conf (new example at $conf.example)"
		;;
	esac
	if [ -n "$obsolete" ]; then
		rm -f "$conf.example"
		say "removed $conf.example (obsolete: $conf is the shipped config)"
	fi
	if ! out=$("$bin" config check "$conf" 2>&1); then
		printf '%s\n' "$out" >&2
		die "$conf is not a valid configuration: the plugin would refuse to register and containerd would run without it. Fix it, then check with: $bin config check $conf"
	fi
	say "config check: $out"
	scan_plugin_dir

	cat <<EOF

Next steps:
  * NRI must be enabled in containerd:
      containerd config dump | grep -A8 'io.containerd.nri.v1.nri'
    should show disable = false, plugin_path = '$PLUGIN_DIR' and
    plugin_config_path = '$CONF_DIR'. containerd 2.x enables NRI by default;
    containerd 1.7 does not: set disable = false under
    [plugins."io.containerd.nri.v1.nri"] in /etc/containerd/config.toml.
  * containerd launches pre-registered plugins only when it starts: restart it
    (systemctl restart containerd; running containers keep running).
  * Logs: journalctl -t nri-housekeeper (containerd discards the plugin's
    stdout/stderr; see the header of $CONF_DIR/$NAME.conf).
  * Run either this pre-registered plugin or the nri-housekeeper systemd
    service / DaemonSet on a node, not both.
EOF
}

do_uninstall() {
	command -v sha256sum >/dev/null || die "sha256sum (coreutils) is needed and not found"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 1' HUP INT TERM
	# A config is removed when it is unedited: its checksum line matches (it
	# says what was shipped, whichever version installed it); a config from
	# before checksum lines is compared with the text the installed binary
	# (the one it was installed with) or BINARY would have had. So this is
	# decided before the binary goes.
	unedited_conf=
	unedited_example=
	if [ -f "$conf" ] && [ ! -L "$conf" ] && is_shipped "$conf" "$bin" "$BINARY"; then
		unedited_conf=1
	fi
	if [ -f "$conf.example" ] && [ ! -L "$conf.example" ] && is_shipped "$conf.example" "$bin" "$BINARY"; then
		unedited_example=1
	fi

	if [ -e "$bin" ] || [ -L "$bin" ]; then
		if [ "$FORCE" != 1 ] && ! is_housekeeper "$bin"; then
			die "$bin is not nri-housekeeper (another plugin?); not removing it (FORCE=1 removes it)"
		fi
		rm -f "$bin"
		say "removed $bin"
		say "  (a copy containerd already launched runs until containerd restarts)"
	else
		say "no $bin to remove"
	fi
	if [ -n "$unedited_conf" ]; then
		rm -f "$conf"
		say "removed $conf"
	elif [ -e "$conf" ] || [ -L "$conf" ]; then
		say "kept $conf: it differs from the shipped config (your changes); remove it yourself when no longer needed"
	fi
	if [ -n "$unedited_example" ]; then
		rm -f "$conf.example"
		say "removed $conf.example"
	elif [ -e "$conf.example" ] || [ -L "$conf.example" ]; then
		say "kept $conf.example: it differs from the shipped example"
	fi
}

case $cmd in
install) do_install ;;
uninstall) do_uninstall ;;
config)
	is_housekeeper "$BINARY" || die "BINARY=$BINARY does not run as nri-housekeeper"
	config_text "$BINARY"
	;;
esac
