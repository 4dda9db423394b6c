//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// repoRoot is the module's root directory (the Makefile's).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// labName is the shared lab's name (NRIHK_E2E_LAB); tests that start their
// own lab derive theirs from it, so parallel runs stay apart.
func labName() string {
	if v := os.Getenv("NRIHK_E2E_LAB"); v != "" {
		return v
	}
	return "nrihk-e2e"
}

// installer runs `make install|uninstall VAR=...` from the repository root
// or, while the Makefile has no such targets, packaging/install/install.sh
// with a binary built for the test: the same script either way.
type installer struct {
	root    string
	viaMake bool
	binary  string // script mode: BINARY
}

func newInstaller(t *testing.T) installer {
	t.Helper()
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	in := installer{root: root}
	in.viaMake = regexp.MustCompile(`(?m)^install:`).Match(mk) && regexp.MustCompile(`(?m)^uninstall:`).Match(mk)
	if in.viaMake {
		t.Log("installing with make install / make uninstall")
	} else {
		in.binary = buildPlugin(t, t.TempDir(), "nri-housekeeper")
		t.Log("the Makefile has no install/uninstall targets yet: running packaging/install/install.sh")
	}
	return in
}

// run runs the install or uninstall command with the VAR=value arguments;
// it returns the combined output and whether the command succeeded.
func (in installer) run(t *testing.T, cmd string, vars ...string) (string, bool) {
	t.Helper()
	var c *exec.Cmd
	if in.viaMake {
		c = exec.Command("make", append([]string{"--no-print-directory", "-s", cmd}, vars...)...)
	} else {
		c = exec.Command(filepath.Join(in.root, "packaging/install/install.sh"), append([]string{cmd, "BINARY=" + in.binary}, vars...)...)
	}
	c.Dir = in.root
	// Only the arguments choose the paths and the name.
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "DESTDIR", "PLUGIN_DIR", "CONF_DIR", "NAME", "BINARY", "FORCE":
		default:
			c.Env = append(c.Env, kv)
		}
	}
	out, err := c.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %s: %v", cmd, strings.Join(vars, " "), err)
	}
	t.Logf("%s %s (ok=%v):\n%s", cmd, strings.Join(vars, " "), err == nil, strings.TrimRight(string(out), "\n"))
	return string(out), err == nil
}

func (in installer) mustRun(t *testing.T, cmd string, vars ...string) string {
	t.Helper()
	out, ok := in.run(t, cmd, vars...)
	if !ok {
		t.Fatalf("%s failed", cmd)
	}
	return out
}

// setTOML sets key = value (a TOML literal) in [section] of a configuration
// text and leaves every other line as it is.
func setTOML(text, section, key, value string) string {
	lines := strings.Split(text, "\n")
	cur, header := "", -1
	for i, ln := range lines {
		s := strings.TrimSpace(ln)
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			cur = strings.TrimSpace(strings.Trim(s, "[]"))
			if cur == section {
				header = i
			}
			continue
		}
		if cur == section && strings.HasPrefix(s, key) && strings.HasPrefix(strings.TrimSpace(s[len(key):]), "=") {
			lines[i] = key + " = " + value
			return strings.Join(lines, "\n")
		}
	}
	if header < 0 {
		return text + fmt.Sprintf("\n[%s]\n%s = %s\n", section, key, value)
	}
	return strings.Join(slices.Insert(lines, header+1, key+" = "+value), "\n")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func requireMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != want {
		t.Fatalf("%s: mode %v, want a regular file %v", path, fi.Mode(), want)
	}
}

