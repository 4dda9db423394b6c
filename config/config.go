// Package config holds the nri-housekeeper configuration: the TOML schema,
// its defaults and its validation.
//
// The same schema is read from a file (Load, for --config FILE) and from the
// text containerd passes to the plugin's Configure call (Parse). The keys are a
// contract (DESIGN.md §6); example.toml documents every one of them.
//
// Every problem found in a text is reported as an *Error naming the source,
// the line and the full dotted key; all problems of a text are reported at
// once (see Problems).
package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// Values of Pods.Source.
const (
	// PodsSourceKubeletDir: a pod is gone when <kubelet_root>/pods/<uid> is absent.
	PodsSourceKubeletDir = "kubelet-dir"
	// PodsSourceNone: a pod is never considered gone; only the keep-newest rules apply.
	PodsSourceNone = "none"
)

// Values of Orphans.Action.
const (
	OrphansActionReport = "report"
	OrphansActionStop   = "stop"
)

// Values of Cgroups.Driver.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
	DriverAuto     = "auto"
)

// Values of Log.Level. LevelWarning is an alias of LevelWarn.
const (
	LevelTrace   = "trace"
	LevelDebug   = "debug"
	LevelInfo    = "info"
	LevelWarn    = "warn"
	LevelWarning = "warning"
	LevelError   = "error"
)

// Values of Log.Target.
const (
	// TargetAuto: journald when its socket exists, stderr otherwise.
	TargetAuto     = "auto"
	TargetJournald = "journald"
	TargetStderr   = "stderr"
	TargetFile     = "file"
)

// UnixScheme is the prefix of Runtime.Endpoint.
const UnixScheme = "unix://"

// MaxSize is the largest config text Parse and Load accept, in bytes (the
// documented example is about 11 KiB). It bounds the decoding time: go-toml's
// duplicate-key tracking is quadratic in the number of keys of a table.
const MaxSize = 64 << 10

// Config is the whole configuration. Its sections mirror the TOML tables of
// DESIGN.md §6; the TOML key of each field is given in its comment.
type Config struct {
	DryRun       bool         // dry_run
	Housekeeping Housekeeping // [housekeeping]
	NRI          NRI          // [nri]
	Runtime      Runtime      // [runtime]
	Pods         Pods         // [pods]
	Containers   Containers   // [containers]
	Orphans      Orphans      // [orphans]
	Budget       Budget       // [budget]
	Logs         Logs         // [logs]
	Cgroups      Cgroups      // [cgroups]
	PodDirs      PodDirs      // [pod_dirs]
	Network      Network      // [network]
	Metrics      Metrics      // [metrics]
	Log          Log          // [log]

	// Notices are not a key: Parse sets them, one per deprecated key the text
	// uses, as "SOURCE:LINE: MSG" in line order. nil when there are none (and
	// for Default).
	Notices []string
}

// Housekeeping is the [housekeeping] section: the housekeeping loop.
type Housekeeping struct {
	Period          time.Duration // period; > 0
	StartupDelay    time.Duration // startup_delay; >= 0 (0: no extra delay)
	LeakGrace       time.Duration // leak_grace; >= Period (when Period > 0)
	SlowPassWarning time.Duration // slow_pass_warning; >= 0 (0: never warn)
	MaxParallel     int           // max_parallel; >= 1
	// StateFile is state_file; "" or an absolute path: where the plugin
	// keeps, across its restarts, the pods it saw torn down (whose pod dirs
	// only it may call orphaned) and the budgeted steps of the last hour.
	// "" keeps nothing: both start afresh on every restart.
	StateFile string
}

// NRI is the [nri] section: how the plugin registers with containerd.
type NRI struct {
	Socket      string // socket; absolute path (external mode only)
	PluginName  string // plugin_name; [a-zA-Z0-9_.+-]+
	PluginIndex string // plugin_index; two decimal digits
}

