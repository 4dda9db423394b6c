// Command nri-housekeeper is a containerd NRI plugin that keeps a Kubernetes
// node free of leaked pod state. See `nri-housekeeper --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/plugin"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

const usage = `nri-housekeeper - a containerd NRI plugin that reclaims leaked pod state

When kubelet's pod worker gets stuck (kubernetes#107730), NotReady sandboxes,
dead containers, pod log dirs and pod cgroups can leak for months; when a
sandbox's teardown never reaches CNI DEL, its IP stays reserved until the
range is full. This plugin follows every pod through containerd's NRI events,
checks its picture against a fresh CRI listing every housekeeping period, and
reclaims what kubelet and the network left behind - CNI attachments, IP
reservations and network namespaces included ([network]) - with kubelet's
rules, stricter safety, and a reason for every action.

Usage:
  nri-housekeeper [run] [--config FILE]   run the plugin (the default command)
  nri-housekeeper report [--json] [--config FILE] [--leak-grace D]
                                          one fresh listing and plan, printed: what is
                                          leaked, what would be done, why the rest is kept
  nri-housekeeper once [--dry-run] [--config FILE] [--leak-grace D]
                                          one housekeeping pass, executed (honours dry_run);
                                          its budgeted steps count in the state file's hour,
                                          and beside a running plugin it takes none
  nri-housekeeper config check FILE       validate a configuration file
  nri-housekeeper config example          print the documented example configuration
  nri-housekeeper version                 print version information
  nri-housekeeper help [COMMAND]          show this text, or a command's help
                                          (also: nri-housekeeper COMMAND --help)

Modes:
  external        started by systemd or a DaemonSet; connects to nri.socket
                  (default /var/run/nri/nri.sock), reconnects with backoff when
                  containerd restarts. Configuration: --config FILE (TOML).
  pre-registered  installed as /opt/nri/plugins/NN-nri-housekeeper; containerd
                  starts it with the connection on fd 3 and passes the contents
                  of /etc/nri/conf.d/NN-nri-housekeeper.conf as its
                  configuration; it registers with the file's name and index
                  (nri.plugin_name and nri.plugin_index are not used).
                  stdout/stderr are discarded in this mode: with log.target =
                  "auto" logs go to journald, else (and with "stderr") to
                  log.file (default /var/log/nri-housekeeper.log). Exits when
                  containerd goes away; containerd starts it again.

Signals:
  SIGTERM, SIGINT and SIGHUP stop run, report and once gracefully: the pass
  in progress is cut short at its next safe point and the state file is
  written (report and once --dry-run never write it; run with dry_run =
  true does); run then exits 0, report and once exit 1 when it cut their
  pass short. SIGHUP does not reload the
  configuration, which is read only at start: restart the plugin to apply
  a change. A second signal while it stops exits at once with status 1,
  without waiting for the pass to end (a read of a hung volume can hold
  it) and without writing the state file; the budgeted steps were written
  to it before they ran.

Exit status of run: 0 stopped by a signal, or (pre-registered) containerd
closed the connection it passed (said in the log: containerd may have
dropped the plugin); 1 that connection failed before the plugin registered
over it; 2 the configuration, the log
target or the metrics address cannot be used (the message names which).

Configuration keys, defaults and meaning: 'nri-housekeeper config example'.
Logs go to journald when its socket exists (journalctl -t nri-housekeeper),
else to stderr; see log.target.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version"):
		cmd, args = "version", nil // what users try first
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runPlugin(args, stdout, stderr)
	case "report", "once":
		return oneShot(cmd, args, stdout, stderr)
	case "config":
		return configCommand(args, stdout, stderr)
	case "version":
		if code, done := noArguments(cmd, args, stdout, stderr); done {
			return code
		}
		fmt.Fprintln(stdout, versionString())
		return 0
	case "help":
		switch {
		case len(args) == 0, len(args) == 1 && args[0] == "help":
			fmt.Fprint(stdout, usage)
			return 0
		case len(args) == 1 && commandHelp[args[0]] != "":
			return run([]string{args[0], "--help"}, stdout, stderr) // the same text, with the command's flags
		case len(args) == 2 && args[0] == "config" && (args[1] == "check" || args[1] == "example"):
			fmt.Fprint(stdout, configHelp)
			return 0
		}
		fmt.Fprintf(stderr, "nri-housekeeper help: no help for %q; commands: run, report, once, config, version\n", strings.Join(args, " "))
		return 2
	}
	fmt.Fprintf(stderr, "nri-housekeeper: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// commandHelp is each command's own help ('nri-housekeeper CMD --help',
// 'nri-housekeeper help CMD'); a command with flags has them printed after.
var commandHelp = map[string]string{
	"run":     usage,
	"report":  reportHelp,
	"once":    onceHelp,
	"config":  configHelp,
	"version": "Usage: nri-housekeeper version\n\nPrints the version of nri-housekeeper, of Go, and of the NRI and CRI API modules it was built with.\n",
}

const reportHelp = `Usage: nri-housekeeper report [--json] [--config FILE] [--leak-grace D]

