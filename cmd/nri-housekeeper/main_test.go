package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// TestConfigCheckRejectsBadFilesNamingKeyAndLine runs the command a user
// runs; the config package's own table covers every rule in depth.
func TestConfigCheckRejectsBadFilesNamingKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown key", "[housekeeping]\nperiodd = \"1s\"\n", ":2: housekeeping.periodd: unknown key"},
		{"unknown section", "[gc]\n", ":1: gc: unknown section"},
		{"key in the wrong section", "[nri]\nleak_grace = \"1m\"\n", ":2: nri.leak_grace: unknown key"},
		{"bad duration", "[housekeeping]\nleak_grace = \"five minutes\"\n", ":2: housekeeping.leak_grace: invalid duration"},
		{"duration given as a number", "[runtime]\nrpc_timeout = 10\n", ":2: runtime.rpc_timeout:"},
		{"zero period", "[housekeeping]\nperiod = \"0s\"\n", ":2: housekeeping.period:"},
		{"negative grace", "[housekeeping]\nleak_grace = \"-1m\"\n", ":2: housekeeping.leak_grace:"},
		{"zero max_parallel", "[housekeeping]\nmax_parallel = 0\n", ":2: housekeeping.max_parallel:"},
		{"string count", "[containers]\nmax_per_pod_container = \"1\"\n", ":2: containers.max_per_pod_container:"},
		{"max_containers below -1", "[containers]\nmax_containers = -2\n", ":2: containers.max_containers:"},
		{"fraction above one", "[budget]\nmax_fraction = 1.5\n", ":2: budget.max_fraction:"},
		{"deprecated fraction above one", "[orphans]\nmax_fraction = 1.5\n", ":2: orphans.max_fraction:"},
		{"deprecated and current key", "[budget]\nmax_per_pass = 3\n[orphans]\nmax_per_pass = 3\n", ":4: orphans.max_per_pass: orphans.max_per_pass is a deprecated alias"},
		{"min_per_pass above max_per_pass", "[budget]\nmax_per_pass = 1\nmin_per_pass = 2\n", ":3: budget.min_per_pass: must be at most budget.max_per_pass (1)"},
		{"leak_grace shorter than period", "[housekeeping]\nperiod = \"1m\"\nleak_grace = \"0s\"\n", ":3: housekeeping.leak_grace: must be at least housekeeping.period"},
		{"unknown orphans action", "[orphans]\naction = \"kill\"\n", ":2: orphans.action:"},
		{"unknown pods source", "[pods]\nsource = \"apiserver\"\n", ":2: pods.source:"},
		{"unknown cgroup driver", "[cgroups]\ndriver = \"cgroupv3\"\n", ":2: cgroups.driver:"},
		{"unknown log level", "[log]\nlevel = \"verbose\"\n", ":2: log.level:"},
		{"relative kubelet root", "[pods]\nkubelet_root = \"var/lib/kubelet\"\n", ":2: pods.kubelet_root:"},
		{"tcp endpoint", "[runtime]\nendpoint = \"tcp://127.0.0.1:1\"\n", ":2: runtime.endpoint:"},
		{"bad plugin index", "[nri]\nplugin_index = \"1\"\n", ":2: nri.plugin_index:"},
		{"syntax error", "dry_run = tru\n", ":1: dry_run: a boolean is true or false, lower case"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"config", "check", path}, &stdout, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), path+tc.want) {
				t.Fatalf("stderr does not name %q:\n%s", path+tc.want, stderr.String())
			}
		})
	}
}

