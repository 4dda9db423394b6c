package podnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

// The testdata/cniconfig*.json files are what go-cni v1.1.14's GetConfig
// marshals, as containerd's CRI Status does, for testdata/confdir loaded the
// way containerd loads it (WithLoNetwork, WithDefaultConf), with
// max_conf_num 1 (containerd's default) and 0 (all).
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type wantNetwork struct {
	name, ifName, hostLocalDir string
	plugins                    []string // plugin types, in order
	disableGC                  bool
}

func checkNetworks(t *testing.T, got []Network, want []wantNetwork) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d networks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		var types []string
		for _, p := range g.List.Plugins {
			types = append(types, p.Network.Type)
		}
		if g.Name != w.name || g.IfName != w.ifName || g.HostLocalDir != w.hostLocalDir ||
			strings.Join(types, ",") != strings.Join(w.plugins, ",") || g.List.DisableGC != w.disableGC || g.List.Name != w.name {
			t.Errorf("network %d = {%s %s %q %v disableGC=%v}, want %+v", i, g.Name, g.IfName, g.HostLocalDir, types, g.List.DisableGC, w)
		}
	}
}

var testdataNetworks = []wantNetwork{
	{name: "cni-loopback", ifName: "lo", plugins: []string{"loopback"}},
	// host-local inside bridge's "ipam", no dataDir: host-local's default.
	{name: "containerd-net", ifName: "eth0", hostLocalDir: "/var/lib/cni/networks/containerd-net", plugins: []string{"bridge", "portmap"}},
	// A .conf, wrapped as a one-plugin list; host-local with a dataDir.
	{name: "macnet", ifName: "eth1", hostLocalDir: "/run/cni-ipam/macnet", plugins: []string{"macvlan"}},
	{name: "dhcpnet", ifName: "eth2", plugins: []string{"bridge", "tuning"}, disableGC: true},
	// The second plugin comes from confdir/split/*.conf, not the list's
	// own bytes, and its ipam is host-local.
	{name: "split", ifName: "eth3", hostLocalDir: "/var/lib/cni/split-ipam/split", plugins: []string{"ptp", "bandwidth"}},
}

func TestFromContainerdStatus(t *testing.T) {
	tests := []struct {
		rule string
		file string
		want []wantNetwork
	}{
		{"containerd's default loads loopback and the first conf file", "cniconfig.json", testdataNetworks[:2]},
		{"with max_conf_num 0 every conf file is a network, in order", "cniconfig-all.json", testdataNetworks},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			cfg, err := FromContainerdStatus(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Source != "containerd status" || cfg.ConfDir != "testdata/confdir" ||
				strings.Join(cfg.BinDirs, ":") != "/opt/cni/bin:/usr/libexec/cni" {
				t.Errorf("config = %q %q %q", cfg.Source, cfg.ConfDir, cfg.BinDirs)
			}
			checkNetworks(t, cfg.Networks, tt.want)
		})
	}

	t.Run("every list is rebuilt from the bytes libcni loaded and agrees with the conf dir", func(t *testing.T) {
		status, err := FromContainerdStatus(readTestdata(t, "cniconfig-all.json"))
		if err != nil {
			t.Fatal(err)
		}
		var raw goCNIConfig
		if err := json.Unmarshal([]byte(readTestdata(t, "cniconfig-all.json")), &raw); err != nil {
			t.Fatal(err)
		}
		dir, err := FromConfDir("testdata/confdir", status.BinDirs, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		checkNetworks(t, dir.Networks, testdataNetworks)
		for i, n := range status.Networks {
			if string(n.List.Bytes) != raw.Networks[i].Config.Source {
				t.Errorf("network %s: list bytes are not the Source", n.Name)
			}
			d := dir.Networks[i]
			if string(n.List.Bytes) != string(d.List.Bytes) {
				t.Errorf("network %s: list bytes differ from the conf dir's:\n%s\n%s", n.Name, n.List.Bytes, d.List.Bytes)
			}
			for j, p := range n.List.Plugins {
				if string(p.Bytes) != raw.Networks[i].Config.Plugins[j].Source || string(p.Bytes) != string(d.List.Plugins[j].Bytes) {
					t.Errorf("network %s plugin %d: bytes %s, want the plugin's Source", n.Name, j, p.Bytes)
				}
			}
		}
	})
}

// statusNet is one network of a hand-made go-cni ConfigResult.
type statusNet struct {
	name, version, source, ifName string
	plugins                       []string
}