One fresh CRI listing and plan, printed: what is leaked, what would be done,
and why the rest is kept. It changes nothing on the node and never writes the
state file. It needs no running plugin: it reads containerd (runtime.endpoint),
kubelet's pod dirs, the pod cgroups and the network's files itself, with the
configuration given (built-in defaults without --config).

There are no grace clocks between runs, so leak_grace counts from now: with
the default grace every leak shows as waiting for it; --leak-grace 0s shows
every leak as due.

Exit status: 0 printed; 1 the listing (containerd not running, or
runtime.endpoint not its socket: the message names it) or the printing
failed, or a signal (SIGTERM, SIGINT, SIGHUP) stopped it, gracefully or, at
a second signal, at once; 2 a bad flag, argument or configuration.

Flags:
`

const onceHelp = `Usage: nri-housekeeper once [--dry-run] [--config FILE] [--leak-grace D]

One housekeeping pass, executed: the same listing and plan as 'report', then
every step that is due is taken, each checked again right before it runs.
It acts for real unless --dry-run is given or the configuration sets
dry_run = true (the built-in default is false): run 'report' first. Its
budgeted steps count in the state file's hour (it takes the file's lock);
beside a running plugin, which holds the lock, it takes no budgeted step and
says why; a dry run only reads the file. Logs and one line per step
go to stderr (when stderr is discarded, as by 2>/dev/null, to log.file or
/var/log/nri-housekeeper.log, so that what it does is not lost), the report
to stdout.

There are no grace clocks between runs, so leak_grace counts from now: with
the default grace nothing is due yet; --leak-grace 0s acts on the listing as
it is, including a pod kubelet is starting at that instant (its cgroup is made
a moment before its pod dir, and looks gone meanwhile): use it on a node whose
kubelet is stopped or stuck, after a 'report'.