func TestConfigCheckAcceptsTheDocumentedExample(t *testing.T) {
	path := filepath.Join(t.TempDir(), "example.toml")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "example"}, &stdout, &stderr); code != 0 {
		t.Fatalf("config example: exit %d", code)
	}
	if stdout.String() != config.Example() {
		t.Fatal("config example does not print the embedded example")
	}
	if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run([]string{"config", "check", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d on the example; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "OK") {
		t.Fatalf("stdout = %q", stdout.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("warnings on the example:\n%s", stderr.String())
	}
}

// TestConfigCheckWarnsOfDeprecatedKeys: a file with deprecated keys is valid
// (exit 0, OK on stdout), and each deprecated key is a warning on stderr.
func TestConfigCheckWarnsOfDeprecatedKeys(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		warnings   []string // each a line of stderr after "warning: PATH"
	}{
		{"no deprecated key", "[budget]\nmax_per_pass = 5\n", nil},
		{"orphans.max_per_pass and orphans.max_fraction", "[orphans]\naction = \"stop\"\nmax_per_pass = 5\nmax_fraction = 0.5\n", []string{
			":3: orphans.max_per_pass is deprecated: use budget.max_per_pass (the budget now limits every class of destructive step, not only orphan stops)",
			":4: orphans.max_fraction is deprecated: use budget.max_fraction (the budget now limits every class of destructive step, not only orphan stops)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"config", "check", path}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
			}
			if want := path + ": OK\n"; stdout.String() != want {
				t.Errorf("stdout = %q, want %q", stdout.String(), want)
			}
			var want string
			for _, w := range tc.warnings {
				want += "warning: " + path + w + "\n"
			}
			if stderr.String() != want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr.String(), want)
			}
		})
	}
}

func TestCommandLineErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"config"},
		{"config", "check"},
		{"run", "--no-such-flag"},
		{"run", "extra-argument"},
		{"report", "--leak-grace", "soon"},
		{"once", "--config", "/nonexistent/nri-housekeeper.toml"},
		{"version", "extra"},
		{"help", "frobnicate"},
		{"help", "config", "frobnicate"},
		{"config", "check", "a.toml", "b.toml"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%q: no message on stderr", args)
		}
	}
}

// TestALogThatCannotBeOpenedEndsRunWithItsErrorNotAPanic: a failed
// logging.New returned no closer, and run's deferred close called it.
func TestALogThatCannotBeOpenedEndsRunWithItsErrorNotAPanic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.toml")
	missing := filepath.Join(dir, "nonexistent", "x.log")
	if err := os.WriteFile(path, []byte("[housekeeping]\nstate_file = \"\"\n[log]\ntarget = \"file\"\nfile = \""+missing+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := -1
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("run panicked: %v; stderr:\n%s", r, stderr.String())
			}
		}()
		code = run([]string{"run", "--config", path}, &stdout, &stderr)
	}()
	if code != 2 || !strings.Contains(stderr.String(), missing) {
		t.Fatalf("exit %d, want 2 with an error naming %s; stderr:\n%s", code, missing, stderr.String())
	}
}

// TestAStrayArgumentIsAnErrorNotTheDefaults: report, once and run take no
// arguments. A configuration file given without --config (or a flag after
// an argument, which Go's flag package stops at) must end the command, not
// run it with the built-in defaults: for once those act for real.
func TestAStrayArgumentIsAnErrorNotTheDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dry.toml")
	// Were it run, it would fail dialling a socket that does not exist, and
	// exit 1 or 2 after trying: the test checks the message, which says
	// what to do, and that nothing was tried.
	if err := os.WriteFile(path, []byte("dry_run = true\n[runtime]\nendpoint = \"unix:///nonexistent/containerd.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// once parses its flags as report does (oneShot); it is left out here
	// because on a regression it would act, with the built-in defaults, on
	// whatever containerd the machine running the test has.
	for _, args := range [][]string{
		{"report", path},
		{"report", "--config", path, "stray", "--json"},
		{"run", path},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, "unexpected argument") || !strings.Contains(msg, "--config FILE") ||
			strings.Contains(msg, "CRI") || strings.Contains(msg, "containerd.sock") {
			t.Errorf("%q: stderr does not say the argument is unexpected and how to give a file, or tried the runtime:\n%s", args, msg)
		}
		if stdout.Len() > 0 {
			t.Errorf("%q: printed %q", args, stdout.String())
		}
	}
}