// Runtime is the [runtime] section: containerd's CRI and API endpoint.
type Runtime struct {
	Endpoint   string        // endpoint; "unix://" + clean absolute path
	Namespace  string        // namespace; a containerd namespace name
	RPCTimeout time.Duration // rpc_timeout; > 0
}

// Pods is the [pods] section: the oracle deciding whether a pod is gone.
type Pods struct {
	Source      string // source; PodsSourceKubeletDir or PodsSourceNone
	KubeletRoot string // kubelet_root; absolute path
}

// Containers is the [containers] section: dead container garbage collection.
type Containers struct {
	MinAge             time.Duration // min_age; >= 0
	MaxPerPodContainer int           // max_per_pod_container; >= -1 (-1: no limit, as kubelet)
	MaxContainers      int           // max_containers; >= -1 (-1: no node-wide cap)
}

// Orphans is the [orphans] section: live pods whose pod is gone. Orphan
// stops are limited by Budget.
//
// The keys orphans.max_per_pass and orphans.max_fraction (the limits of the
// old breaker, for orphan stops only) are deprecated aliases of
// budget.max_per_pass and budget.max_fraction: Parse still accepts them, sets
// the Budget field with them and records a notice (Config.Notices).
type Orphans struct {
	Action      string        // action; OrphansActionReport or OrphansActionStop
	StopTimeout time.Duration // stop_timeout; >= 0 (0: kill at once)
}

// Budget is the [budget] section: the blast-radius budget. It limits every
// destructive step that can hurt a live workload or user data: orphan stops,
// stops of UNKNOWN containers, kills of pod cgroups with processes in them,
// CPU reductions, pod dir removals and pod log dir removals. Each of these
// classes is counted on its own, with the same limits. A pass may take
//
//	max(MinPerPass, min(MaxPerPass, floor(MaxFraction × Ready sandboxes)))
//
// steps of one class, capped by what is left of MaxPerHour for that class. A
// pass with more orphan stops due than that stops none; of the other classes
// it takes what is allowed and leaves the rest for later passes. A class the
// pass refuses is paused for that pass (an error is logged, it is counted and
// report shows it). MinPerPass = 0 with MaxPerPass = 0 or MaxFraction = 0,
// or MaxPerHour = 0, disables every budgeted step.
type Budget struct {
	MaxPerPass  int     // max_per_pass; >= 0: steps of one class a pass may take at most
	MaxFraction float64 // max_fraction; in [0, 1]: and at most this fraction of the Ready sandboxes (rounded down)
	MinPerPass  int     // min_per_pass; in [0, MaxPerPass]: but always this many (the floor)
	MaxPerHour  int     // max_per_hour; >= 0: steps of one class in any hour
}

// Logs is the [logs] section: kubelet's container log locations.
type Logs struct {
	PodLogsDir       string // pod_logs_dir; absolute path
	ContainerLogsDir string // container_logs_dir; absolute path
}

// Cgroups is the [cgroups] section: pod cgroup cleanup.
type Cgroups struct {
	Enabled    bool   // enabled
	Driver     string // driver; DriverCgroupfs, DriverSystemd or DriverAuto
	Mountpoint string // mountpoint; absolute path
	Root       string // root; path of the kubepods cgroup relative to Mountpoint
}

// PodDirs is the [pod_dirs] section: orphaned kubelet pod directories.
type PodDirs struct {
	RemoveOrphaned bool // remove_orphaned
}

// Network is the [network] section: leaked CNI attachments, host-local IP
// reservations and network namespaces. The networks are the ones containerd
// reports in CRI Status; ConfDir and BinDir are only used when it reports
// none (a containerd without CRI Status info).
type Network struct {
	Enabled  bool   // enabled
	CacheDir string // cache_dir; absolute path: libcni's cache (containerd never sets another)
	ConfDir  string // conf_dir; absolute path: fallback CNI conf dir
	BinDir   string // bin_dir; absolute path: fallback CNI plugin dir
	NetnsDir string // netns_dir; "" (from containerd's config) or an absolute path
	ExecRoot string // exec_root; "" (the plugin's own root) or an absolute path CNI plugins are chrooted into
	// MinAge (min_age): how old a netns, reservation or cache entry must
	// be, by its file's time, before it is reclaimed, whatever leak_grace
	// says (gc.Policy.NetworkMinAge). Not negative.
	MinAge time.Duration
}

