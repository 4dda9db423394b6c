package podnet

import (
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
)

// fakeInfo is the fstat of a cache entry or reservation file.
type fakeInfo struct{ size int64 }

func (i fakeInfo) Name() string       { return "f" }
func (i fakeInfo) Size() int64        { return i.size }
func (i fakeInfo) Mode() fs.FileMode  { return 0o600 }
func (i fakeInfo) ModTime() time.Time { return time.Unix(1700000000, 0) }
func (i fakeInfo) IsDir() bool        { return false }
func (i fakeInfo) Sys() any           { return nil }

// fuzzCacheEntry is a cache entry as libcni writes it, with result as its
// "result".
func fuzzCacheEntry(id, result string) string {
	return `{"kind":"cniCacheV1","containerId":"` + id + `","config":"eyJ0eXBlIjoiYnJpZGdlIn0=","ifName":"eth0","networkName":"pods",` +
		`"netns":"/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a30","cniArgs":[["K8S_POD_NAMESPACE","default"],["K8S_POD_NAME","web"]],` +
		`"capabilityArgs":{"portMappings":[]},"result":` + result + `}`
}

// FuzzParseCacheEntry: a cache entry's content never panics the parser, and
// an entry taken as an attachment is one libcni's DEL would act on: its IDs
// pass libcni's validators, the file's name is libcni's name for it, and
// every IP it names is an IP.
func FuzzParseCacheEntry(f *testing.F) {
	id := containerID(1)
	name := "pods-" + id + "-eth0"
	for _, data := range []string{
		fuzzCacheEntry(id, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.22.0.5/16","gateway":"10.22.0.1","interface":0}]}`),
		fuzzCacheEntry(id, `{"cniVersion":"0.2.0","ip4":{"ip":"10.22.0.5/16","gateway":"10.22.0.1"},"dns":{}}`),
		fuzzCacheEntry(id, `{"cniVersion":"0.4.0","ips":[{"version":"6","address":"fd00::5/64"}]}`),
		fuzzCacheEntry(id, `null`),
		fuzzCacheEntry(id, `[]`),
		fuzzCacheEntry("../x", `{}`),
		`{"kind":"cniCacheV1","containerId":"x","networkName":"pods"}`,
		`{"kind":"cniCacheV2"}`,
		`{"kind":"cniCacheV1","config":"%%%","ifName":"eth0","networkName":"pods"}`,
		``, `null`, `{`,
	} {
		f.Add([]byte(data), name)
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		path := "/var/lib/cni/results/" + name
		a, reason := parseCacheEntry(path, name, data, fakeInfo{int64(len(data))})
		if reason != "" {
			return
		}
		switch {
		case a.CacheFile != path:
			t.Fatalf("attachment of %s in %s", a.CacheFile, path)
		case validNetworkName(a.Network) != "" || validID(a.ContainerID) != "" || validIfName(a.IfName) != "":
			t.Fatalf("accepted an attachment with IDs libcni refuses: %+v", a)
		case cacheFileName(a.Network, a.ContainerID, a.IfName) != name:
			t.Fatalf("accepted %+v from a file named %q", a, name)
		case strings.ContainsAny(name, "/\x00") || filepath.Base(path) != name:
			t.Fatalf("accepted a name that is no plain path element: %q", name)
		}
		for _, ip := range a.IPs {
			if net.ParseIP(ip) == nil {
				t.Fatalf("%q among the IPs of %+v", ip, a)
			}
		}
	})
}

