package podnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/utils"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// Network is one CNI network containerd uses.
type Network struct {
	// Name is the network's name: the first part of its cache entries'
	// names and the directory host-local keeps its reservations in.
	Name string
	// IfName is the interface containerd gives the network in a pod: "lo"
	// for the loopback network, else go-cni's "eth" + the network's index
	// among the conf dir's networks ("eth0", "eth1", ...).
	IfName string
	// List is the network as libcni runs it: CNI DEL goes through its
	// plugins, last first.
	List *libcni.NetworkConfigList
	// HostLocalDir is <dataDir>/<Name>, where host-local keeps this
	// network's reservations, when some plugin of the chain has an "ipam"
	// section of type host-local ("dataDir" defaults to
	// /var/lib/cni/networks); "" otherwise.
	HostLocalDir string
	// IPAMNotInConfList: no plugin of the chain has an "ipam" section,
	// and the chain is not loopback alone (containerd's cni-loopback,
	// which gives no address). Whatever gives its addresses is
	// configured elsewhere (a meta plugin such as flannel hands host-local
	// a configuration of its own), so its reservations are not known
	// here: those without a cache entry are never listed.
	IPAMNotInConfList bool
}

// Config is containerd's CNI configuration: the networks its CRI plugin
// attaches every pod to, in order.
type Config struct {
	// Source says where the configuration was read, for logs:
	// "containerd status" or "conf dir <path>".
	Source string
	// ConfDir is containerd's CNI conf dir.
	ConfDir string
	// BinDirs are the directories CNI plugins are run from.
	BinDirs []string
	// Networks are the networks, in containerd's order.
	Networks []Network
}

// Network returns the network named name.
func (c Config) Network(name string) (Network, bool) {
	for _, n := range c.Networks {
		if n.Name == name {
			return n, true
		}
	}
	return Network{}, false
}

// goCNIConfig is go-cni's ConfigResult as encoding/json writes it (the type
// has no JSON tags): what containerd's CRI Status puts in its verbose info
// under "cniconfig". Only the fields used here are declared.
type goCNIConfig struct {
	PluginDirs    []string
	PluginConfDir string
	Networks      []*goCNINetwork
}

// goCNINetwork is go-cni's ConfNetwork.
type goCNINetwork struct {
	Config *goCNIConfList
	IFName string
}

// goCNIConfList is go-cni's NetworkConfList: libcni's NetworkConfigList with
// its bytes as strings, and a summary of each plugin (not used here).
type goCNIConfList struct {
	Name       string
	CNIVersion string
	Plugins    []*goCNIPlugin
	Source     string // the network's bytes: its file, or the list made from a .conf
}

// goCNIPlugin is go-cni's NetworkConf.
type goCNIPlugin struct {
	Source string // the plugin's own bytes, as libcni runs it
}

// ErrNoNetwork: containerd has loaded no CNI network (a node whose pods all
// use the host's network). Nothing of the network is there to look at, and
// nothing is wrong; any other configuration error is one.
var ErrNoNetwork = errors.New("containerd has loaded no CNI network")