Exit status: 0 every step taken succeeded (or none was due) and every kind
of leak was looked for; 1 the listing failed (containerd not running, or
runtime.endpoint not its socket), a step failed, the pass could not act at
all (the reason on stderr, such as kubelet's pods dir not found), some leaks
were not looked for (the rest was done; the report's "NOT LOOKED FOR" and
stderr say which and why, such as pod cgroups that cannot be listed), or a
signal (SIGTERM,
SIGINT, SIGHUP) stopped it before it ended, gracefully or, at a second
signal, at once (see 'nri-housekeeper help', Signals); 2 a bad flag,
argument or configuration.

Flags:
`

const configHelp = `Usage:
  nri-housekeeper config check FILE   validate a configuration file: every problem
                                      with its line and key (exit 1); deprecated
                                      keys, and a log target this machine lacks (a
                                      log.file whose directory is missing or that
                                      is not a regular file, no journald socket
                                      for "journald") as warnings; "FILE: OK" (exit 0)
  nri-housekeeper config example      print the documented example configuration:
                                      every key, its default and what it does
`

// noArguments ends a command that takes neither flags nor arguments: with
// its help (exit 0) when asked for, with an error (exit 2) for anything
// else.
func noArguments(cmd string, args []string, stdout, stderr io.Writer) (code int, done bool) {
	switch {
	case len(args) == 0:
		return 0, false
	case len(args) == 1 && isHelpFlag(args[0]):
		fmt.Fprint(stdout, commandHelp[cmd])
		return 0, true
	}
	extra := args[0]
	if isHelpFlag(extra) {
		extra = args[1] // "--help" itself is fine; what follows it is not
	}
	fmt.Fprintf(stderr, "nri-housekeeper %s: unexpected argument %q; see 'nri-housekeeper %s --help'\n", cmd, extra, cmd)
	return 2, true
}

func isHelpFlag(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// parseFlags parses a command's flags. Help asked for (-h, --help) is
// printed to stdout with the flags and ends the command (exit 0); a bad
// flag or any argument left after the flags is said on stderr and ends it
// (exit 2): these commands take no arguments, and one is most likely a
// configuration file given without --config, which must not be run with
// the built-in defaults instead.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	// Go's flag package says its errors with one dash ("-config"); they are
	// said here as help spells the flags.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if len(args) == 1 && args[0] == "help" {
		args = []string{"--help"} // as config and version take it
	}
	fs.VisitAll(func(f *flag.Flag) { f.Value = &strictValue{Value: f.Value, name: f.Name} })
	err := fs.Parse(args)
	fs.VisitAll(func(f *flag.Flag) { f.Value = f.Value.(*strictValue).Value }) // help names the types
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, commandHelp[fs.Name()])
		if fs.Name() == "run" {
			fmt.Fprint(stdout, "\nFlags of run:\n")
		}
		printFlags(stdout, fs)
		return 0, true
	case err != nil:
		msg := strings.NewReplacer(": -", ": --", "flag -", "flag --").Replace(err.Error())
		fmt.Fprintf(stderr, "nri-housekeeper %s: %s\nsee 'nri-housekeeper %s --help'\n", fs.Name(), msg, fs.Name())
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "nri-housekeeper %s: unexpected argument %q: %s takes flags only (a configuration file is given "+
			"with --config FILE); see 'nri-housekeeper %s --help'\n", fs.Name(), fs.Arg(0), fs.Name(), fs.Name())
		return 2, true
	}
	return 0, false
}

// printFlags lists fs's flags as help and the README spell them:
// "--config FILE".
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s\n", f.Name, arg, usage)
	})
}

// strictValue refuses what Go's flag package takes without a word: a flag
// given twice (the last one would win: "--config a --config b" runs b) and
// an empty value ("--config $UNSET" would run the built-in defaults, which
// for once act for real; "--leak-grace=" would keep the configured grace).
type strictValue struct {
	flag.Value
	name string
	set  bool
}

func (v *strictValue) Set(s string) error {
	if v.set {
		return fmt.Errorf("given twice: give --%s once", v.name)
	}
	v.set = true
	if s == "" && !v.IsBoolFlag() {
		return fmt.Errorf("empty: give a value, or leave --%s out for its default", v.name)
	}
	return v.Value.Set(s)
}

func (v *strictValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// isDir reports whether path is a directory (following symlinks).
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func configCommand(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && isHelpFlag(args[0]),
		len(args) == 2 && (args[0] == "check" || args[0] == "example") && isHelpFlag(args[1]):
		fmt.Fprint(stdout, configHelp)
		return 0
	case len(args) == 1 && args[0] == "example":
		fmt.Fprint(stdout, config.Example())
		return 0
	case len(args) == 2 && args[0] == "check":
		cfg, err := config.Load(args[1])
		if err != nil {
			if problems := config.Problems(err); len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintln(stderr, p)
				}
				fmt.Fprintf(stderr, "%s: %d problem(s); see 'nri-housekeeper config example' for every key\n", args[1], len(problems))
			} else {
				fmt.Fprintf(stderr, "nri-housekeeper config check: %v\n", err)
			}
			return 1
		}
		for _, n := range cfg.Notices { // deprecated keys: still valid
			fmt.Fprintln(stderr, "warning: "+n)
		}
		// The text is valid; a log file run cannot open here is said, not
		// failed: the file may be checked away from the node it is for.
		if cfg.Log.Target == config.TargetFile {
			if dir := filepath.Dir(cfg.Log.File); !isDir(dir) {
				fmt.Fprintf(stderr, "warning: log.file %s: its directory %s does not exist here: run would exit 2 on this machine (create it, or mind it on the node this file is for)\n",
					cfg.Log.File, dir)
			} else if fi, err := os.Stat(cfg.Log.File); err == nil && !fi.Mode().IsRegular() {
				fmt.Fprintf(stderr, "warning: log.file %s: it is %s here, not a regular file: run would exit 2 on this machine (name a file, which is created if missing)\n",
					cfg.Log.File, regularfile.TypeName(fi.Mode()))
			}
		}
		if cfg.Log.Target == config.TargetJournald {
			if err := logging.ProbeJournal(""); err != nil {
				fmt.Fprintf(stderr, "warning: log.target = %q: journald socket %s: %v here: run would exit 2 on this machine (use log.target = \"auto\", which falls back when journald is absent, or mind it on the node this file is for)\n",
					cfg.Log.Target, logging.DefaultJournalSocket, err)
			}
		}
		fmt.Fprintf(stdout, "%s: OK\n", args[1])
		return 0
	}
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, "nri-housekeeper config: say what to do, check FILE or example\n\n")
	case args[0] == "check":
		fmt.Fprintf(stderr, "nri-housekeeper config check: takes one FILE, got %d argument(s)\n\n", len(args)-1)
	case args[0] == "example":
		fmt.Fprintf(stderr, "nri-housekeeper config example: takes no argument, got %q\n\n", args[1])
	default:
		fmt.Fprintf(stderr, "nri-housekeeper config: unknown subcommand %q\n\n", args[0])
	}
	fmt.Fprint(stderr, configHelp)
	return 2
}

func versionString() string {
	return fmt.Sprintf("nri-housekeeper %s (%s, github.com/containerd/nri %s, k8s.io/cri-api %s)",
		version, runtime.Version(), moduleVersion("github.com/containerd/nri"), moduleVersion("k8s.io/cri-api"))
}

// moduleVersion is the version of a dependency compiled in, or "unknown".
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}

// runPlugin is the `run` command.
func runPlugin(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	configPath := fs.String("config", "", "the TOML configuration `FILE` (external mode); built-in defaults when not given")
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	cfg, source := config.Default(), "built-in defaults"
	if *configPath != "" {
		if plugin.PreRegistered() {
			fmt.Fprintln(stderr, "nri-housekeeper: --config is ignored when containerd launches the plugin; it uses the text containerd passes")
		} else {
			c, err := config.Load(*configPath)
			if err != nil {
				fmt.Fprintf(stderr, "nri-housekeeper: %v\n", err)
				return 2
			}
			cfg, source = c, *configPath
		}
	}
	return serve(context.Background(), cfg, source, stderr, os.Exit)
}