// TestAFlagGivenTwiceOrEmptyIsAnErrorNotAGuess: Go's flag package lets the
// last of two --config win and takes --config "" as not given; either ran a
// configuration other than the one meant (for once, the built-in defaults
// act for real). Both end the command, naming the flag.
func TestAFlagGivenTwiceOrEmptyIsAnErrorNotAGuess(t *testing.T) {
	dir := t.TempDir()
	dry := filepath.Join(dir, "dry.toml")
	if err := os.WriteFile(dry, []byte("dry_run = true\n[runtime]\nendpoint = \"unix:///nonexistent/containerd.sock\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("no_such_key = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// once is left out for the reason TestAStrayArgumentIsAnErrorNotTheDefaults gives.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report", "--config="}, `flag --config: empty: give a value, or leave --config out for its default`},
		{[]string{"report", "--config", ""}, `flag --config: empty`},
		{[]string{"report", "--config", dry, "--leak-grace="}, `flag --leak-grace: empty`},
		{[]string{"report", "--config", filepath.Join(dir, "other.toml"), "--config", dry}, `flag --config: given twice: give --config once`},
		{[]string{"report", "--config", dry, "--json", "--json"}, `flag json: given twice`},
		// run's cases end in a config it refuses (a run of defaults would
		// not end): on a regression the test fails, it does not hang.
		{[]string{"run", "--config", bad, "--config", bad}, `flag --config: given twice`},
		{[]string{"run", "--config=", "--config", bad}, `flag --config: empty`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", tt.args, code, stderr.String())
		}
		if msg := stderr.String(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "containerd.sock") {
			t.Errorf("%q: stderr does not say %q, or tried the runtime:\n%s", tt.args, tt.want, msg)
		}
	}
}

// TestEveryCommandHasHelp: help asked for, in any of the usual ways, is
// printed to stdout (so that it can be paged and grepped) with exit 0, and
// says what the command does.
func TestEveryCommandHasHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"nri-housekeeper report", "Flags of run:", "-config"}},
		{[]string{"-h"}, []string{"nri-housekeeper once", "Flags of run:"}},
		{[]string{"run", "--help"}, []string{"pre-registered", "Flags of run:"}},
		{[]string{"report", "--help"}, []string{"changes nothing on the node", "Exit status:", "-json", "-leak-grace"}},
		{[]string{"once", "-h"}, []string{"acts for real unless --dry-run is given or the configuration sets\ndry_run = true", "Exit status:", "-leak-grace"}},
		{[]string{"config", "--help"}, []string{"config check FILE", "config example"}},
		{[]string{"config", "help"}, []string{"config check FILE"}},
		{[]string{"config", "check", "--help"}, []string{"config check FILE"}},
		{[]string{"config", "example", "-h"}, []string{"config example"}},
		{[]string{"version", "--help"}, []string{"Usage: nri-housekeeper version"}},
		{[]string{"help", "once"}, []string{"acts for real"}},
		{[]string{"help", "config", "check"}, []string{"config check FILE", "no journald socket"}},
		{[]string{"help", "config", "example"}, []string{"config example"}},
		{[]string{"help"}, []string{"nri-housekeeper report", "help [COMMAND]"}},
		{[]string{"help", "help"}, []string{"nri-housekeeper report", "help [COMMAND]"}},
		{[]string{"report", "help"}, []string{"changes nothing on the node", "-json"}},
		{[]string{"once", "help"}, []string{"acts for real"}},
		{[]string{"run", "help"}, []string{"pre-registered", "Flags of run:"}},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 0 {
			t.Errorf("%q: exit %d, want 0; stderr:\n%s", tc.args, code, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%q: stdout does not contain %q:\n%s", tc.args, w, stdout.String())
			}
		}
		if stderr.Len() > 0 {
			t.Errorf("%q: help on stderr too:\n%s", tc.args, stderr.String())
		}
	}
}

// TestReportSaysDeprecatedKeys: report and once warn of what config check
// warns of, as the plugin does: a deprecated key that disables a class of
// steps must not go unsaid in a one-off run.
func TestReportSaysDeprecatedKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "old.toml")
	text := "[runtime]\nendpoint = \"unix://" + filepath.Join(dir, "none.sock") + "\"\nrpc_timeout = \"1s\"\n" +
		"[orphans]\nmax_per_pass = 0\n[log]\ntarget = \"stderr\"\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	// No containerd at that socket: the listing fails (exit 1), after the
	// configuration's warnings were said.
	if code := run([]string{"report", "--config", path}, &stdout, &stderr); code == 0 {
		t.Fatalf("exit 0 without a containerd; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "orphans.max_per_pass is deprecated") {
		t.Fatalf("stderr does not warn of the deprecated key:\n%s", stderr.String())
	}
}

func TestHelpAndVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"help"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "nri-housekeeper report") {
		t.Fatalf("help: exit %d, output:\n%s", code, stdout.String())
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		stdout.Reset()
		if code := run(args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "nri-housekeeper ") {
			t.Fatalf("%q: exit %d, output %q", args, code, stdout.String())
		}
	}
}

// TestAConfigCommandGivenWrongSaysWhatWasWrong: the usage alone after a
// typo leaves the user to guess which part was wrong.
func TestAConfigCommandGivenWrongSaysWhatWasWrong(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config"}, "say what to do, check FILE or example"},
		{[]string{"config", "chek", "x.toml"}, `unknown subcommand "chek"`},
		{[]string{"config", "check"}, "takes one FILE, got 0 argument(s)"},
		{[]string{"config", "check", "a.toml", "b.toml"}, "takes one FILE, got 2 argument(s)"},
		{[]string{"config", "example", "x"}, `takes no argument, got "x"`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "config check FILE") {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit 2 saying %q, then the usage", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestOnceCountsOnlyStepsTriedAndFailedAsFailures: a step aborted by the
// check right before it (the pod is back) or skipped after it was not
// tried; once exits 1 only for a step that was tried and failed.
func TestOnceCountsOnlyStepsTriedAndFailedAsFailures(t *testing.T) {
	for _, tc := range []struct {
		results []executor.Result
		want    string
		failed  int
	}{
		{[]executor.Result{executor.Success, executor.Success}, "executed 2 action(s), 0 failed (dry_run = false)\n", 0},
		{[]executor.Result{executor.Aborted, executor.Skipped}, "executed 0 action(s), 0 failed (dry_run = false); not tried: 1 aborted", 0},
		{[]executor.Result{executor.Success, executor.Error, executor.Skipped}, "executed 2 action(s), 1 failed (dry_run = false); not tried: 1 skipped", 1},
	} {
		var outcomes []executor.Outcome
		for _, r := range tc.results {
			outcomes = append(outcomes, executor.Outcome{Result: r, Err: errors.New("x")})
		}
		var out bytes.Buffer
		if failed := onceSummary(&out, outcomes, false); failed != tc.failed || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%v: failed %d, printed %q; want %d and %q", tc.results, failed, out.String(), tc.failed, tc.want)
		}
	}
}

func TestExecRootProblemsAreSaidAtStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root string
		pid        int
		noChroot   bool   // CAP_SYS_CHROOT not in the effective set
		want       string // "" for no problem
	}{
		{"none set", "", 1, false, ""},
		{"none set, and no CAP_SYS_CHROOT", "", 4242, true, ""},
		{"a readable dir", dir, 4242, false, ""},
		// /proc/1/root itself cannot be opened on these machines (PID 1
		// is a sandbox's agent): a process of the node stands in.
		{"the node's root through /proc", fmt.Sprintf("/proc/%d/root", os.Getpid()), 4242, false, ""},
		{"PID 1: its own root, not the node's", "/proc/1/root/", 1, false, "this process's own root, not the node's"},
		{"missing", filepath.Join(dir, "missing"), 4242, false, "cannot be used"},
		{"not a directory", file, 4242, false, "is not a directory"},
		{"no CAP_SYS_CHROOT (the systemd unit)", dir, 4242, true, "lacks CAP_SYS_CHROOT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := execRootProblem(tc.root, tc.pid, !tc.noChroot)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("execRootProblem(%q, %d, %v) = %q, want %q", tc.root, tc.pid, !tc.noChroot, got, tc.want)
			}
		})
	}
}