// FuzzResultIPs: a cached result of any version never panics the
// conversion libcni's DEL makes of it, and yields only IPs, each written as
// net.IP writes it (the name host-local gives its reservation file). The
// explicit check of null elements (nullElementConverted) knows every panic
// of libcni's conversions to the versions a DEL converts to: where it
// finds none, libcni's conversion runs without recover.
func FuzzResultIPs(f *testing.F) {
	for _, r := range []string{
		`{"cniVersion":"1.0.0","ips":[{"address":"10.22.0.5/16"}]}`,
		`{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.22.0.5/16","gateway":"10.22.0.1"}]}`,
		`{"cniVersion":"0.2.0","ip4":{"ip":"10.22.0.5/16","gateway":"10.22.0.1"},"ip6":{"ip":"fd00::5/64"}}`,
		`{"cniVersion":"0.1.0","ip4":{"ip":"10.22.0.5/16","routes":[{"dst":"0.0.0.0/0"}]}}`,
		`{"cniVersion":"0.2.0","ip4":{}}`,
		`{"cniVersion":"0.2.0","ip4":null,"ip6":{"ip":""}}`,
		`{"cniVersion":"0.2.0"}`,
		`{"ips":[]}`,
		`{"cniVersion":"9.9.9"}`,
		`null`, ``,
		// Null elements libcni's conversions dereference.
		`{"cniVersion":"0.4.0","ips":[null]}`,
		`{"cniVersion":"0.3.1","interfaces":[null]}`,
		`{"cniVersion":"0.3.0","ips":[{"version":"4","address":"10.22.0.5/16"}],"routes":[null]}`,
		`{"cniVersion":"1.0.0","ips":[null,{"address":"10.22.0.5/16"}]}`,
		`{"cniVersion":"1.1.0","interfaces":[null],"routes":[null]}`,
	} {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, ip := range resultIPs(raw) {
			parsed := net.ParseIP(ip)
			if parsed == nil || parsed.String() != ip {
				t.Fatalf("%q among the IPs of %q", ip, raw)
			}
		}
		res, err := create.CreateFromBytes(raw)
		if err != nil {
			return
		}
		for _, to := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", current.ImplementedSpecVersion} {
			if nullElementConverted(res, to) == "" {
				res.GetAsVersion(to) // a panic here: a dereference the check does not know
			}
		}
	})
}

// FuzzParseReservation: a reservation file's content never panics the
// parser; an owner it names passes libcni's validator; and what it accepts
// is exactly what host-local wrote ("<id>\r\n<ifName>" or "<id>", spaces
// around it trimmed as host-local trims them).
func FuzzParseReservation(f *testing.F) {
	id := containerID(7)
	for _, s := range []string{
		id + "\r\neth0", id, id + "\n", "  " + id + "\r\neth0\n", id + "\neth0", id + "\r\n", id + "\r\n../x",
		id + "\r\neth0\r\neth1", "not an ID\r\neth0", "", "\r\n", "-x\r\neth0",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		owner, ifName, reason := parseReservation(content)
		if owner != "" && validID(owner) != "" {
			t.Fatalf("%q: owner %q is not a container ID", content, owner)
		}
		if reason != "" {
			if ifName != "" {
				t.Fatalf("%q refused (%s) with an interface %q", content, reason, ifName)
			}
			return
		}
		if owner == "" {
			t.Fatalf("%q accepted with no owner", content)
		}
		want := owner
		if ifName != "" {
			if validIfName(ifName) != "" {
				t.Fatalf("%q: interface %q is not one", content, ifName)
			}
			want += hostLocalLineBreak + ifName
		}
		if got := strings.TrimSpace(string(content)); got != want {
			t.Fatalf("%q accepted as %q %q, which host-local writes %q", content, owner, ifName, want)
		}
	})
}