func statusJSON(nets ...statusNet) string {
	type plugin struct{ Source string }
	type conf struct {
		Name, CNIVersion string
		Plugins          []plugin
		Source           string
	}
	type network struct {
		Config *conf
		IFName string
	}
	var r struct {
		PluginDirs       []string
		PluginConfDir    string
		PluginMaxConfNum int
		Prefix           string
		Networks         []network
	}
	r.PluginDirs, r.PluginConfDir, r.PluginMaxConfNum, r.Prefix = []string{"/opt/cni/bin"}, "/etc/cni/net.d", 1, "eth"
	for _, n := range nets {
		c := &conf{Name: n.name, CNIVersion: n.version, Source: n.source}
		for _, p := range n.plugins {
			c.Plugins = append(c.Plugins, plugin{p})
		}
		r.Networks = append(r.Networks, network{c, n.ifName})
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// bridgeNet is a valid one-plugin network.
func bridgeNet(name, ifName, ipam string) statusNet {
	p := `{"type":"bridge","ipam":` + ipam + `}`
	return statusNet{
		name: name, version: "1.0.0", ifName: ifName,
		source:  `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[` + p + `]}`,
		plugins: []string{p},
	}
}

func TestFromContainerdStatusErrors(t *testing.T) {
	good := bridgeNet("net", "eth0", `{"type":"host-local"}`)
	tests := []struct {
		rule      string
		cniconfig string
		want      string // in the error, besides "cniconfig"
	}{
		{"an empty value means containerd has loaded no CNI network", "", "containerd has loaded no CNI network"},
		{"null means containerd has loaded no CNI network", "null", "containerd has loaded no CNI network"},
		{"zero networks means containerd has loaded no CNI network", statusJSON(), "containerd has loaded no CNI network"},
		{"JSON that does not parse is an error", `{"Networks": [`, "unexpected end of JSON input"},
		{"no plugin dir is an error", strings.Replace(statusJSON(good), `"PluginDirs":["/opt/cni/bin"]`, `"PluginDirs":null`, 1), "names no plugin dir"},
		{"JSON of another shape is an error", `{"Networks": {}}`, "cannot unmarshal"},
		{"a network without configuration is an error", `{"PluginDirs":["/opt/cni/bin"],"Networks":[{"IFName":"eth0"}]}`, "network 0 has no configuration"},
		{"a network without source bytes is an error", statusJSON(statusNet{name: "net", version: "1.0.0", ifName: "eth0", plugins: good.plugins}), "no source bytes"},
		{"source bytes libcni cannot parse are an error", statusJSON(statusNet{name: "net", version: "1.0.0", ifName: "eth0", source: "{nope", plugins: good.plugins}), "its source"},
		{"a summary name that disagrees with the source is an error", statusJSON(statusNet{name: "other", version: "1.0.0", ifName: "eth0", source: good.source, plugins: good.plugins}), `the summary says "other"`},
		{"a summary version that disagrees with the source is an error", statusJSON(statusNet{name: "net", version: "0.4.0", ifName: "eth0", source: good.source, plugins: good.plugins}), `version "0.4.0"`},
		{"a network without plugins is an error", statusJSON(statusNet{name: "net", version: "1.0.0", ifName: "eth0", source: good.source}), "no plugins"},
		{"a plugin that differs between source and plugin list is an error", statusJSON(statusNet{name: "net", version: "1.0.0", ifName: "eth0", source: good.source, plugins: []string{`{"type":"macvlan"}`}}), "differs between the network's source and the plugin list"},
		{"a plugin without a type is an error", statusJSON(statusNet{name: "net", version: "1.0.0", ifName: "eth0", source: `{"cniVersion":"1.0.0","name":"net"}`, plugins: []string{`{"ipam":{}}`}}), "missing 'type'"},
		{"an interface name that is not one is an error", statusJSON(bridgeNet("net", "eth 0", `{}`)), "interface name"},
		{"an invalid network name is an error", statusJSON(bridgeNet("net/x", "eth0", `{}`)), "network name"},
		{"two networks of one name are an error", statusJSON(good, bridgeNet("net", "eth1", `{}`)), `both named "net"`},
		{"a relative host-local dataDir is an error", statusJSON(bridgeNet("net", "eth0", `{"type":"host-local","dataDir":"var/lib/x"}`)), "not an absolute path"},
		{"host-local with two data dirs in one chain is an error", statusJSON(statusNet{
			name: "net", version: "1.0.0", ifName: "eth0",
			source:  `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"a","ipam":{"type":"host-local"}},{"type":"b","ipam":{"type":"host-local","dataDir":"/x"}}]}`,
			plugins: []string{`{"ipam":{"type":"host-local"},"type":"a"}`, `{"ipam":{"dataDir":"/x","type":"host-local"},"type":"b"}`},
		}), "different data dirs"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			cfg, err := FromContainerdStatus(tt.cniconfig)
			if err == nil {
				t.Fatalf("FromContainerdStatus = %+v, want an error", cfg)
			}
			if !strings.Contains(err.Error(), `"cniconfig"`) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to name \"cniconfig\" and say %q", err, tt.want)
			}
			t.Logf("error as wanted: %v", err)
			// Only "no network" is nothing wrong (said once at info); every
			// other error is a broken configuration (said as an error).
			if noNetwork := strings.Contains(tt.rule, "no CNI network"); errors.Is(err, ErrNoNetwork) != noNetwork {
				t.Fatalf("errors.Is(err, ErrNoNetwork) = %v, want %v: %v", !noNetwork, noNetwork, err)
			}
		})
	}

	t.Run("the default data dir and a dataDir both resolve per network", func(t *testing.T) {
		cfg, err := FromContainerdStatus(statusJSON(good, bridgeNet("other", "eth1", `{"type":"host-local","dataDir":"/run/ipam/"}`), bridgeNet("dhcp", "eth2", `{"type":"dhcp"}`)))
		if err != nil {
			t.Fatal(err)
		}
		checkNetworks(t, cfg.Networks, []wantNetwork{
			{name: "net", ifName: "eth0", hostLocalDir: "/var/lib/cni/networks/net", plugins: []string{"bridge"}},
			{name: "other", ifName: "eth1", hostLocalDir: "/run/ipam/other", plugins: []string{"bridge"}},
			{name: "dhcp", ifName: "eth2", plugins: []string{"bridge"}},
		})
	})
}