// FromContainerdStatus parses the value of "cniconfig" in the verbose info of
// containerd's CRI Status: go-cni's ConfigResult as JSON, the networks
// containerd has actually loaded (default runtime handler only: the conf dirs
// of other runtime handlers are not reported, so their networks are not
// containerd's here and none of their objects is ever listed).
//
// Every network's List is rebuilt from the bytes libcni loaded (the network's
// Source with libcni.ConfListFromBytes, and each plugin's own Source), never
// from go-cni's summary of them; the network's name and version in the summary
// must agree with the rebuilt list. A plugin that libcni loaded from
// <confDir>/<name>/*.conf is not in the network's Source: it comes from the
// plugin list, after the inlined plugins, which must be the same in both.
func FromContainerdStatus(cniconfig string) (Config, error) {
	if s := strings.TrimSpace(cniconfig); s == "" || s == "null" {
		return Config{}, fmt.Errorf(`containerd's CRI status has no CNI configuration ("cniconfig" is %q): %w`, s, ErrNoNetwork)
	}
	var st goCNIConfig
	if err := json.Unmarshal([]byte(cniconfig), &st); err != nil {
		return Config{}, fmt.Errorf(`parsing the CNI configuration in containerd's CRI status ("cniconfig"): %w`, err)
	}
	cfg := Config{Source: "containerd status", ConfDir: st.PluginConfDir, BinDirs: st.PluginDirs}
	if len(st.PluginDirs) == 0 {
		return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig") names no plugin dir: no CNI DEL could run`)
	}
	if len(st.Networks) == 0 {
		return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig") lists no network (conf dir %q): %w`, st.PluginConfDir, ErrNoNetwork)
	}
	for i, sn := range st.Networks {
		if sn == nil || sn.Config == nil {
			return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig"): network %d has no configuration`, i)
		}
		var plugins []string
		for j, p := range sn.Config.Plugins {
			if p == nil {
				return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig"): network %d (%q): plugin %d is null`, i, sn.Config.Name, j)
			}
			plugins = append(plugins, p.Source)
		}
		list, err := rebuildList(sn.Config.Name, sn.Config.CNIVersion, sn.Config.Source, plugins)
		if err != nil {
			return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig"): network %d (%q): %w`, i, sn.Config.Name, err)
		}
		n, err := newNetwork(list, sn.IFName)
		if err != nil {
			return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig"): network %d: %w`, i, err)
		}
		cfg.Networks = append(cfg.Networks, n)
	}
	if err := checkDistinct(cfg.Networks); err != nil {
		return Config{}, fmt.Errorf(`the CNI configuration in containerd's CRI status ("cniconfig"): %w`, err)
	}
	return cfg, nil
}

// rebuildList makes the network list libcni loaded from its bytes: the list
// from source, its plugins from plugins (the bytes of each, as libcni runs
// them). The plugins inlined in source must be the first ones of plugins.
func rebuildList(name, cniVersion, source string, plugins []string) (*libcni.NetworkConfigList, error) {
	if source == "" {
		return nil, errors.New("no source bytes")
	}
	list, err := libcni.ConfListFromBytes([]byte(source))
	if err != nil {
		return nil, fmt.Errorf("its source: %w", err)
	}
	if list.Name != name || list.CNIVersion != cniVersion {
		return nil, fmt.Errorf("its source is network %q version %q, the summary says %q version %q", list.Name, list.CNIVersion, name, cniVersion)
	}
	if len(plugins) == 0 {
		return nil, errors.New("no plugins")
	}
	if len(list.Plugins) > len(plugins) {
		return nil, fmt.Errorf("its source has %d plugins, the plugin list only %d", len(list.Plugins), len(plugins))
	}
	inlined := list.Plugins
	list.Plugins = nil
	for i, src := range plugins {
		p, err := libcni.NetworkPluginConfFromBytes([]byte(src))
		if err != nil {
			return nil, fmt.Errorf("plugin %d: %w", i, err)
		}
		if i < len(inlined) && !sameJSON(inlined[i].Bytes, p.Bytes) {
			return nil, fmt.Errorf("plugin %d (type %q) differs between the network's source and the plugin list", i, p.Network.Type)
		}
		list.Plugins = append(list.Plugins, p)
	}
	return list, nil
}

// sameJSON reports whether a and b are the same bytes or the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// loopbackConf is the network go-cni's WithLoNetwork adds, byte for byte:
// containerd's CRI loads it first unless use_internal_loopback is set.
const loopbackConf = `{
"cniVersion": "0.3.1",
"name": "cni-loopback",
"plugins": [{
  "type": "loopback"
}]
}`

