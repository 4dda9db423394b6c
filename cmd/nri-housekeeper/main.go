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
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/plugin"
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
  nri-housekeeper once [--config FILE] [--leak-grace D]
                                          one housekeeping pass, executed (honours dry_run);
                                          its budgeted steps count in the state file's hour,
                                          and beside a running plugin it takes none
  nri-housekeeper config check FILE       validate a configuration file
  nri-housekeeper config example          print the documented example configuration
  nri-housekeeper version                 print version information
  nri-housekeeper help                    show this text

Modes:
  external        started by systemd or a DaemonSet; connects to nri.socket
                  (default /var/run/nri/nri.sock), reconnects with backoff when
                  containerd restarts. Configuration: --config FILE (TOML).
  pre-registered  installed as /opt/nri/plugins/NN-nri-housekeeper; containerd
                  starts it with the connection on fd 3 and passes the contents
                  of /etc/nri/conf.d/NN-nri-housekeeper.conf as its
                  configuration. stdout/stderr are discarded in this mode: with
                  log.target = "auto" logs go to journald, else to log.file
                  (default /var/log/nri-housekeeper.log). Exits when containerd
                  goes away; containerd starts it again.

Configuration keys, defaults and meaning: 'nri-housekeeper config example'.
Logs go to journald when its socket exists (journalctl -t nri-housekeeper),
else to stderr; see log.target.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runPlugin(args, stderr)
	case "report", "once":
		return oneShot(cmd, args, stdout, stderr)
	case "config":
		return configCommand(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "nri-housekeeper: unknown command %q\n\n%s", cmd, usage)
	return 2
}

func configCommand(args []string, stdout, stderr io.Writer) int {
	switch {
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
				fmt.Fprintln(stderr, err)
			}
			return 1
		}
		for _, n := range cfg.Notices { // deprecated keys: still valid
			fmt.Fprintln(stderr, "warning: "+n)
		}
		fmt.Fprintf(stdout, "%s: OK\n", args[1])
		return 0
	}
	fmt.Fprint(stderr, "usage: nri-housekeeper config check FILE | nri-housekeeper config example\n")
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
func runPlugin(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML configuration file (external mode); built-in defaults when empty")
	fs.Usage = func() { fmt.Fprint(stderr, usage, "\nFlags of run:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nri-housekeeper run: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

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
	return serve(ctx, cfg, source, stderr)
}