func TestFromConfDir(t *testing.T) {
	conflist := func(name string) string {
		return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"bridge","ipam":{"type":"host-local"}}]}`
	}
	conf := func(name string) string {
		return `{"cniVersion":"0.4.0","name":"` + name + `","type":"macvlan","ipam":{"type":"host-local","dataDir":"/run/x"}}`
	}
	files := map[string]string{
		"10-a.conflist": conflist("a"),
		"20-b.conf":     conf("b"),
		"30-c.json":     conf("c"),
		"40-d.conflist": conflist("d"),
		"README.md":     "not a network",
		"05-z.yaml":     "not a network either",
	}
	a := wantNetwork{name: "a", ifName: "eth0", hostLocalDir: "/var/lib/cni/networks/a", plugins: []string{"bridge"}}
	b := wantNetwork{name: "b", ifName: "eth1", hostLocalDir: "/run/x/b", plugins: []string{"macvlan"}}
	c := wantNetwork{name: "c", ifName: "eth2", hostLocalDir: "/run/x/c", plugins: []string{"macvlan"}}
	d := wantNetwork{name: "d", ifName: "eth3", hostLocalDir: "/var/lib/cni/networks/d", plugins: []string{"bridge"}}
	lo := wantNetwork{name: "cni-loopback", ifName: "lo", plugins: []string{"loopback"}}
	tests := []struct {
		rule     string
		extra    map[string]string
		max      int
		loopback bool
		want     []wantNetwork
		wantErr  string
	}{
		{rule: "files load in lexical order as eth0, eth1, ...; .conf and .json are one-plugin lists", max: 0, want: []wantNetwork{a, b, c, d}},
		{rule: "at most max_conf_num networks load (containerd's default: 1)", max: 1, want: []wantNetwork{a}},
		{rule: "max_conf_num 3 loads the first three", max: 3, want: []wantNetwork{a, b, c}},
		{rule: "a negative max_conf_num loads all", max: -1, want: []wantNetwork{a, b, c, d}},
		{rule: "the loopback network comes first, on lo", max: 1, loopback: true, want: []wantNetwork{lo, a}},
		{rule: "a bad file after the last one loaded is never read", max: 2, extra: map[string]string{"99-bad.conflist": "{nope"}, want: []wantNetwork{a, b}},
		{rule: "a bad file among those loaded is an error naming it", max: 0, extra: map[string]string{"25-bad.conflist": "{nope"}, wantErr: "25-bad.conflist"},
		{rule: "a .conf without a type is an error naming it", max: 0, extra: map[string]string{"15-notype.conf": `{"name":"x"}`}, wantErr: "15-notype.conf"},
		{rule: "two files of one network name are an error", max: 0, extra: map[string]string{"50-a.conflist": conflist("a")}, wantErr: `both named "a"`},
		{rule: "a list's plugins in <conf dir>/<name>/*.conf come after its own, in lexical order", max: 1,
			extra: map[string]string{"a/20-y.conf": `{"type":"tuning"}`, "a/10-x.conf": `{"type":"portmap"}`, "a/30-z.json": `{"type":"firewall"}`},
			want:  []wantNetwork{{name: "a", ifName: "eth0", hostLocalDir: "/var/lib/cni/networks/a", plugins: []string{"bridge", "portmap", "tuning"}}}},
		{rule: "a list without plugins of its own takes them all from <conf dir>/<name>/*.conf", max: 1,
			extra: map[string]string{"05-e.conflist": `{"cniVersion":"1.0.0","name":"e"}`, "e/10-x.conf": `{"type":"bridge","ipam":{"type":"host-local"}}`},
			want:  []wantNetwork{{name: "e", ifName: "eth0", hostLocalDir: "/var/lib/cni/networks/e", plugins: []string{"bridge"}}}},
		{rule: "a list that loads only inlined plugins leaves <conf dir>/<name>/ alone", max: 1,
			extra: map[string]string{"05-e.conflist": `{"cniVersion":"1.0.0","name":"e","loadOnlyInlinedPlugins":true,"plugins":[{"type":"bridge"}]}`, "e/10-x.conf": `{"type":"portmap"}`},
			want:  []wantNetwork{{name: "e", ifName: "eth0", plugins: []string{"bridge"}}}},
		{rule: "a list with no plugin anywhere is an error naming it", max: 1, extra: map[string]string{"05-e.conflist": `{"cniVersion":"1.0.0","name":"e"}`}, wantErr: "05-e.conflist"},
		{rule: "a bad plugin file in <conf dir>/<name>/ is an error naming the list", max: 1, extra: map[string]string{"a/10-x.conf": `{"nope":1}`}, wantErr: "10-a.conflist"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			for name, content := range tt.extra {
				writeFile(t, filepath.Join(dir, name), content)
			}
			mkdirAll(t, filepath.Join(dir, "60-dir.conflist")) // a directory is not a file
			cfg, err := FromConfDir(dir, []string{"/opt/cni/bin"}, tt.max, tt.loopback)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				t.Logf("error as wanted: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Source != "conf dir "+dir || cfg.ConfDir != dir {
				t.Errorf("Source %q ConfDir %q", cfg.Source, cfg.ConfDir)
			}
			checkNetworks(t, cfg.Networks, tt.want)
		})
	}

	t.Run("a missing conf dir means containerd has loaded no CNI network", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "net.d")
		_, err := FromConfDir(dir, nil, 1, true)
		if err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, ErrNoNetwork) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a conf dir without network files means containerd has loaded no CNI network", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "README"), "")
		_, err := FromConfDir(dir, nil, 1, true)
		if err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, ErrNoNetwork) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestFromConfDirRefusesWhatIsNotARegularFileWithoutBlocking: a FIFO in
// the conf dir (a CNI installer's, another agent's) is refused, not read: a
// read would wait for a writer for ever, and so would every pass that
// loads the networks. A device is refused too (/dev/zero never ends), and
// so is a file larger than any CNI config. Each error names the file.
func TestFromConfDirRefusesWhatIsNotARegularFileWithoutBlocking(t *testing.T) {
	const list = `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`
	mkfifo := func(t *testing.T, path string) {
		mkdirAll(t, filepath.Dir(path))
		if err := unix.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		rule    string
		setup   func(t *testing.T, dir string)
		confDir string // below dir; "" for dir itself
		wantErr string // below dir
	}{
		{"a FIFO named as a conflist", func(t *testing.T, dir string) {
			mkfifo(t, filepath.Join(dir, "10-a.conflist"))
		}, "", "10-a.conflist is a FIFO, not a regular file"},
		{"a FIFO named as a .conf", func(t *testing.T, dir string) {
			mkfifo(t, filepath.Join(dir, "10-a.conf"))
		}, "", "10-a.conf is a FIFO, not a regular file"},
		{"a FIFO among a list's plugin files", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "10-a.conflist"), list)
			mkfifo(t, filepath.Join(dir, "a", "10-x.conf"))
		}, "", filepath.Join("a", "10-x.conf") + " is a FIFO, not a regular file"},
		{"a FIFO in place of a list's plugin dir", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "10-a.conflist"), list)
			mkfifo(t, filepath.Join(dir, "a"))
		}, "", "a is a FIFO, want a directory"},
		{"a FIFO in place of the conf dir", func(t *testing.T, dir string) {
			mkfifo(t, filepath.Join(dir, "net.d"))
		}, "net.d", "net.d is a FIFO, want a directory"},
		{"a link to a character device named as a conflist", func(t *testing.T, dir string) {
			if err := os.Symlink("/dev/zero", filepath.Join(dir, "10-a.conflist")); err != nil {
				t.Fatal(err)
			}
		}, "", "10-a.conflist is a character device, not a regular file"},
		{"a conflist larger than any CNI config", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "10-a.conflist"), list+strings.Repeat(" ", maxConfFileSize))
		}, "", fmt.Sprintf("10-a.conflist is more than %d bytes", maxConfFileSize)},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			var err error
			regularfiletest.ReturnsWithin(t, func() { _, err = FromConfDir(filepath.Join(dir, tt.confDir), []string{"/opt/cni/bin"}, 0, false) })
			if want := filepath.Join(dir, tt.wantErr); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want one saying %q", err, want)
			}
			t.Logf("error as wanted: %v", err)
		})
	}

	t.Run("a link to a regular file is followed, as by containerd", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "elsewhere", "a.json"), list)
		if err := os.Symlink(filepath.Join("elsewhere", "a.json"), filepath.Join(dir, "10-a.conflist")); err != nil {
			t.Fatal(err)
		}
		cfg, err := FromConfDir(dir, []string{"/opt/cni/bin"}, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		checkNetworks(t, cfg.Networks, []wantNetwork{{name: "a", ifName: "eth0", hostLocalDir: "", plugins: []string{"bridge"}}})
	})
}

// TestAPluginFileOfAConflistThatDoesNotParseIsNamed: a .conflist's plugins
// may also come from <conf dir>/<its name>/*.conf (libcni's non-inlined
// plugins); one that does not parse is named, not the .conflist.
func TestAPluginFileOfAConflistThatDoesNotParseIsNamed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "pods"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "pods", "20-extra.conf")
	if err := os.WriteFile(bad, []byte(`{"name":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := FromConfDir(dir, []string{"/opt/cni/bin"}, 1, false); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("err = %v; want it to name %s", err, bad)
	}
}