func requireContains(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q", what, w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func requireGone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists (err %v)", p, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestMakeInstallIntoDestdirIsLaunchedByContainerd: make install puts the
// plugin and its config where containerd's NRI looks for them; a containerd
// pointed there launches the plugin, which runs housekeeping with the
// installed config; a reinstall keeps an edited config; uninstall removes the
// binary and keeps the edited config.
func TestMakeInstallIntoDestdirIsLaunchedByContainerd(t *testing.T) {
	start := time.Now()
	in := newInstaller(t)
	dest := t.TempDir()
	vars := []string{"DESTDIR=" + dest, "PLUGIN_DIR=/opt/nri/plugins", "CONF_DIR=/etc/nri/conf.d"}
	pluginDir, confDir := filepath.Join(dest, "opt/nri/plugins"), filepath.Join(dest, "etc/nri/conf.d")
	bin, conf := filepath.Join(pluginDir, "10-nri-housekeeper"), filepath.Join(confDir, "10-nri-housekeeper.conf")

	out := in.mustRun(t, "install", vars...)
	requireContains(t, "install output", out,
		"installed "+bin+" (0755): nri-housekeeper ",
		"installed "+conf+" (0644)",
		"config check: "+conf+": OK",
		"containerd config dump | grep -A8 'io.containerd.nri.v1.nri'",
		"containerd 1.7 does not: set disable = false",
		"containerd launches pre-registered plugins only when it starts")
	requireMode(t, bin, 0o755)
	requireMode(t, conf, 0o644)
	if got := dirNames(t, pluginDir); !slices.Equal(got, []string{"10-nri-housekeeper"}) {
		t.Fatalf("plugin dir holds %v, want only the plugin (no staging leftovers)", got)
	}
	if got := dirNames(t, confDir); !slices.Equal(got, []string{"10-nri-housekeeper.conf"}) {
		t.Fatalf("config dir holds %v", got)
	}
	shipped := readFile(t, conf)
	example, err := exec.Command(bin, "config", "example").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(shipped, string(example)) {
		t.Fatal("the installed config does not end with the binary's documented example")
	}
	requireContains(t, "installed config header", shipped,
		"containerd discards the plugin's stdout and stderr",
		"without journald, to log.file, or\n# to /var/log/nri-housekeeper.log when that is empty",
		`target = "file"`,
		"/opt/nri/plugins/10-nri-housekeeper config check /etc/nri/conf.d/10-nri-housekeeper.conf")

	// What this lab needs, set the way an administrator edits the file.
	name := labName() + "-install"
	labDir, cgroupRoot := "/tmp/"+name, "/"+name
	logFile := filepath.Join(t.TempDir(), "plugin.log")
	kubeletRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	edited := shipped
	for _, kv := range [][3]string{
		{"housekeeping", "period", `"1s"`},
		{"housekeeping", "state_file", fmt.Sprintf("%q", filepath.Join(t.TempDir(), "state.json"))},
		{"runtime", "endpoint", fmt.Sprintf("%q", "unix://"+labDir+"/containerd.sock")},
		{"pods", "kubelet_root", fmt.Sprintf("%q", kubeletRoot)},
		{"logs", "pod_logs_dir", fmt.Sprintf("%q", labDir+"/log/pods")},
		{"logs", "container_logs_dir", fmt.Sprintf("%q", t.TempDir())},
		{"cgroups", "root", fmt.Sprintf("%q", strings.TrimPrefix(cgroupRoot, "/"))},
		{"metrics", "address", `""`},
		{"log", "level", `"debug"`},
		{"log", "target", `"file"`},
		{"log", "file", fmt.Sprintf("%q", logFile)},
	} {
		edited = setTOML(edited, kv[0], kv[1], kv[2])
	}
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	// A reinstall (an upgrade) keeps the edited config and says so.
	out = in.mustRun(t, "install", vars...)
	requireContains(t, "reinstall output", out,
		"installed "+bin+" (0755)",
		"kept existing config "+conf+" (new example at "+conf+".example)",
		"config check: "+conf+": OK")
	if readFile(t, conf) != edited {
		t.Fatal("the reinstall changed the edited config")
	}
	if readFile(t, conf+".example") != shipped {
		t.Fatal("the new example next to the kept config is not the shipped config")
	}

	// containerd, pointed at the installed tree, launches the plugin.
	ctx := context.Background()
	l, err := lab.Start(ctx, lab.Options{Dir: labDir, PluginPath: pluginDir, PluginConfigPath: confDir, CgroupRoot: cgroupRoot})
	if err != nil {
		t.Fatal(err)
	}
	down := false
	t.Cleanup(func() {
		if !down {
			if err := l.Down(context.Background()); err != nil {
				t.Errorf("lab down: %v", err)
			}
		}
	})
	launched := time.Now()
	readLog := func() string {
		b, _ := os.ReadFile(logFile)
		return string(b)
	}
	waitFor(t, "containerd launches the installed plugin with the installed config", 15*time.Second, func() bool {
		return strings.Contains(readLog(), `msg="nri-housekeeper starting" config="containerd plugin config"`)
	})
	requireContains(t, "plugin log", readLog(), "mode=pre-registered", "period=1s", `runtime="unix://`+labDir+`/containerd.sock"`)
	// Its registration, logged before containerd passed it the [log]
	// section, is in the configured file too, not in the default target's.
	requireContains(t, "plugin log", readLog(), `msg="registered with the runtime over NRI"`)
	if n := len(processes(bin)); n != 1 {
		t.Fatalf("%d processes of %s, want 1", n, bin)
	}
	waitFor(t, "a housekeeping pass", 10*time.Second, func() bool { return strings.Contains(readLog(), `msg="housekeeping pass"`) })

	p := newPod(t, "installed")
	if err := os.MkdirAll(filepath.Join(kubeletRoot, "pods", p.UID), 0o755); err != nil {
		t.Fatal(err)
	}
	runPod(t, l, p, 1) // lab down removes it
	want := "pod e2e/installed: new -> Running"
	waitFor(t, "the plugin logs the new pod", 10*time.Second, func() bool { return strings.Contains(readLog(), want) })
	t.Logf("plugin launched and tracking a pod %v after lab start; log excerpt:\n%s", time.Since(launched).Round(time.Millisecond), lastLines(readLog(), 8))
	if err := l.Down(ctx); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	down = true
	if n := len(processes(bin)); n != 0 {
		t.Fatalf("%d plugin processes left after the lab went down", n)
	}

	// Uninstall removes the binary and the example, keeps the edited config.
	out = in.mustRun(t, "uninstall", vars...)
	requireContains(t, "uninstall output", out,
		"removed "+bin,
		"kept "+conf+": it differs from the shipped config",
		"removed "+conf+".example")
	requireGone(t, bin, conf+".example")
	if readFile(t, conf) != edited {
		t.Fatal("uninstall changed the edited config")
	}
	if got := dirNames(t, pluginDir); len(got) != 0 {
		t.Fatalf("plugin dir holds %v after uninstall", got)
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestInstallRefusesNamesContainerdRejects: a plugin dir entry not named
// NN-name would stop containerd's CRI service, so the installer refuses such
// names with the reason, and installs nothing.
func TestInstallRefusesNamesContainerdRejects(t *testing.T) {
	in := newInstaller(t)
	for _, name := range []string{"nri-housekeeper", "1-nri-housekeeper", "100-nri-housekeeper", "ab-nri-housekeeper", "10-", "10-nri/housekeeper", "10-nri housekeeper"} {
		dest := t.TempDir()
		out, ok := in.run(t, "install", "DESTDIR="+dest, "NAME="+name)
		if ok {
			t.Errorf("NAME=%q: install succeeded", name)
		}
		for _, w := range []string{`refusing NAME="` + name + `"`, "must be named NN-name", "CRI service does not", "Nothing was installed"} {
			if !strings.Contains(out, w) {
				t.Errorf("NAME=%q: output does not say %q", name, w)
			}
		}
		if left := dirNames(t, dest); len(left) != 0 {
			t.Errorf("NAME=%q: DESTDIR holds %v, want nothing", name, left)
		}
	}
}

// TestInstallUninstallRoundTrip: another index works, an unchanged config is
// removed with the binary, a misnamed executable already in the plugin dir is
// pointed out, and a foreign plugin under the same name is not replaced.
func TestInstallUninstallRoundTrip(t *testing.T) {
	in := newInstaller(t)
	dest := t.TempDir()
	pluginDir, confDir := filepath.Join(dest, "plugins"), filepath.Join(dest, "conf.d")
	vars := []string{"DESTDIR=" + dest, "PLUGIN_DIR=/plugins", "CONF_DIR=/conf.d", "NAME=90-housekeeper.test"}
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	misnamed := filepath.Join(pluginDir, "my-plugin")
	if err := os.WriteFile(misnamed, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := in.mustRun(t, "install", vars...)
	bin, conf := filepath.Join(pluginDir, "90-housekeeper.test"), filepath.Join(confDir, "90-housekeeper.test.conf")
	requireContains(t, "install output", out, "installed "+bin, "installed "+conf,
		"WARNING: "+misnamed+" is executable (or a symlink) but not named NN-name")
	requireContains(t, "installed config", readFile(t, conf), "/plugins/90-housekeeper.test config check /conf.d/90-housekeeper.test.conf")

	out = in.mustRun(t, "uninstall", vars...)
	requireContains(t, "uninstall output", out, "removed "+bin, "removed "+conf)
	requireGone(t, bin, conf)

	// A different plugin under the name is left alone.
	foreign := "#!/bin/sh\necho another plugin\n"
	if err := os.WriteFile(bin, []byte(foreign), 0o755); err != nil {
		t.Fatal(err)
	}
	out, ok := in.run(t, "install", vars...)
	if ok || !strings.Contains(out, bin+" exists and is not nri-housekeeper") {
		t.Fatalf("install over a foreign plugin: ok=%v", ok)
	}
	if readFile(t, bin) != foreign {
		t.Fatal("install replaced a foreign plugin")
	}
	out, ok = in.run(t, "uninstall", vars...)
	if ok || !strings.Contains(out, "not removing it") || readFile(t, bin) != foreign {
		t.Fatalf("uninstall of a foreign plugin: ok=%v", ok)
	}
}

// TestInstallUpgradeReplacesAnUneditedConfigAndChecksAnEditedOneFirst: an
// upgrade replaces a config nobody edited with the new version's (and
// uninstall then removes it), keeps an edited one beside the new example,
// and, when the new version rejects the edited one, changes nothing at all:
// the old binary stays, so the node keeps a plugin that starts.
func TestInstallUpgradeReplacesAnUneditedConfigAndChecksAnEditedOneFirst(t *testing.T) {
	root, work := repoRoot(t), t.TempDir()
	v1 := buildPlugin(t, work, "nri-housekeeper")
	// v2: the same plugin with another version and one more line in its
	// documented example (what an upgrade that changes a default ships).
	v2 := filepath.Join(work, "nri-housekeeper-v2")
	wrapper := `#!/bin/sh
case "$1" in
version) echo nri-housekeeper v2-test; exit 0 ;;
config) if [ "$2" = example ]; then "` + v1 + `" config example; echo '# new in v2'; exit 0; fi ;;
esac
exec "` + v1 + `" "$@"
`
	if err := os.WriteFile(v2, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	vars := []string{"DESTDIR=" + dest, "PLUGIN_DIR=/plugins", "CONF_DIR=/conf.d", "NAME=90-housekeeper.test"}
	bin, conf := filepath.Join(dest, "plugins", "90-housekeeper.test"), filepath.Join(dest, "conf.d", "90-housekeeper.test.conf")
	install := func(cmd, binary string) (string, bool) {
		t.Helper()
		c := exec.Command(filepath.Join(root, "packaging/install/install.sh"), append([]string{cmd, "BINARY=" + binary}, vars...)...)
		c.Dir = root
		out, err := c.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), err == nil
	}
	mustInstall := func(cmd, binary string) string {
		t.Helper()
		out, ok := install(cmd, binary)
		if !ok {
			t.Fatalf("%s with %s failed:\n%s", cmd, binary, out)
		}
		return out
	}

	mustInstall("install", v1)
	out := mustInstall("install", v2)
	requireContains(t, "upgrade over an unedited config", out, "replaced "+conf+" (unedited)")
	requireContains(t, "the upgraded config", readFile(t, conf), "# new in v2")
	requireGone(t, conf+".example")
	out = mustInstall("uninstall", v2)
	requireContains(t, "uninstall after the upgrade", out, "removed "+conf)
	requireGone(t, bin, conf)

	mustInstall("install", v1)
	edited := readFile(t, conf) + "# mine\n"
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out = mustInstall("install", v2)
	requireContains(t, "upgrade over an edited config", out, "kept existing config "+conf)
	if readFile(t, conf) != edited {
		t.Fatal("the edited config was changed by the upgrade")
	}
	requireContains(t, "the new example", readFile(t, conf+".example"), "# new in v2")

	// An edit the new version accepts with a warning of what this node
	// lacks (no journald here): the upgrade goes on and says it.
	if _, err := os.Stat("/run/systemd/journal/socket"); err == nil {
		t.Fatal("journald's socket exists here: the warning below cannot be shown")
	}
	journald := setTOML(edited, "log", "target", `"journald"`)
	if err := os.WriteFile(conf, []byte(journald), 0o644); err != nil {
		t.Fatal(err)
	}
	out = mustInstall("install", v2)
	requireContains(t, "upgrade over a config that warns", out, "kept existing config "+conf,
		"warning: "+conf+`: log.target = "journald": journald socket /run/systemd/journal/socket: no such file or directory here: run would exit 2`)
	if err := os.WriteFile(conf, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	// An edit the next version rejects: nothing may change.
	rejected := edited + "[no_such_section]\n"
	if err := os.WriteFile(conf, []byte(rejected), 0o644); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, bin)
	out, ok := install("install", v1)
	if ok {
		t.Fatalf("an upgrade whose new version rejects the kept config succeeded:\n%s", out)
	}
	requireContains(t, "the refused upgrade", out, "no_such_section", "Nothing was changed")
	if readFile(t, bin) != before || readFile(t, conf) != rejected {
		t.Fatal("the refused upgrade changed the installed binary or the config")
	}
	out = mustInstall("uninstall", v1)
	requireContains(t, "uninstall with an edited config", out, "kept "+conf)
}

// debPaths are the entries of the package, as dpkg-deb -c lists them, with
// their mode.
var debPaths = map[string]string{
	"./etc/":                            "drwxr-xr-x",
	"./etc/nri-housekeeper/":            "drwxr-xr-x",
	"./etc/nri-housekeeper/config.toml": "-rw-r--r--",
	"./lib/":                            "drwxr-xr-x",
	"./lib/systemd/":                    "drwxr-xr-x",
	"./lib/systemd/system/":             "drwxr-xr-x",
	"./lib/systemd/system/nri-housekeeper.service": "-rw-r--r--",
	"./usr/":                           "drwxr-xr-x",
	"./usr/bin/":                       "drwxr-xr-x",
	"./usr/bin/nri-housekeeper":        "-rwxr-xr-x",
	"./usr/share/":                     "drwxr-xr-x",
	"./usr/share/doc/":                 "drwxr-xr-x",
	"./usr/share/doc/nri-housekeeper/": "drwxr-xr-x",
	"./usr/share/doc/nri-housekeeper/README.Debian":       "-rw-r--r--",
	"./usr/share/doc/nri-housekeeper/config.example.toml": "-rw-r--r--",
	"./usr/share/nri-housekeeper/":                        "drwxr-xr-x",
	"./usr/share/nri-housekeeper/10-nri-housekeeper.conf": "-rw-r--r--",
}

// dpkgRun runs a dpkg command, waiting while another dpkg or apt holds the
// lock.
func dpkgRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil && strings.Contains(string(out), "lock") && time.Now().Before(deadline) {
			time.Sleep(2 * time.Second)
			continue
		}
		return string(out), err
	}
}

// packageState is the dpkg status of nri-housekeeper ("" when dpkg knows
// nothing of it).
func packageState(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "nri-housekeeper").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// debStateDir is the systemd unit's StateDirectory: the default
// housekeeping.state_file lives there; only a purge removes it.
const debStateDir = "/var/lib/nri-housekeeper"

// hostTraces are the paths on this machine that belong to the package or its
// maintainer scripts (enablement symlinks, deb-systemd-helper state, masks,
// dpkg's own records).
func hostTraces(t *testing.T) []string {
	t.Helper()
	var found []string
	for _, p := range []string{"/usr/bin/nri-housekeeper", "/lib/systemd/system/nri-housekeeper.service",
		"/etc/nri-housekeeper", "/usr/share/nri-housekeeper", "/usr/share/doc/nri-housekeeper", debStateDir} {
		if _, err := os.Lstat(p); err == nil {
			found = append(found, p)
		}
	}
	for _, pattern := range []string{"/var/lib/dpkg/info/nri-housekeeper.*", "/opt/nri/plugins/*nri-housekeeper*"} {
		m, _ := filepath.Glob(pattern)
		found = append(found, m...)
	}
	for _, root := range []string{"/etc/systemd/system", "/var/lib/systemd/deb-systemd-helper-enabled", "/var/lib/systemd/deb-systemd-helper-masked"} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.Contains(d.Name(), "nri-housekeeper") {
				found = append(found, p)
			}
			return nil
		})
	}
	slices.Sort(found)
	return found
}