// FuzzOwnerFromCacheName: an owner told from a cache file's name is a
// container ID libcni accepts and is what the name holds after the
// network's name; and the name libcni gives an attachment always gives its
// container ID back.
func FuzzOwnerFromCacheName(f *testing.F) {
	id := containerID(3)
	for _, s := range [][4]string{
		{"pods-" + id + "-eth0", "pods", "eth0", id},
		{"k8s-pod-network-" + id + "-eth0", "k8s-pod-network", "eth0", "a-b"},
		{"pods-" + id + "-net1", "pods", "eth0", "x"},
		{"pods--eth0", "pods", "eth0", "-"},
		{"pods-", "pods", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, name, network, ifName, anID string) {
		networks := []Network{{Name: network, IfName: ifName}, {Name: "pods", IfName: "eth1"}}
		got, owner, ok := ownerFromCacheName(name, networks)
		if ok && !strings.HasPrefix(name, got+"-") {
			t.Fatalf("%q taken as network %q's", name, got)
		}
		if owner != "" && (!ok || validID(owner) != "" || !strings.HasPrefix(name, got+"-"+owner+"-")) {
			t.Fatalf("%q: owner %q of network %q (ok %v)", name, owner, got, ok)
		}
		if validNetworkName(network) != "" || validIfName(ifName) != "" || validID(anID) != "" {
			return
		}
		name = cacheFileName(network, anID, ifName)
		if _, owner, ok := ownerFromCacheName(name, networks[:1]); !ok || owner != anID {
			t.Fatalf("%q: owner %q (ok %v), want %q", name, owner, ok, anID)
		}
	})
}

// FuzzFromContainerdStatus: whatever containerd's status says, the
// configuration is an error or networks with names and interfaces libcni
// accepts, told apart by name, with their host-local dir absolute and named
// after the network (where reservations are listed and removed).
func FuzzFromContainerdStatus(f *testing.F) {
	for _, file := range []string{"testdata/cniconfig.json", "testdata/cniconfig-all.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, s := range []string{
		``, `null`, `{}`, `{"PluginDirs":["/opt/cni/bin"],"Networks":[null]}`,
		`{"PluginDirs":["/opt/cni/bin"],"Networks":[{"Config":{"Name":"n","CNIVersion":"1.0.0","Plugins":[null]}}]}`,
		`{"PluginDirs":["/opt/cni/bin"],"Networks":[{"IFName":"eth0","Config":{"Name":"n","CNIVersion":"1.0.0","Source":"{\"cniVersion\":\"1.0.0\",\"name\":\"n\",\"plugins\":[{\"type\":\"bridge\",\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/x/..\"}}]}","Plugins":[{"Source":"{\"type\":\"bridge\",\"ipam\":{\"type\":\"host-local\",\"dataDir\":\"/x/..\"}}"}]}}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := FromContainerdStatus(s)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, n := range cfg.Networks {
			if validNetworkName(n.Name) != "" || validIfName(n.IfName) != "" || n.List == nil || n.List.Name != n.Name || len(n.List.Plugins) == 0 {
				t.Fatalf("accepted network %+v", n)
			}
			if names[n.Name] {
				t.Fatalf("accepted two networks named %q", n.Name)
			}
			names[n.Name] = true
			if d := n.HostLocalDir; d != "" && (!filepath.IsAbs(d) || filepath.Clean(d) != d || filepath.Base(d) != n.Name) {
				t.Fatalf("network %q: host-local dir %q", n.Name, d)
			}
		}
		if len(cfg.Networks) == 0 || len(cfg.BinDirs) == 0 {
			t.Fatalf("accepted a configuration with no network or no plugin dir: %+v", cfg)
		}
	})
}

// TestResultIPsAreThoseLibcniPassesOn: a result is read by its cniVersion,
// as libcni's DEL reads it; "ips" read whatever the version checked other
// addresses than the plugins are given.
func TestResultIPsAreThoseLibcniPassesOn(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.22.0.5/16"},{"address":"fd00::5/64"}]}`, []string{"10.22.0.5", "fd00::5"}},
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.22.0.5/16"},"ips":{}}`, []string{"10.22.0.5"}},
		{`{"ip4":{"ip":"10.22.0.5/16"},"ips":[{"address":"10.22.0.9/16"}]}`, []string{"10.22.0.5"}},
		{`{"cniVersion":"9.9.9","ips":[{"address":"10.22.0.9/16"}]}`, nil},
	} {
		if got := resultIPs(json.RawMessage(tc.raw)); !slices.Equal(got, tc.want) {
			t.Errorf("resultIPs(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