// k3sFlannelConfList is k3s' default conflist: flannel hands its delegate
// (bridge with host-local) a configuration of its own, so the conflist has
// no "ipam" section.
const k3sFlannelConfList = `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true,"forceAddress":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`

// TestANetworkWhoseIPAMIsNotInItsConflistIsMarked: a network no plugin of
// whose chain has an "ipam" section (a meta plugin such as flannel) has no
// host-local dir, and is marked, so that the reservations never listed are
// said; one whose IPAM the conflist names, host-local or not, is not, and
// neither is containerd's loopback network, which gives no address.
func TestANetworkWhoseIPAMIsNotInItsConflistIsMarked(t *testing.T) {
	for _, tc := range []struct {
		rule, conflist string
		want           bool
	}{
		{"flannel (k3s' default) is marked", k3sFlannelConfList, true},
		{"bridge with host-local is not", `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge","ipam":{"type":"host-local"}},{"type":"portmap"}]}`, false},
		{"another IPAM the conflist names is not", `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"portmap"}]}`, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "10-net.conflist"), tc.conflist)
			cfg, err := FromConfDir(dir, []string{"/opt/cni/bin"}, 1, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Networks) != 2 || cfg.Networks[0].Name != "cni-loopback" {
				t.Fatalf("networks = %+v, want cni-loopback and the conflist's", cfg.Networks)
			}
			if lo := cfg.Networks[0]; lo.IPAMNotInConfList {
				t.Errorf("containerd's loopback network is marked")
			}
			n := cfg.Networks[1]
			if n.IPAMNotInConfList != tc.want {
				t.Errorf("network %s: IPAMNotInConfList = %v, want %v (host-local dir %q)", n.Name, n.IPAMNotInConfList, tc.want, n.HostLocalDir)
			}
			if tc.want && n.HostLocalDir != "" {
				t.Errorf("network %s: host-local dir %q", n.Name, n.HostLocalDir)
			}
		})
	}
}