// TestDebVersionsSortAsTheReleasesDo: the package's version, made from git
// describe, sorts in dpkg as the releases do, so that apt upgrades a
// pre-release to its release (v1.2.3-rc1 was 1.2.3+rc1, after 1.2.3), and
// a build after a tag past the tag.
func TestDebVersionsSortAsTheReleasesDo(t *testing.T) {
	debVersion := func(v string) string {
		out, err := exec.Command(filepath.Join(repoRoot(t), "packaging/deb/build.sh"), "--deb-version", v).Output()
		if err != nil {
			t.Fatalf("build.sh --deb-version %s: %v", v, err)
		}
		return strings.TrimSpace(string(out))
	}
	for v, want := range map[string]string{
		"v1.2.3": "1.2.3", "v1.2.3-4-gabcdef": "1.2.3+4.gabcdef", "v1.2.3-4-gabcdef-dirty": "1.2.3+4.gabcdef.dirty",
		"v1.2.3-dirty": "1.2.3+dirty", "v1.2.3-rc1": "1.2.3~rc1", "v1.2.3-beta.1": "1.2.3~beta.1",
		"v1.2.3-rc1-4-gabcdef": "1.2.3~rc1+4.gabcdef", "v1.2.3+meta": "1.2.3+meta", "dev": "0.0.0+gitdev",
	} {
		if got := debVersion(v); got != want {
			t.Errorf("%s: %s, want %s", v, got, want)
		}
	}
	// In the order they are made: each must upgrade the one before.
	order := []string{"v1.2.2", "v1.2.2-3-gabcdef", "v1.2.3-alpha", "v1.2.3-rc1", "v1.2.3-rc1-2-gabcdef", "v1.2.3-rc2", "v1.2.3", "v1.2.3-1-gabcdef"}
	for i := 1; i < len(order); i++ {
		older, newer := debVersion(order[i-1]), debVersion(order[i])
		if err := exec.Command("dpkg", "--compare-versions", older, "lt", newer).Run(); err != nil {
			t.Errorf("%s (%s) does not sort before %s (%s): %v", order[i-1], older, order[i], newer, err)
		}
	}
}