// Metrics is the [metrics] section.
type Metrics struct {
	Address string // address; host:port, "" disables the metrics server
}

// Log is the [log] section: the plugin's own logging.
type Log struct {
	Level  string // level; one of the Level* constants
	Target string // target; one of the Target* constants
	File   string // file; absolute path, required when Target is TargetFile
}

// Default returns the defaults of DESIGN.md §6. It is what an empty text
// parses to, and what example.toml spells out.
func Default() Config {
	return Config{
		DryRun: false,
		Housekeeping: Housekeeping{
			Period:          30 * time.Second,
			StartupDelay:    time.Minute,
			LeakGrace:       5 * time.Minute,
			SlowPassWarning: 15 * time.Second,
			MaxParallel:     4,
			StateFile:       "/var/lib/nri-housekeeper/state.json",
		},
		NRI: NRI{
			Socket:      "/var/run/nri/nri.sock",
			PluginName:  "nri-housekeeper",
			PluginIndex: "10",
		},
		Runtime: Runtime{
			Endpoint:   "unix:///run/containerd/containerd.sock",
			Namespace:  "k8s.io",
			RPCTimeout: 10 * time.Second,
		},
		Pods: Pods{
			Source:      PodsSourceKubeletDir,
			KubeletRoot: "/var/lib/kubelet",
		},
		Containers: Containers{
			MinAge:             0,
			MaxPerPodContainer: 1,
			MaxContainers:      -1,
		},
		Orphans: Orphans{
			Action:      OrphansActionReport,
			StopTimeout: 2 * time.Second,
		},
		Budget: Budget{
			MaxPerPass:  3,
			MaxFraction: 0.1,
			MinPerPass:  1,
			MaxPerHour:  20,
		},
		Logs: Logs{
			PodLogsDir:       "/var/log/pods",
			ContainerLogsDir: "/var/log/containers",
		},
		Cgroups: Cgroups{
			Enabled:    true,
			Driver:     DriverAuto,
			Mountpoint: "/sys/fs/cgroup",
			Root:       "kubepods",
		},
		PodDirs: PodDirs{
			RemoveOrphaned: false,
		},
		Network: Network{
			Enabled:  true,
			CacheDir: "/var/lib/cni",
			ConfDir:  "/etc/cni/net.d",
			BinDir:   "/opt/cni/bin",
			NetnsDir: "",
			ExecRoot: "",
			MinAge:   2 * time.Minute,
		},
		Metrics: Metrics{
			Address: "127.0.0.1:9560",
		},
		Log: Log{
			Level:  LevelInfo,
			Target: TargetAuto,
			File:   "",
		},
	}
}

//go:embed example.toml
var example string

// Example returns the documented example configuration (example.toml): every
// key with a comment and its default value. Parse(Example()) yields Default().
func Example() string {
	return example
}