// FromConfDir loads the networks from confDir as containerd's CRI plugin does
// (go-cni's WithLoNetwork and WithDefaultConf): the files ending in .conf,
// .conflist or .json, in lexical order, at most maxConfNum of them (<= 0: all;
// containerd's max_conf_num defaults to 1); a .conflist with libcni's
// ConfListFromFile (plugins in <confDir>/<name>/*.conf included), any other
// file as a single plugin wrapped into a list. The networks get go-cni's
// interface names, "eth0", "eth1", ... in that order. With loopback (the
// default unless containerd's use_internal_loopback is set) the cni-loopback
// network on "lo" comes first, as containerd loads it.
//
// It is the fallback when containerd's status carries no "cniconfig": what it
// returns is what containerd would load now, which can differ from what it
// loaded (containerd reloads on changes, and keeps its old networks when a
// new file does not load). As in go-cni, a file that does not load is an
// error even when it is not the first. Unlike libcni, it reads no file
// that is not a regular file (containerd's loader would wait for ever on a
// FIFO; this is an error naming it) and no file larger than
// maxConfFileSize.
func FromConfDir(confDir string, binDirs []string, maxConfNum int, loopback bool) (Config, error) {
	cfg := Config{Source: "conf dir " + confDir, ConfDir: confDir, BinDirs: binDirs}
	if loopback {
		list, err := libcni.ConfListFromBytes([]byte(loopbackConf))
		if err != nil {
			return Config{}, fmt.Errorf("the loopback network: %w", err)
		}
		cfg.Networks = append(cfg.Networks, Network{Name: list.Name, IfName: "lo", List: list})
	}
	files, err := confFiles(confDir, ".conf", ".conflist", ".json")
	if err != nil {
		return Config{}, fmt.Errorf("reading CNI conf dir %s: %w", confDir, err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(confDir); errors.Is(err, fs.ErrNotExist) {
			return Config{}, fmt.Errorf("CNI conf dir %s does not exist: %w", confDir, ErrNoNetwork)
		}
		return Config{}, fmt.Errorf("no network config (*.conf, *.conflist, *.json) in CNI conf dir %s: %w", confDir, ErrNoNetwork)
	}
	sort.Strings(files)
	loaded := 0
	for _, file := range files {
		list, err := loadConfFile(file)
		if err != nil {
			return Config{}, err
		}
		n, err := newNetwork(list, fmt.Sprintf("eth%d", loaded))
		if err != nil {
			return Config{}, fmt.Errorf("CNI config file %s: %w", file, err)
		}
		cfg.Networks = append(cfg.Networks, n)
		loaded++
		if loaded == maxConfNum {
			break
		}
	}
	if err := checkDistinct(cfg.Networks); err != nil {
		return Config{}, fmt.Errorf("CNI conf dir %s: %w", confDir, err)
	}
	return cfg, nil
}

// loadConfFile loads one file of the conf dir as go-cni's loadFromConfDir
// does, with libcni's parsers. The files are read by readConfFile, not by
// libcni's loaders, whose reads would block on a FIFO.
func loadConfFile(file string) (*libcni.NetworkConfigList, error) {
	var list *libcni.NetworkConfigList
	if strings.HasSuffix(file, ".conflist") {
		l, err := confListFromFile(file)
		if err != nil {
			return nil, fmt.Errorf("loading CNI config list file %s: %w", file, err)
		}
		list = l
	} else {
		data, err := readConfFile(file)
		if err != nil {
			return nil, fmt.Errorf("loading CNI config file %s: %w", file, err)
		}
		// The deprecated single-plugin format, loaded and wrapped
		// into a list with the calls go-cni makes, so that the list's
		// bytes are the ones containerd runs.
		//lint:ignore SA1019 go-cni loads .conf and .json files with it (ConfFromFile: these bytes)
		conf, err := libcni.ConfFromBytes(data)
		if err != nil {
			return nil, fmt.Errorf("loading CNI config file %s: %w", file, err)
		}
		//lint:ignore SA1019 go-cni wraps .conf and .json files with it
		if list, err = libcni.ConfListFromConf(conf); err != nil {
			return nil, fmt.Errorf("converting CNI config file %s to a list: %w", file, err)
		}
	}
	if len(list.Plugins) == 0 {
		return nil, fmt.Errorf("CNI config file %s has no plugins", file)
	}
	return list, nil
}

// confListFromFile is libcni's ConfListFromFile (NetworkConfFromFile, as of
// libcni v1.3.1): the list in file, then, unless it loads only inlined
// plugins, the plugins in <file's dir>/<list name>/*.conf in lexical
// order; no plugin at all is an error. Every file is read by readConfFile.
func confListFromFile(file string) (*libcni.NetworkConfigList, error) {
	data, err := readConfFile(file)
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	if !list.LoadOnlyInlinedPlugins {
		dir := filepath.Join(filepath.Dir(file), list.Name)
		files, err := confFiles(dir, ".conf")
		if err != nil {
			return nil, fmt.Errorf("failed to read plugin config files in %s: %w", dir, err)
		}
		for _, f := range files {
			data, err := readConfFile(f)
			if err != nil {
				return nil, err
			}
			p, err := libcni.NetworkPluginConfFromBytes(data)
			if err != nil {
				return nil, fmt.Errorf("CNI plugin config file %s: %w", f, err)
			}
			list.Plugins = append(list.Plugins, p)
		}
	}
	if len(list.Plugins) == 0 {
		return nil, errors.New("no plugin configs found")
	}
	return list, nil
}

// confFiles is libcni's ConfFiles: the paths of dir's entries that are not
// directories and whose names end in one of exts, sorted by name; none
// when dir does not exist. dirlist refuses a dir that is not a directory
// without opening it (a FIFO would block os.ReadDir for ever).
func confFiles(dir string, exts ...string) ([]string, error) {
	entries, err := dirlist.Read(context.Background(), dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && slices.Contains(exts, filepath.Ext(e.Name())) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return files, nil
}

// maxConfFileSize bounds how much of a CNI config file is read. Real ones
// are a few KiB, and libcni copies a network's config into every cache
// entry, which is read only up to maxCacheEntrySize.
const maxConfFileSize = maxCacheEntrySize

// readConfFile reads a CNI config file as libcni does (os.ReadFile: a
// symlink is followed), except that what is not a regular file is refused
// before it is read (see regularfile), and so is a file larger than
// maxConfFileSize. The error names path.
func readConfFile(path string) ([]byte, error) {
	data, _, err := regularfile.Read(path, os.O_RDONLY, maxConfFileSize)
	return data, err
}

// newNetwork checks list and ifName and finds the network's host-local dir.
func newNetwork(list *libcni.NetworkConfigList, ifName string) (Network, error) {
	if err := utils.ValidateNetworkName(list.Name); err != nil {
		return Network{}, fmt.Errorf("network name %q: %s", list.Name, err.Msg)
	}
	if r := validIfName(ifName); r != "" {
		return Network{}, fmt.Errorf("network %q: %s", list.Name, r)
	}
	dir, err := hostLocalDir(list)
	if err != nil {
		return Network{}, fmt.Errorf("network %q: %w", list.Name, err)
	}
	return Network{Name: list.Name, IfName: ifName, List: list, HostLocalDir: dir, IPAMNotInConfList: ipamNotInConfList(list)}, nil
}

// ipamNotInConfList reports whether no plugin of list names an IPAM plugin
// in an "ipam" section, for a chain that gives addresses: any but one of
// loopback plugins only.
func ipamNotInConfList(list *libcni.NetworkConfigList) bool {
	loopbackOnly := true
	for _, p := range list.Plugins {
		if p.Network.IPAM.Type != "" {
			return false
		}
		if p.Network.Type != "loopback" {
			loopbackOnly = false
		}
	}
	return !loopbackOnly
}

// hostLocalDir returns where host-local keeps the network's reservations
// when a plugin of the chain uses it: <dataDir>/<network name>, as
// host-local's disk.New computes it from the plugin's stdin (libcni injects
// the list's name into every plugin's configuration). The ipam section is
// decoded the way host-local's allocator.LoadIPAMConfig decodes it.
func hostLocalDir(list *libcni.NetworkConfigList) (string, error) {
	var dirs []string
	for i, p := range list.Plugins {
		var conf struct {
			IPAM *struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if err := json.Unmarshal(p.Bytes, &conf); err != nil {
			return "", fmt.Errorf("plugin %d: decoding its ipam section: %w", i, err)
		}
		if conf.IPAM == nil || conf.IPAM.Type != "host-local" {
			continue
		}
		dataDir := conf.IPAM.DataDir
		if dataDir == "" {
			dataDir = defaultHostLocalDataDir
		}
		if !filepath.IsAbs(dataDir) {
			return "", fmt.Errorf("plugin %d: host-local dataDir %q is not an absolute path: where it points depends on the working directory of whoever runs the plugin", i, dataDir)
		}
		dir := filepath.Join(dataDir, list.Name)
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	switch len(dirs) {
	case 0:
		return "", nil
	case 1:
		return dirs[0], nil
	}
	return "", fmt.Errorf("plugins use host-local with different data dirs (%s): not supported", strings.Join(dirs, ", "))
}

// checkDistinct refuses two networks of the same name: their cache entries
// and reservations could not be told apart.
func checkDistinct(networks []Network) error {
	seen := map[string]int{}
	for i, n := range networks {
		if j, ok := seen[n.Name]; ok {
			return fmt.Errorf("networks %d and %d are both named %q: their cache entries and reservations cannot be told apart", j, i, n.Name)
		}
		seen[n.Name] = i
	}
	return nil
}
