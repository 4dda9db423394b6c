package config

import (
	"net"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// validate records every semantic problem of c.
//
// Durations: period and rpc_timeout must be at least a second (MinPeriod,
// MinRPCTimeout): a shorter period is a typo that makes the plugin list the
// node dozens of times a second, a shorter timeout fails calls a busy
// containerd answers a moment later. leak_grace must be at least
// the period: shorter, an object would be acted on the first time a pass
// sees it (a one-off pass overrides it with once --leak-grace, which is not
// validated here). The others may be zero: startup_delay 0 = no delay beyond
// the sources being ready, slow_pass_warning 0 = never warn, min_age 0 = no
// minimum age, stop_timeout 0 = kill at once. None may be negative.
//
// A rule between two keys is checked only when each key is valid on its own,
// so that a key gets one problem.
func validate(p *problems, c Config) {
	h := c.Housekeeping
	atLeastDuration(p, "housekeeping.period", h.Period, MinPeriod,
		"every pass lists every pod and reads the node's pod dirs and cgroups: a typo such as \"30ms\" for \"30s\" would do that dozens of times a second; use e.g. \"30s\"")
	if h.Period > MaxPeriod {
		p.add("housekeeping.period", "must be at most %s, got %q: every leak would wait a period or more before it is even proposed (a typo such as \"30h\" for \"30s\"?); use e.g. \"30s\"",
			MaxPeriod, h.Period.String())
	}
	nonNegative(p, "housekeeping.startup_delay", h.StartupDelay)
	nonNegative(p, "housekeeping.leak_grace", h.LeakGrace)
	if h.Period >= MinPeriod && h.LeakGrace >= 0 && h.LeakGrace < h.Period && !p.has("housekeeping.period") && !p.has("housekeeping.leak_grace") {
		p.add("housekeeping.leak_grace", "must be at least housekeeping.period (%s), got %q: an object would be acted on the first time a pass sees it, "+
			"before kubelet had a chance (a new pod's cgroup exists before its pod dir); for a one-off pass on purpose use 'nri-housekeeper once --leak-grace 0s'",
			h.Period, h.LeakGrace.String())
	}
	nonNegative(p, "housekeeping.slow_pass_warning", h.SlowPassWarning)
	atLeast(p, "housekeeping.max_parallel", h.MaxParallel, 1)
	if h.MaxParallel > MaxParallel {
		p.add("housekeeping.max_parallel", "must be at most %d, got %d: more calls in flight only queue inside containerd "+
			"(its metadata database has a single writer, busy all the time from 8 in flight on), beside the live pods' own calls; the default is 4",
			MaxParallel, h.MaxParallel)
	}
	if h.StateFile != "" {
		filePath(p, "housekeeping.state_file", h.StateFile, "state.json")
	}

	absPath(p, "nri.socket", c.NRI.Socket)
	switch name := c.NRI.PluginName; {
	case name == "":
		p.add("nri.plugin_name", "must not be empty")
	case !pluginName.MatchString(name):
		p.add("nri.plugin_name", "invalid plugin name %s (use only letters, digits and _ . + -)", quote(name))
	}
	if idx := c.NRI.PluginIndex; len(idx) != 2 || !isDigit(idx[0]) || !isDigit(idx[1]) {
		p.add("nri.plugin_index", "invalid plugin index %s (expected two decimal digits, \"00\" to \"99\")", quote(idx))
	}

	switch ep := c.Runtime.Endpoint; {
	case !strings.HasPrefix(ep, UnixScheme) || !filepath.IsAbs(ep[len(UnixScheme):]) || strings.ContainsRune(ep, 0):
		p.add("runtime.endpoint", "invalid endpoint %s (expected \"unix://\" followed by an absolute path, such as \"unix:///run/containerd/containerd.sock\")", quote(ep))
	case filepath.Clean(ep[len(UnixScheme):]) == "/":
		p.add("runtime.endpoint", "invalid endpoint %s: / is a directory, not containerd's socket (such as \"unix:///run/containerd/containerd.sock\")", quote(ep))
	case strings.ContainsAny(ep, "?#%"):
		// gRPC reads the endpoint as a URL: the socket it dials would
		// end before a ? or #, or have a %XX decoded, another path than
		// the one written.
		p.add("runtime.endpoint", "invalid endpoint %s: gRPC reads it as a URL (a ? or # starts its query or fragment, a %% starts an escape), and would dial another path; "+
			"give the socket's path alone, such as \"unix:///run/containerd/containerd.sock\"", quote(ep))
	case filepath.Clean(ep[len(UnixScheme):]) != ep[len(UnixScheme):]:
		// A trailing / makes the dial fail with "not a directory", a
		// message about another problem than the one written.
		p.add("runtime.endpoint", "must be a clean path (no trailing /, no // and no . or .. elements), such as %s; got %s",
			quote(UnixScheme+filepath.Clean(ep[len(UnixScheme):])), quote(ep))
	}
	if ns := c.Runtime.Namespace; len(ns) > 76 || !namespace.MatchString(ns) {
		p.add("runtime.namespace", "invalid namespace %s (expected a containerd namespace such as \"k8s.io\": letters and digits separated by single . _ or -, at most 76 characters)", quote(ns))
	}
	atLeastDuration(p, "runtime.rpc_timeout", c.Runtime.RPCTimeout, MinRPCTimeout,
		"a busy containerd takes longer than that to answer, and every pass would fail; use e.g. \"10s\"")
	if c.Runtime.RPCTimeout > MaxRPCTimeout {
		p.add("runtime.rpc_timeout", "must be at most %s, got %q: a containerd that hangs would hold every pass that long (a typo such as \"10h\" for \"10s\"?); "+
			"kubelet's own runtime-request-timeout is 2m; use e.g. \"10s\"", MaxRPCTimeout, c.Runtime.RPCTimeout.String())
	}

	oneOf(p, "pods.source", c.Pods.Source, PodsSourceKubeletDir, PodsSourceNone)
	// Pod dirs are removed below it (<kubelet_root>/pods/<uid>).
	removalRoot(p, "pods.kubelet_root", c.Pods.KubeletRoot)

	nonNegative(p, "containers.min_age", c.Containers.MinAge)
	atLeast(p, "containers.max_per_pod_container", c.Containers.MaxPerPodContainer, -1)
	atLeast(p, "containers.max_containers", c.Containers.MaxContainers, -1)

	o := c.Orphans
	oneOf(p, "orphans.action", o.Action, OrphansActionReport, OrphansActionStop)
	nonNegative(p, "orphans.stop_timeout", o.StopTimeout)
	if o.StopTimeout > MaxStopTimeout {
		p.add("orphans.stop_timeout", "must be at most %s, got %q: the pass waits for each stop, and every other step of the node waits behind it; "+
			"kubelet's default grace is 30s", MaxStopTimeout, o.StopTimeout.String())
	}

	b := c.Budget
	atLeast(p, "budget.max_per_pass", b.MaxPerPass, 0)
	if !(b.MaxFraction >= 0 && b.MaxFraction <= 1) { // also rejects NaN
		p.add("budget.max_fraction", "must be between 0 and 1, got %s", strconv.FormatFloat(b.MaxFraction, 'g', -1, 64))
	}
	atLeast(p, "budget.min_per_pass", b.MinPerPass, 0)
	if b.MinPerPass >= 0 && b.MaxPerPass >= 0 && b.MinPerPass > b.MaxPerPass && !p.has("budget.min_per_pass") && !p.has("budget.max_per_pass") {
		p.add("budget.min_per_pass", "must be at most %s (%d), got %d: the floor of what a pass may do of one class cannot exceed its cap "+
			"(setting both to 0 disables every budgeted step)", p.name("budget.max_per_pass"), b.MaxPerPass, b.MinPerPass)
	}
	atLeast(p, "budget.max_per_hour", b.MaxPerHour, 0)

	removalRoot(p, "logs.pod_logs_dir", c.Logs.PodLogsDir)
	removalRoot(p, "logs.container_logs_dir", c.Logs.ContainerLogsDir)

	oneOf(p, "cgroups.driver", c.Cgroups.Driver, DriverCgroupfs, DriverSystemd, DriverAuto)
	// The rules below that only say what a pass would fail at are for a
	// config whose cgroups side is on: a disabled side reads none of it.
	on := c.Cgroups.Enabled
	if absPath(p, "cgroups.mountpoint", c.Cgroups.Mountpoint); on && filepath.IsAbs(c.Cgroups.Mountpoint) && filepath.Clean(c.Cgroups.Mountpoint) != c.Cgroups.Mountpoint {
		p.add("cgroups.mountpoint", "must be a clean path (no trailing /, no . or .. elements), such as %s; got %s", quote(filepath.Clean(c.Cgroups.Mountpoint)), quote(c.Cgroups.Mountpoint))
	}
	if root := c.Cgroups.Root; !cgroupRoot(root) {
		p.add("cgroups.root", "invalid cgroup root %s (expected a path relative to cgroups.mountpoint, such as \"kubepods\", without . or .. elements)", quote(root))
	} else if on && c.Cgroups.Driver == DriverAuto && strings.HasSuffix(path.Base(root), ".slice") {
		// The root itself named as a slice: what a systemd-driver root
		// looks like on disk, and auto looks for <root>.slice. (A cgroupfs
		// root inside a slice, system.slice/kubepods, is fine.)
		p.add("cgroups.root", "give the root's names without \".slice\" (\"kubepods\", not \"kubepods.slice\"): with cgroups.driver = \"auto\" the systemd driver is detected from <root>.slice, "+
			"and a root named with .slice is only ever looked for with cgroupfs names (if kubelet's cgroupfs root really is a dir named .slice, set cgroups.driver = \"cgroupfs\"); got %s", quote(root))
	} else if on && c.Cgroups.Driver == DriverSystemd {
		// The systemd driver names the root's slices as kubelet's does
		// (podcgroups.systemdComponents): said here, not at the first pass.
		for _, part := range strings.Split(root, "/") {
			switch {
			case strings.HasSuffix(part, ".slice"):
				p.add("cgroups.root", "with cgroups.driver = \"systemd\", give the root's names without \".slice\" (\"kubepods\", not \"kubepods.slice\"): "+
					"the systemd driver adds it, as kubelet's does; got %s", quote(root))
			case strings.Contains(part, "_"):
				p.add("cgroups.root", "with cgroups.driver = \"systemd\", %s cannot be named: %q contains '_' (kubelet's systemd driver refuses it too)", quote(root), part)
			}
		}
	}

	absPath(p, "network.cache_dir", c.Network.CacheDir)
	absPath(p, "network.conf_dir", c.Network.ConfDir)
	absPath(p, "network.bin_dir", c.Network.BinDir)
	if c.Network.NetnsDir != "" {
		absPath(p, "network.netns_dir", c.Network.NetnsDir)
	}
	if c.Network.ExecRoot != "" {
		absPath(p, "network.exec_root", c.Network.ExecRoot)
	}
	nonNegative(p, "network.min_age", c.Network.MinAge)

	if addr := c.Metrics.Address; addr != "" && !hostPort(addr) {
		p.add("metrics.address", "invalid address %s (expected host:port such as \"127.0.0.1:9560\" or \":9560\", or \"\" to disable)", quote(addr))
	}

	oneOf(p, "log.level", c.Log.Level, LevelTrace, LevelDebug, LevelInfo, LevelWarn, LevelWarning, LevelError)
	oneOf(p, "log.target", c.Log.Target, TargetAuto, TargetJournald, TargetStderr, TargetFile)
	switch {
	case c.Log.File != "":
		filePath(p, "log.file", c.Log.File, "nri-housekeeper.log")
	case c.Log.Target == TargetFile:
		// Said at the line that asks for a file: log.file is not in the
		// text.
		line := p.lines[p.name("log.file")]
		if line == 0 {
			line = p.lines[p.name("log.target")]
		}
		p.addAt(line, "log.file", "must be set to an absolute path when log.target is %q", TargetFile)
	}
}

var (
	// pluginName is what containerd's NRI accepts in a plugin name.
	pluginName = regexp.MustCompile(`^[a-zA-Z0-9_.+-]+$`)
	// hostName is a DNS name (RFC 1123 labels), for metrics.address.
	hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
	// namespace is containerd's identifier syntax (pkg/identifiers).
	namespace = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)
)