// TestDebPackageInstallsAndRemovesCleanly builds the .deb, checks its exact
// contents, installs it on this machine, and removes and purges it; the
// cleanup purges it even when the test fails.
func TestDebPackageInstallsAndRemovesCleanly(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: this test needs a Debian machine", tool)
		}
	}
	if s := packageState(t); s != "" && !strings.HasPrefix(s, "unknown ") && !strings.Contains(s, "not-installed") {
		t.Fatalf("nri-housekeeper is already known to dpkg on this machine (%q); not touching it", s)
	}
	if traces := hostTraces(t); len(traces) > 0 {
		t.Fatalf("this machine already has nri-housekeeper files: %v", traces)
	}

	// Build.
	start := time.Now()
	outDir := t.TempDir()
	build := exec.Command(filepath.Join(repoRoot(t), "packaging/deb/build.sh"), outDir)
	build.Dir = repoRoot(t)
	var stdout, stderr bytes.Buffer
	build.Stdout, build.Stderr = &stdout, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build.sh: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	deb := lines[len(lines)-1]
	t.Logf("built %s in %v", deb, time.Since(start).Round(time.Millisecond))

	// Exactly the intended entries, with their modes, owned by root.
	out, err := exec.Command("dpkg-deb", "-c", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dpkg-deb -c:\n%s", out)
	got := map[string]string{}
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(ln)
		if len(f) != 6 {
			t.Fatalf("unexpected dpkg-deb -c line %q (a link?)", ln)
		}
		if f[1] != "root/root" {
			t.Errorf("%s is owned by %s", f[5], f[1])
		}
		got[f[5]] = f[0]
	}
	for p, mode := range debPaths {
		if got[p] != mode {
			t.Errorf("package entry %s: mode %q, want %q", p, got[p], mode)
		}
	}
	for p := range got {
		if _, ok := debPaths[p]; !ok {
			t.Errorf("unexpected package entry %s", p)
		}
	}
	fields, err := exec.Command("dpkg-deb", "-f", deb, "Package", "Architecture", "Version").Output()
	if err != nil {
		t.Fatal(err)
	}
	requireContains(t, "control fields", string(fields), "Package: nri-housekeeper", "Architecture: amd64")
	conffiles, err := exec.Command("dpkg-deb", "-I", deb, "conffiles").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(conffiles)) != "/etc/nri-housekeeper/config.toml" {
		t.Fatalf("conffiles: %q", conffiles)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Install on this machine; purge whatever happens next.
	t.Cleanup(func() {
		if packageState(t) != "" {
			if out, err := dpkgRun(t, "dpkg", "--purge", "nri-housekeeper"); err != nil {
				t.Errorf("cleanup: dpkg --purge: %v\n%s", err, out)
			}
		}
	})
	installStart := time.Now()
	if out, err := dpkgRun(t, "dpkg", "-i", deb); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	} else {
		t.Logf("dpkg -i (%v):\n%s", time.Since(installStart).Round(time.Millisecond), out)
	}
	if s := packageState(t); s != "install ok installed" {
		t.Fatalf("after dpkg -i: status %q", s)
	}
	v, err := exec.Command("/usr/bin/nri-housekeeper", "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "nri-housekeeper ") {
		t.Fatalf("nri-housekeeper version: %q, %v", v, err)
	}
	for _, f := range []string{"/etc/nri-housekeeper/config.toml", "/usr/share/nri-housekeeper/10-nri-housekeeper.conf",
		"/usr/share/doc/nri-housekeeper/config.example.toml"} {
		if out, err := exec.Command("/usr/bin/nri-housekeeper", "config", "check", f).CombinedOutput(); err != nil {
			t.Fatalf("config check %s: %v\n%s", f, err, out)
		}
	}
	// The conffile sets no key: one written at its default would pin it
	// across an upgrade that changes the default, and every change to the
	// example's comments would make dpkg ask about an edited copy.
	for i, ln := range strings.Split(readFile(t, "/etc/nri-housekeeper/config.toml"), "\n") {
		if ln = strings.TrimSpace(ln); ln != "" && !strings.HasPrefix(ln, "#") {
			t.Errorf("the conffile sets something, line %d: %q", i+1, ln)
		}
	}
	unit := readFile(t, "/lib/systemd/system/nri-housekeeper.service")
	requireContains(t, "the unit", unit, "ExecStart=/usr/bin/nri-housekeeper run --config /etc/nri-housekeeper/config.toml",
		"Type=simple", "Restart=always")
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		out, err := exec.Command("systemd-analyze", "verify", "/lib/systemd/system/nri-housekeeper.service").CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	} else {
		t.Log("systemd-analyze is not installed: the unit is not verified")
	}
	systemdRuns := false
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		systemdRuns = true
	}
	if _, err := exec.LookPath("deb-systemd-helper"); err == nil {
		link := "/etc/systemd/system/multi-user.target.wants/nri-housekeeper.service"
		if target, err := os.Readlink(link); err != nil || target != "/lib/systemd/system/nri-housekeeper.service" {
			t.Fatalf("the unit is not enabled: %s -> %q (%v)", link, target, err)
		}
	}
	if !systemdRuns {
		if n := len(processes("/usr/bin/nri-housekeeper")); n != 0 {
			t.Fatalf("without systemd nothing should run the service, found %d processes", n)
		}
	}
	// What the service writes (systemd's StateDirectory= makes the dir; no
	// systemd runs here): the state file.
	if err := os.MkdirAll(debStateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(debStateDir, "state.json"), []byte(`{"version": 1, "torn_down": [], "budget_spent": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("installed: %v", hostTraces(t))

	// An upgrade over an edited config this version refuses: dpkg keeps the
	// edited file, and the postinst says the service is not restarted and
	// why, naming the key, rather than leave it failing while dpkg succeeds.
	conf := "/etc/nri-housekeeper/config.toml"
	shippedConf := readFile(t, conf)
	if err := os.WriteFile(conf, []byte(shippedConf+"\n[housekeepin]\nperiod = \"1m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upgraded, err := dpkgRun(t, "dpkg", "-i", "--force-confold", deb)
	if err != nil {
		t.Fatalf("dpkg -i over an edited config: %v\n%s", err, upgraded)
	}
	requireContains(t, "dpkg -i over a config this version refuses", upgraded,
		"nri-housekeeper: this version refuses "+conf, "housekeepin: unknown section", "is NOT (re)started")
	// One it accepts with a warning of what this node lacks (no journald
	// here): the warning is said, not swallowed with the check's "OK".
	if err := os.WriteFile(conf, []byte(shippedConf+"\n[log]\ntarget = \"journald\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	upgraded, err = dpkgRun(t, "dpkg", "-i", "--force-confold", deb)
	if err != nil {
		t.Fatalf("dpkg -i over an edited config: %v\n%s", err, upgraded)
	}
	if _, serr := os.Stat("/run/systemd/journal/socket"); serr == nil {
		t.Log("journald's socket exists here: no warning to see")
	} else {
		requireContains(t, "dpkg -i over a config that warns", upgraded,
			"nri-housekeeper: warning: "+conf+`: log.target = "journald": journald socket /run/systemd/journal/socket: no such file or directory here`)
	}
	if err := os.WriteFile(conf, []byte(shippedConf), 0o644); err != nil {
		t.Fatal(err)
	}

	// Remove: everything but the conffile and the state (and the unit's
	// mask and enablement, which purge removes) is gone.
	if out, err := dpkgRun(t, "dpkg", "-r", "nri-housekeeper"); err != nil {
		t.Fatalf("dpkg -r: %v\n%s", err, out)
	}
	if s := packageState(t); s != "deinstall ok config-files" {
		t.Fatalf("after dpkg -r: status %q", s)
	}
	requireGone(t, "/usr/bin/nri-housekeeper", "/lib/systemd/system/nri-housekeeper.service",
		"/usr/share/nri-housekeeper", "/usr/share/doc/nri-housekeeper")
	if _, err := os.Stat("/etc/nri-housekeeper/config.toml"); err != nil {
		t.Fatalf("dpkg -r removed the conffile: %v", err)
	}
	if _, err := os.Stat(filepath.Join(debStateDir, "state.json")); err != nil {
		t.Fatalf("dpkg -r removed the state file: %v", err)
	}
	t.Logf("after dpkg -r: %v", hostTraces(t))

	// The administrator switches to the pre-registered mode (make install),
	// then installs the package again: dpkg passes the old version, as for
	// an upgrade, but the unit must stay off beside the pre-registered copy
	// (one nri-housekeeper per node), and the admin is told.
	if _, err := exec.LookPath("deb-systemd-helper"); err == nil {
		copyPath := "/opt/nri/plugins/10-nri-housekeeper"
		if _, err := os.Stat(filepath.Dir(copyPath)); err != nil {
			if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(filepath.Dir(copyPath)); _ = os.Remove("/opt/nri") })
		}
		if err := os.WriteFile(copyPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(copyPath) })
		out, err := dpkgRun(t, "dpkg", "-i", deb)
		if err != nil {
			t.Fatalf("dpkg -i again: %v\n%s", err, out)
		}
		link := "/etc/systemd/system/multi-user.target.wants/nri-housekeeper.service"
		if _, err := os.Lstat(link); err == nil {
			t.Fatalf("installed again beside the pre-registered %s, the unit was enabled (%s); dpkg said:\n%s", copyPath, link, out)
		}
		if !strings.Contains(out, "is NOT enabled") {
			t.Errorf("installed again beside the pre-registered %s, dpkg -i does not say the unit is not enabled:\n%s", copyPath, out)
		}
		if err := os.Remove(copyPath); err != nil {
			t.Fatal(err)
		}
		if out, err := dpkgRun(t, "dpkg", "-r", "nri-housekeeper"); err != nil {
			t.Fatalf("dpkg -r: %v\n%s", err, out)
		}
	}

	// Purge: nothing left.
	if out, err := dpkgRun(t, "dpkg", "-P", "nri-housekeeper"); err != nil {
		t.Fatalf("dpkg -P: %v\n%s", err, out)
	}
	if s := packageState(t); s != "" && !strings.Contains(s, "not-installed") {
		t.Fatalf("after dpkg -P: status %q", s)
	}
	if traces := hostTraces(t); len(traces) > 0 {
		t.Fatalf("after dpkg -P these are left: %v", traces)
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// TestInstallSystemdUnitKeepsWhatThePluginNeeds guards the unit's hardening
// against options that would break the plugin: it writes to /sys/fs/cgroup,
// kills pod processes, reaches unix sockets and serves metrics over TCP;
// and its network side (on by default) reads every thread's netns in /proc,
// unmounts a leaked netns and runs CNI plugins that setns into a pod's netns
// and talk netlink. (The deb test verifies the installed unit with
// systemd-analyze verify.)
func TestInstallSystemdUnitKeepsWhatThePluginNeeds(t *testing.T) {
	unit := readFile(t, filepath.Join(repoRoot(t), "packaging/systemd/nri-housekeeper.service"))
	keys := map[string][]string{}
	section := ""
	for _, ln := range strings.Split(unit, "\n") {
		ln = strings.TrimSpace(ln)
		switch {
		case ln == "" || strings.HasPrefix(ln, "#"):
		case strings.HasPrefix(ln, "["):
			section = strings.Trim(ln, "[]")
		default:
			k, v, ok := strings.Cut(ln, "=")
			if !ok {
				t.Fatalf("unit line %q is not key=value", ln)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	for k, want := range map[string]string{
		"Unit.After":                      "containerd.service",
		"Unit.Wants":                      "containerd.service",
		"Service.Type":                    "simple",
		"Service.ExecStart":               "/usr/bin/nri-housekeeper run --config /etc/nri-housekeeper/config.toml",
		"Service.Restart":                 "always",
		"Service.RestartSec":              "2",
		"Service.CapabilityBoundingSet":   "CAP_KILL CAP_DAC_OVERRIDE CAP_FOWNER CAP_SYS_PTRACE CAP_SYS_ADMIN CAP_NET_ADMIN CAP_NET_RAW",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
		"Service.RestrictNamespaces":      "net",
		"Service.NoNewPrivileges":         "yes",
		"Service.StateDirectory":          "nri-housekeeper", // housekeeping.state_file's default dir
		"Service.StateDirectoryMode":      "0700",
		"Install.WantedBy":                "multi-user.target",
	} {
		if got := keys[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	// Each of these makes /sys/fs/cgroup read-only, takes the network,
	// changes who the plugin is, hides processes (a netns in use would
	// look unused), or blocks openat2 (RestrictSUIDSGID: every CNI DEL of a
	// namespace not mounted here would be refused).
	for _, k := range []string{"Service.ProtectKernelTunables", "Service.ProtectControlGroups", "Service.PrivateNetwork",
		"Service.ProtectProc", "Service.ProcSubset", "Service.RestrictSUIDSGID",
		"Service.User", "Service.DynamicUser", "Service.PrivateUsers", "Service.ReadOnlyPaths", "Service.InaccessiblePaths",
		"Service.StandardError", "Service.StandardOutput"} {
		if v, ok := keys[k]; ok {
			t.Errorf("unit sets %s=%v", k, v)
		}
	}
	// umount2 (a leaked netns) on top of @system-service, which has setns
	// and kill; nothing of it denied again.
	if v := keys["Service.SystemCallFilter"]; len(v) != 2 || v[0] != "@system-service umount2" || v[1] != "~@privileged @resources" {
		t.Errorf("SystemCallFilter=%q, want @system-service umount2, then ~@privileged @resources", v)
	}
	if v := keys["Service.ProtectSystem"]; len(v) != 1 || v[0] != "full" {
		t.Errorf("ProtectSystem=%v, want full (strict makes /var and /run read-only)", v)
	}
	if out, err := exec.Command("systemd-analyze", "security", "--offline=true",
		filepath.Join(repoRoot(t), "packaging/systemd/nri-housekeeper.service")).CombinedOutput(); err == nil {
		t.Logf("systemd-analyze security: %s", lastLines(string(out), 1))
	}
}