// TestNameKeysALaunchedPluginDoesNotUseAreSaid: containerd registers a
// plugin it launches under its file's name (NN-name); a configuration that
// chose another name or index is told so at start, one left at the
// defaults is not (the file may be 20-nri-housekeeper).
func TestNameKeysALaunchedPluginDoesNotUseAreSaid(t *testing.T) {
	def := config.Default()
	for _, tt := range []struct {
		name, pluginName, pluginIndex string
		fileName, fileIndex           string
		want                          []string
	}{
		{"defaults, file of another index", def.NRI.PluginName, def.NRI.PluginIndex, "nri-housekeeper", "20", nil},
		{"chosen values the file has", "hk", "30", "hk", "30", nil},
		{"chosen name the file lacks", "hk", def.NRI.PluginIndex, "nri-housekeeper", "10",
			[]string{`nri.plugin_name = "hk" is not used: containerd launched this plugin from its file 10-nri-housekeeper`}},
		{"chosen index the file lacks", def.NRI.PluginName, "30", "nri-housekeeper", "10",
			[]string{`nri.plugin_index = "30" is not used: containerd launched this plugin from its file 10-nri-housekeeper`}},
		{"both", "hk", "30", "nri-housekeeper", "10",
			[]string{`nri.plugin_name = "hk" is not used`, `nri.plugin_index = "30" is not used`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.NRI.PluginName, cfg.NRI.PluginIndex = tt.pluginName, tt.pluginIndex
			got := unusedNameKeys(cfg, tt.fileName, tt.fileIndex)
			if len(got) != len(tt.want) {
				t.Fatalf("said %q, want %d line(s) starting %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) || !strings.Contains(got[i], "rename the file") {
					t.Errorf("line %d: %q, want it to start %q and say what to do", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestATaskExitSubscriptionThatKeepsFailingIsAWarning: one that ends with a
// containerd restart is no news (debug); one that fails again and again (a
// wrong namespace, a permission) loses the early passes, which is said
// once, and so is its recovery.
func TestATaskExitSubscriptionThatKeepsFailingIsAWarning(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	subscribe := func(context.Context) error {
		calls++
		if calls == 8 {
			cancel()
		}
		return errors.New("permission denied")
	}
	now := make(chan time.Time)
	close(now)
	watchTaskExits(ctx, subscribe, log, func(time.Duration) <-chan time.Time { return now })
	var warnings, debugs int
	for _, e := range hook.AllEntries() {
		switch e.Level {
		case logrus.WarnLevel:
			warnings++
			if !strings.Contains(e.Message, "keeps failing") || e.Data["attempts"] != taskExitFailuresSaid {
				t.Errorf("warning %q %v, want it to say the subscription keeps failing after %d attempts", e.Message, e.Data, taskExitFailuresSaid)
			}
		case logrus.DebugLevel:
			debugs++
		}
	}
	if calls != 8 || warnings != 1 || debugs != 6 {
		t.Errorf("%d subscriptions: %d warnings and %d debug lines, want 8: one warning (at the third), 6 debug lines", calls, warnings, debugs)
	}
}

// TestALaunchedPluginsFirstLinesGoWhereItsConfigurationSays: containerd
// passes a launched plugin its [log] section only after it registered; the
// lines logged before (its registration) went to the default target's
// fallback file, /var/log/nri-housekeeper.log, whatever log.file said.
func TestALaunchedPluginsFirstLinesGoWhereItsConfigurationSays(t *testing.T) {
	dir := t.TempDir()
	configuredFile, defaultFile := filepath.Join(dir, "configured.log"), filepath.Join(dir, "default.log")
	fallback := logging.Options{Target: logging.TargetFile, File: defaultFile}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Run("the configured target", func(t *testing.T) {
		log, held := logging.NewHeld()
		log.WithField("connection", 1).Info("registered with the runtime over NRI")
		configured := logging.Options{Target: logging.TargetFile, File: configuredFile, Level: "debug"}
		closeLog := releaseHeld(log, held, &configured, fallback)
		log.Debug("after")
		if err := closeLog(); err != nil {
			t.Fatal(err)
		}
		got := read(configuredFile)
		if !strings.Contains(got, `msg="registered with the runtime over NRI" connection=1`) || !strings.Contains(got, `level=debug msg=after`) {
			t.Errorf("the configured file lacks the held line or the next one:\n%s", got)
		}
		if d := read(defaultFile); d != "" {
			t.Errorf("the default target was written to:\n%s", d)
		}
	})
	t.Run("a configured target that cannot be set up", func(t *testing.T) {
		log, held := logging.NewHeld()
		log.Info("registered with the runtime over NRI")
		configured := logging.Options{Target: logging.TargetFile, File: filepath.Join(dir, "no-such-dir", "x.log")}
		closeLog := releaseHeld(log, held, &configured, fallback)
		if err := closeLog(); err != nil {
			t.Fatal(err)
		}
		got := read(defaultFile)
		if !strings.Contains(got, `msg="registered with the runtime over NRI"`) ||
			!strings.Contains(got, `level=error msg="cannot set up logging as configured; keeping the default target"`) ||
			!strings.Contains(got, "no-such-dir") {
			t.Errorf("the default target does not hold the held line and why the configured one is not used:\n%s", got)
		}
	})
	t.Run("no configuration came", func(t *testing.T) {
		log, held := logging.NewHeld()
		log.Info("before the registration failed")
		closeLog := releaseHeld(log, held, nil, logging.Options{Target: logging.TargetFile, File: configuredFile})
		if err := closeLog(); err != nil {
			t.Fatal(err)
		}
		if got := read(configuredFile); !strings.Contains(got, `msg="before the registration failed"`) {
			t.Errorf("the default target lacks the held line:\n%s", got)
		}
	})
}

// TestALineLoggedWhileHeldLinesAreReleasedIsNotLost: an NRI handler may log
// while the held logger is pointed at its configured target; its line is
// written (twice at worst), never dropped on the way between the two.
func TestALineLoggedWhileHeldLinesAreReleasedIsNotLost(t *testing.T) {
	dir := t.TempDir()
	for round := range 200 {
		file := filepath.Join(dir, fmt.Sprintf("configured-%d.log", round))
		log, held := logging.NewHeld()
		var logged atomic.Int64
		var releasing atomic.Bool
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for n := int64(0); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				for n >= 500 && !releasing.Load() {
					runtime.Gosched() // the held logger keeps 1,000
				}
				log.WithField("n", n).Info("handler line")
				logged.Store(n + 1)
				runtime.Gosched()
			}
		}()
		// Lines before the release (at most 500: the held logger keeps
		// 1,000), during it, and after it.
		waitLogged := func(n int64) {
			for logged.Load() < n {
				runtime.Gosched()
			}
		}
		waitLogged(50)
		releasing.Store(true)
		configured := logging.Options{Target: logging.TargetFile, File: file}
		closeLog := releaseHeld(log, held, &configured, logging.Options{Target: logging.TargetFile, File: filepath.Join(dir, "default.log")})
		waitLogged(logged.Load() + 50)
		close(stop)
		<-done
		if err := closeLog(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// The held logger drops what it cannot keep, and says how many.
		dropped := 0
		if m := regexp.MustCompile(`(\d+) log entries from before the log target was known were dropped`).FindSubmatch(b); m != nil {
			dropped, _ = strconv.Atoi(string(m[1]))
		}
		lines, missing := logged.Load(), []int64(nil)
		for n := range lines {
			if !strings.Contains(string(b), fmt.Sprintf(" n=%d\n", n)) {
				missing = append(missing, n)
			}
		}
		if len(missing) > dropped {
			t.Fatalf("round %d: %d of %d lines, logged while the held lines were released, are in neither target (the held logger dropped %d), first n=%d",
				round, len(missing), lines, dropped, missing[0])
		}
	}
}

// A listing that fails says what to check: a socket nothing listens on
// (containerd not running, or another endpoint), and a server that never
// answers (a hung containerd, or another server's socket).
func TestAFailedListingSaysWhatToCheck(t *testing.T) {
	dir := t.TempDir()
	hung := hungSocket(t, filepath.Join(dir, "hung.sock"))
	for _, tc := range []struct{ socket, want string }{
		{filepath.Join(dir, "none.sock"), "is containerd running, and is runtime.endpoint"},
		{hung, "containerd did not answer within runtime.rpc_timeout (1s, each call)"},
	} {
		path := filepath.Join(dir, "c.toml")
		text := "[runtime]\nendpoint = \"unix://" + tc.socket + "\"\nrpc_timeout = \"1s\"\n[log]\ntarget = \"stderr\"\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"report", "--config", path}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, want 1 and stderr saying %q:\n%s", filepath.Base(tc.socket), code, tc.want, stderr.String())
		}
	}
}

// hungSocket listens on a unix socket at path that accepts connections and
// never answers (a hung containerd), until the test ends; it returns path.
func hungSocket(t *testing.T, path string) string {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return path
}

// TestTheLongestStepCoversACNIDelWaitingItsTurn: /healthz allows a pass
// the longest one step may take beside 3 periods. A CNI DEL may wait for
// another in its namespace, then run, each up to podnet.StepTimeout; with
// the network side enabled the allowance covers both (it covered only the
// CRI steps, and a liveness probe at a short period could restart the
// plugin in the middle of a DEL that was hanging as it may).
func TestTheLongestStepCoversACNIDelWaitingItsTurn(t *testing.T) {
	cfg := config.Default()
	cfg.Network.Enabled = false
	without := longestStep(cfg)
	if want := cfg.Orphans.StopTimeout + cfg.Runtime.RPCTimeout; without < want {
		t.Fatalf("longest step %s without the network, want at least an orphan stop's %s", without, want)
	}
	if want := gc.UnknownStopMaxGrace + cfg.Runtime.RPCTimeout; without < want {
		t.Fatalf("longest step %s without the network, want at least an UNKNOWN container's longest stop, %s", without, want)
	}
	cfg.Network.Enabled = true
	if got := longestStep(cfg); got < 2*podnet.StepTimeout || got < without {
		t.Fatalf("longest step %s with the network, want at least %s and %s", got, 2*podnet.StepTimeout, without)
	}
}

// TestConfigCheckWarnsOfALogFileWhoseDirIsMissing: config check validates
// the text, which may be meant for another node, so a log.file whose
// directory does not exist here is a warning (run would exit 2 here), not
// a problem; one whose directory exists says nothing.
func TestConfigCheckWarnsOfALogFileWhoseDirIsMissing(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file string
		warn bool
	}{
		{filepath.Join(dir, "missing", "nri-housekeeper.log"), true},
		{filepath.Join(dir, "nri-housekeeper.log"), false},
		{os.DevNull, true}, // not a regular file: run refuses it
	} {
		path := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(path, []byte("[log]\ntarget = \"file\"\nfile = \""+tc.file+"\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"config", "check", path}, &stdout, &stderr)
		warned := strings.Contains(stderr.String(), "warning: log.file "+tc.file+": its directory "+filepath.Dir(tc.file)+" does not exist here") ||
			strings.Contains(stderr.String(), "warning: log.file "+tc.file+": it is a character device here, not a regular file: run would exit 2")
		if code != 0 || stdout.String() != path+": OK\n" || warned != tc.warn {
			t.Errorf("%s: exit %d, stdout %q, warned %v (want %v); stderr:\n%s", tc.file, code, stdout.String(), warned, tc.warn, stderr.String())
		}
	}
}

// TestConfigCheckWarnsOfAJournaldTargetWithoutJournald: log.target =
// "journald" makes run exit 2 where journald's socket is missing; config
// check says so as a warning (the file may be meant for another node) and
// still accepts the text. It said nothing: the installer's check passed a
// config the launched plugin then refused.
func TestConfigCheckWarnsOfAJournaldTargetWithoutJournald(t *testing.T) {
	if _, err := os.Stat(logging.DefaultJournalSocket); err == nil {
		t.Skipf("journald's socket %s exists here", logging.DefaultJournalSocket)
	}
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[log]\ntarget = \"journald\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"config", "check", path}, &stdout, &stderr)
	want := `warning: log.target = "journald": journald socket ` + logging.DefaultJournalSocket + ": no such file or directory here: run would exit 2 on this machine"
	if code != 0 || stdout.String() != path+": OK\n" || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 0, OK and %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestConfigCheckOfAFileItCannotReadSaysWhoSpeaks: a file config check
// cannot read is said as every command's error is, with the command first
// (it printed the bare error).
func TestConfigCheckOfAFileItCannotReadSaysWhoSpeaks(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.toml")
	var stdout, stderr bytes.Buffer
	code := run([]string{"config", "check", missing}, &stdout, &stderr)
	want := "nri-housekeeper config check: reading config file: open " + missing + ": no such file or directory\n"
	if code != 1 || stdout.Len() != 0 || stderr.String() != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout.String(), stderr.String(), want)
	}
}