// MinPeriod and MinRPCTimeout are the least housekeeping.period and
// runtime.rpc_timeout a configuration may set; MaxPeriod, MaxRPCTimeout,
// MaxParallel and MaxStopTimeout the most housekeeping.period,
// runtime.rpc_timeout, housekeeping.max_parallel and orphans.stop_timeout
// may.
const (
	MinPeriod      = time.Second
	MaxPeriod      = 24 * time.Hour
	MinRPCTimeout  = time.Second
	MaxRPCTimeout  = 10 * time.Minute
	MaxParallel    = 64
	MaxStopTimeout = 10 * time.Minute
)

// atLeastDuration: d must be at least least; why says what a smaller one
// would do.
func atLeastDuration(p *problems, key string, d, least time.Duration, why string) {
	if d < least {
		p.add(key, "must be at least %s, got %q: %s", least, d.String(), why)
	}
}

func nonNegative(p *problems, key string, d time.Duration) {
	if d < 0 {
		p.add(key, "must not be negative, got %q", d.String())
	}
}

func atLeast(p *problems, key string, n, least int) {
	if n < least {
		p.add(key, "must be at least %d, got %d", least, n)
	}
}

func oneOf(p *problems, key, v string, allowed ...string) {
	if slices.Contains(allowed, v) {
		return
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	p.add(key, "invalid value %s (expected one of %s)", quote(v), strings.Join(quoted, ", "))
}

func absPath(p *problems, key, path string) {
	if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		hint := ""
		if rest, ok := strings.CutPrefix(path, "unix://"); ok && filepath.IsAbs(rest) {
			hint = ": a path, not an endpoint; drop unix:// (" + quote(rest) + ")"
		}
		p.add(key, "must be an absolute path, got %s%s", quote(path), hint)
	}
}