// Parse decodes a TOML text and validates the result. source names where the
// text came from (a file path, "containerd plugin config", ...) and prefixes
// every problem. Keys the text omits keep their Default value.
//
// A runtime.endpoint given as a bare absolute path is normalised to
// "unix://<path>". A deprecated key (see aliases) sets its current key and
// adds a notice to Config.Notices; a text may not set both.
//
// On failure the error joins one *Error per problem (see Problems). A text
// that is not valid TOML (a syntax error, a key or table defined twice) stops
// decoding, so that problem is reported alone; all other problems (unknown
// keys, wrong types, invalid values) are reported together.
func Parse(data []byte, source string) (Config, error) {
	c := Default()
	d := decoder{problems: problems{source: source}}
	if len(data) > MaxSize {
		d.addAt(0, "", "config text is larger than %d bytes", MaxSize)
		return Config{}, d.err()
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a UTF-8 byte order mark, as some editors write
	if !d.decode(data, &c) {
		return Config{}, d.err()
	}
	if len(c.Runtime.Endpoint) > 0 && c.Runtime.Endpoint[0] == '/' {
		c.Runtime.Endpoint = UnixScheme + c.Runtime.Endpoint
	}
	d.keepOldMeaning(&c)
	validate(&d.problems, c)
	if err := d.err(); err != nil {
		return Config{}, err
	}
	d.noteDisabledBudget(&c)
	return c, nil
}

// Load reads the file at path and parses it with the path as source. The
// path must name a regular file (or a symlink to one), or a pipe that a
// writer fills and closes within pipeReadTimeout (`--config <(...)`,
// /dev/stdin, a FIFO): a directory, a socket or a device given by mistake
// is refused unopened, naming what it is (/dev/zero would never end), and a
// pipe no writer fills is an error, not a start blocked for ever.
func Load(path string) (Config, error) {
	return load(path, pipeReadTimeout)
}

// load is Load, with pipes read within pipeTimeout.
func load(path string, pipeTimeout time.Duration) (Config, error) {
	f, _, err := regularfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		if data, isPipe, perr := readPipe(path, pipeTimeout); isPipe {
			if perr != nil {
				return Config{}, fmt.Errorf("reading config file: %w", perr)
			}
			return Parse(data, path)
		}
		return Config{}, fmt.Errorf("reading config file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("reading config file: %w", err)
	}
	return Parse(data, path)
}

// pipeReadTimeout bounds the read of a configuration from a pipe.
const pipeReadTimeout = 10 * time.Second

// readPipe reads the pipe at path, when it is one (isPipe), until its
// writer closes it, within timeout. It is looked at through an
// O_PATH descriptor and opened through that very descriptor only when it
// is a pipe, without waiting for a writer (O_NONBLOCK): a read finds the
// end of a pipe no writer has opened yet at once, so until the first byte
// an end is read again, 20 ms apart, for a writer that opens it late (a
// FIFO). A pipe that gives no text is an error rather than the defaults an
// empty file means.
func readPipe(path string, timeout time.Duration) (data []byte, isPipe bool, err error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, nil
	}
	pathFile := os.NewFile(uintptr(fd), path)
	defer pathFile.Close()
	looked, err := pathFile.Stat()
	if err != nil || looked.Mode().Type() != fs.ModeNamedPipe {
		return nil, false, nil
	}
	pfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("opening the pipe %s: %w", path, err)
	}
	f := os.NewFile(uintptr(pfd), path)
	defer f.Close()
	deadline := time.Now().Add(timeout)
	if err := f.SetReadDeadline(deadline); err != nil {
		return nil, true, fmt.Errorf("%s: %w", path, err)
	}
	var buf bytes.Buffer
	for {
		_, err := buf.ReadFrom(io.LimitReader(f, MaxSize+1-int64(buf.Len())))
		late := errors.Is(err, os.ErrDeadlineExceeded) || err == nil && !time.Now().Before(deadline)
		switch {
		case late && buf.Len() == 0:
			return nil, true, fmt.Errorf("%s is a pipe that gave no configuration text within %s (no writer, or one that wrote nothing): give a regular file, or an empty one for the defaults", path, timeout)
		case late && err != nil:
			return nil, true, fmt.Errorf("%s is a pipe whose writer did not close it within %s: give a regular file", path, timeout)
		case err != nil:
			return nil, true, fmt.Errorf("reading the pipe %s: %w", path, err)
		case buf.Len() > 0:
			return buf.Bytes(), true, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Validate checks the semantic rules of every field (the rules Parse applies
// after decoding). Its problems carry no source and no line. Unlike Parse it
// does not normalise: Runtime.Endpoint must carry the "unix://" scheme.
func (c Config) Validate() error {
	var p problems
	validate(&p, c)
	return p.err()
}