// filePath: path names a file the plugin writes (and replaces): absolute,
// and not a directory's name (a trailing / or a last element . or ..),
// which the first write would only fail at.
func filePath(p *problems, key, path, example string) {
	switch base := filepath.Base(path); {
	case !filepath.IsAbs(path) || strings.ContainsRune(path, 0):
		p.add(key, "must be an absolute path, got %s", quote(path))
	case strings.HasSuffix(path, "/") || base == "." || base == "..":
		p.add(key, "must name a file, not a directory, got %s (such as %s)", quote(path), quote(filepath.Join(path, example)))
	}
}

// removalRoot: files are removed below path, so it must be an absolute
// path other than / without ".." elements (nodefs.NewRemover refuses
// anything else when the plugin starts).
func removalRoot(p *problems, key, path string) {
	switch {
	case !filepath.IsAbs(path) || strings.ContainsRune(path, 0):
		p.add(key, "must be an absolute path, got %s", quote(path))
	case filepath.Clean(path) == "/":
		p.add(key, "must not be / (files are removed below it), got %s", quote(path))
	case slices.Contains(strings.Split(path, "/"), ".."):
		p.add(key, "must not contain \"..\" elements, got %s", quote(path))
	}
}

// cgroupRoot reports whether root is a non-empty relative path without empty,
// "." or ".." elements.
func cgroupRoot(root string) bool {
	if root == "" || strings.ContainsRune(root, 0) {
		return false
	}
	for part := range strings.SplitSeq(root, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// hostPort reports whether addr is host:port with a decimal port (host may
// be empty: all interfaces; port 0 picks a free port).
func hostPort(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return false
	}
	if _, ipErr := netip.ParseAddr(host); host != "" && ipErr != nil && !hostName.MatchString(host) {
		return false // "not a host" would fail only at the plugin's start, as a DNS error
	}
	for i := range len(port) {
		if !isDigit(port[i]) {
			return false
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n <= 65535
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }
