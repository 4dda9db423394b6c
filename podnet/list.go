package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// Kinds of Unreadable entries.
const (
	KindAttachment  = "cni-attachment"
	KindReservation = "ip-reservation"
	KindNetns       = "netns"
)

// Attachment is one libcni cache entry of one of containerd's networks:
// libcni writes it after a successful CNI ADD and removes it after a
// successful CNI DEL, so an entry is an attachment that was never torn down.
type Attachment struct {
	Network     string
	ContainerID string // the pod sandbox's ID
	IfName      string
	NetNS       string // the namespace path the ADD ran in, as the runtime passed it
	// CacheFile is the entry's path: <cacheDir>/results/<Network>-<ContainerID>-<IfName>.
	CacheFile string
	// CniArgs and CapabilityArgs are what the runtime passed to ADD, and
	// what DEL passes again. containerd sets K8S_POD_NAMESPACE,
	// K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID and K8S_POD_UID (see Arg).
	CniArgs        [][2]string
	CapabilityArgs map[string]interface{}
	// ModTime is the cache file's modification time: when the ADD finished.
	ModTime time.Time
	// IPs are the addresses in the cached ADD result (CNI 0.3 and later:
	// "ips"), without their prefix length, as host-local names its
	// reservation files. A DEL passes that result on as prevResult.
	IPs []string
	// result is the cached ADD result as read ("result"), for
	// DeleteAttachment to check that libcni can convert it to the
	// network's version.
	result json.RawMessage
}

// Arg returns the value of the CNI_ARGS key in a.CniArgs, "" when absent.
func (a Attachment) Arg(key string) string {
	for _, kv := range a.CniArgs {
		if kv[0] == key {
			return kv[1]
		}
	}
	return ""
}

// Reservation is one host-local reservation file: IP is taken by Owner.
type Reservation struct {
	Network string
	IP      string
	Path    string // <HostLocalDir>/<IP>
	Owner   string // the container ID the file names
	IfName  string // "" in the old one-line format
	// ModTime is the file's modification time: when the IP was reserved.
	ModTime time.Time
}

// Netns is one network namespace mount containerd made: an nsfs bind mount
// on <netnsDir>/cni-<uuid>, which keeps the namespace alive with no process
// in it.
type Netns struct {
	Path string
	// Inode is the nsfs inode of the mounted namespace: its identity. The
	// mount table and a stat of Path agreed on it when it was listed.
	Inode uint64
	// InUse is true when some thread on the node is in the namespace
	// (/proc/<pid>/task/<tid>/ns/net has this inode). Such a namespace is
	// never a leak to remove. (Open file descriptors on it are not looked
	// at.)
	InUse bool
	// ModTime is the nsfs inode's time, which the kernel sets when it
	// first makes a file for the namespace: for containerd's, when it
	// bind-mounts the namespace it has just made, before CNI ADD and
	// before its sandbox record names the path.
	ModTime time.Time
}

// Unreadable is an entry that could not be read or is not in the format its
// writer uses. It is skipped, never acted on, and counted; it keeps whatever
// it may name.
type Unreadable struct {
	Kind   string // KindAttachment, KindReservation or KindNetns
	Path   string
	Owner  string // the container ID its name or content may name, "" if none can be told
	Reason string
}

// Listing is one read of the pod networking objects on the node.
type Listing struct {
	// Attachments are the cache entries of cfg's networks; entries of
	// other networks are not containerd's and are left out.
	Attachments []Attachment
	// Reservations are the reservation files in the HostLocalDir of cfg's
	// networks. host-local's "lock" and "last_reserved_ip.*" files are
	// left out.
	Reservations []Reservation
	// NetnsPaths are the entries directly in netnsDir whose name is
	// containerd's format (<netnsDir>/cni-<uuid>), in name order: names
	// only, which List reads.
	NetnsPaths []string
	// Netns are the nsfs mounts InspectNetns found among NetnsPaths (other
	// files and mounts are left out); List leaves it empty.
	Netns []Netns
	// Unreadable are the entries skipped, of all three kinds.
	Unreadable []Unreadable
}

// Owners returns every container ID an attachment, a reservation or an
// unreadable entry names: the sandboxes that still hold network state.
func (l Listing) Owners() map[string]bool {
	owners := map[string]bool{}
	for _, a := range l.Attachments {
		owners[a.ContainerID] = true
	}
	for _, r := range l.Reservations {
		owners[r.Owner] = true
	}
	for _, u := range l.Unreadable {
		if u.Owner != "" {
			owners[u.Owner] = true
		}
	}
	return owners
}

// ByNetns returns the attachments by the namespace path their ADD ran in
// (Attachment.NetNS, as containerd passed it: compare it with Netns.Path when
// List got netnsDir spelt as containerd spells it). Attachments without a
// namespace path are left out.
func (l Listing) ByNetns() map[string][]Attachment {
	m := map[string][]Attachment{}
	for _, a := range l.Attachments {
		if a.NetNS != "" {
			m[a.NetNS] = append(m[a.NetNS], a)
		}
	}
	return m
}

// List reads the pod networking objects of cfg's networks: libcni's cache
// entries in <cacheDir>/results (cacheDir is /var/lib/cni for containerd,
// which never sets another), host-local's reservations in each network's
// HostLocalDir, and the names of the entries in netnsDir (/var/run/netns, or
// <state_dir>/netns with containerd's netns_mounts_under_state_dir) that
// have containerd's name for a namespace mount: NetnsPaths. Which of those
// are namespace mounts, and whether a thread is in one, InspectNetns reads,
// for the ones a plan may act on: that takes the mount table and a stat of
// every thread on the node, a cost that grows with the node, not with its
// leaks.
//
// A missing results dir, host-local dir or netnsDir is an empty listing. Any
// other error reading one of these dirs is an error naming the path, and
// nothing is returned: plan nothing from network data this pass. Entries
// that cannot be read are in Unreadable, with the reason.
//
// List reads every file each time; a Lister makes repeated listings cheap by
// reading again only the files that changed, for the same result.
func List(ctx context.Context, cfg Config, cacheDir, netnsDir string) (Listing, error) {
	l, err := listFiles(ctx, cfg, cacheDir, nil)
	if err != nil {
		return Listing{}, err
	}
	return addNetns(ctx, l, netnsDir)
}

// listFiles reads the cache entries and reservations of cfg's networks,
// through c (nil: every file is read).
func listFiles(ctx context.Context, cfg Config, cacheDir string, c *fileCache) (Listing, error) {
	var l Listing
	var err error
	if l.Attachments, l.Unreadable, err = listAttachments(ctx, cfg, cacheDir, c); err != nil {
		return Listing{}, err
	}
	reservations, unreadable, err := listReservations(ctx, cfg, c)
	if err != nil {
		return Listing{}, err
	}
	l.Reservations = reservations
	l.Unreadable = append(l.Unreadable, unreadable...)
	return l, nil
}

// addNetns adds the names of the namespace mounts in netnsDir to l. They
// are read every time; what they are, InspectNetns reads.
func addNetns(ctx context.Context, l Listing, netnsDir string) (Listing, error) {
	paths, err := listNetnsPaths(ctx, netnsDir)
	if err != nil {
		return Listing{}, err
	}
	l.NetnsPaths = paths
	return l, nil
}

// cacheEntry is libcni's cachedInfo (libcni/api.go), field for field, so that
// a file decodes here exactly when GetCachedAttachments decodes it (a test
// checks that they agree). Reading the files here, rather than through
// GetCachedAttachments, ties each entry to its file. The one difference:
// the result, a map[string]interface{} in libcni, is kept raw and only checked
// to be what such a map accepts (an object or null), which saves decoding
// it.
type cacheEntry struct {
	Kind           string                 `json:"kind"`
	ContainerID    string                 `json:"containerId"`
	Config         []byte                 `json:"config"`
	IfName         string                 `json:"ifName"`
	NetworkName    string                 `json:"networkName"`
	NetNS          string                 `json:"netns,omitempty"`
	CniArgs        [][2]string            `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]interface{} `json:"capabilityArgs,omitempty"`
	RawResult      json.RawMessage        `json:"result,omitempty"`
}

// maxCacheEntrySize bounds how much of a cache entry is read; libcni's are a
// few KiB (the network's config and the ADD result).
const maxCacheEntrySize = 1 << 20

// readCacheEntry reads the cache entry at path, named name. reason says why
// it is not an attachment to act on ("" when it is): libcni cannot decode it
// (GetCachedAttachments skips it), or, stricter than libcni, its IDs are not
// ones libcni's validators accept or name is not libcni's name for what it
// holds. err is set only when the file is gone (fs.ErrNotExist).
func readCacheEntry(path, name string) (a Attachment, reason string, err error) {
	a, reason, _, err = readCacheEntryFile(path, name)
	return a, reason, err
}

// readCacheEntryFile is readCacheEntry that also returns the fstat of the
// file the verdict was drawn from: nil when it was not drawn from a regular
// file's content (the file could not be opened, stat'ed or read, or is not a
// regular file of at most maxCacheEntrySize bytes).
func readCacheEntryFile(path, name string) (a Attachment, reason string, info fs.FileInfo, err error) {
	data, info, err := readSmallFile(path, maxCacheEntrySize)
	if errors.Is(err, fs.ErrNotExist) {
		return Attachment{}, "", nil, err
	}
	if err != nil {
		return Attachment{}, err.Error(), nil, nil
	}
	a, reason = parseCacheEntry(path, name, data, info)
	return a, reason, info, nil
}

// parseCacheEntry is readCacheEntry's verdict on data, the content of the
// file at path, named name, whose fstat is info.
func parseCacheEntry(path, name string, data []byte, info fs.FileInfo) (a Attachment, reason string) {
	var e cacheEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return Attachment{}, fmt.Sprintf("libcni cannot decode it: %v", err)
	}
	// RawMessage holds valid JSON with no space around it.
	if r := e.RawResult; len(r) > 0 && r[0] != '{' && string(r) != "null" {
		return Attachment{}, "libcni cannot decode it: its result is not a JSON object"
	}
	switch {
	case e.Kind != cniCacheKind:
		return Attachment{}, fmt.Sprintf("kind %q, not libcni's %q", e.Kind, cniCacheKind)
	case e.NetworkName == "" || e.IfName == "":
		return Attachment{}, "no network or interface name in it"
	}
	if r := validNetworkName(e.NetworkName); r != "" {
		return Attachment{}, r
	}
	if r := validID(e.ContainerID); r != "" {
		return Attachment{}, r
	}
	if r := validIfName(e.IfName); r != "" {
		return Attachment{}, r
	}
	if want := cacheFileName(e.NetworkName, e.ContainerID, e.IfName); name != want {
		// libcni's DEL reads and removes <network>-<id>-<ifname>: it
		// would never touch this file.
		return Attachment{}, fmt.Sprintf("it holds the attachment of %s, whose cache entry is named %q", e.ContainerID, want)
	}
	return Attachment{
		Network:        e.NetworkName,
		ContainerID:    e.ContainerID,
		IfName:         e.IfName,
		NetNS:          e.NetNS,
		CacheFile:      path,
		CniArgs:        e.CniArgs,
		CapabilityArgs: e.CapabilityArgs,
		ModTime:        info.ModTime(),
		IPs:            resultIPs(e.RawResult),
		result:         e.RawResult,
	}, ""
}

// resultIPs are the addresses of a cached CNI result, without their prefix
// length, as net.IP writes them: read as libcni's DEL reads the result
// before it passes it on as prevResult, by its cniVersion ("ips" from 0.3
// on; "ip4" and "ip6" in 0.1 and 0.2), converted to the newest version
// (the network's may be newer than the result's when the network was
// upgraded while the pod ran). Reading "ips" whatever the version would
// check other addresses than those the plugins are given in a result that
// has both. What libcni cannot decode, or cannot convert to the newest
// version (see convertResult), gives none: DeleteAttachment refuses such an
// entry (libcni's DEL would remove it first and run without it).
func resultIPs(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	conv, err := convertResult(raw, current.ImplementedSpecVersion)
	if err != nil {
		return nil
	}
	cur, ok := conv.(*current.Result)
	if !ok {
		return nil
	}
	var ips []string
	for _, ip := range cur.IPs {
		if ip != nil && ip.Address.IP != nil {
			ips = append(ips, ip.Address.IP.String())
		}
	}
	return ips
}

// convertResult decodes a cached CNI result and converts it to toVersion,
// as libcni's getCachedResult does (create.CreateFromBytes, then
// GetAsVersion), with an error where libcni's conversion would panic.
//
// libcni's conversions dereference the elements of some lists without a
// nil check (see nullElementConverted), and one cache entry with a null
// there would crash the plugin on every pass, from a listing. Those are
// checked explicitly, which names the list in the error; the conversion
// also runs under recover (see withoutPanic), as a last defence against a
// dereference the check does not know of (another libcni version): it is
// pure, building new values from one this function owns, so a panic in it
// leaves nothing half changed.
func convertResult(raw []byte, toVersion string) (types.Result, error) {
	res, err := create.CreateFromBytes(raw)
	if err != nil {
		return nil, err
	}
	if reason := nullElementConverted(res, toVersion); reason != "" {
		return nil, errors.New(reason)
	}
	return withoutPanic(fmt.Sprintf("converting a CNI %s result to %s", res.Version(), toVersion), func() (types.Result, error) {
		return res.GetAsVersion(toVersion)
	})
}

// withoutPanic returns what f returns, or an error naming what (what f
// does) when f panics.
func withoutPanic[T any](what string, f func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("libcni panicked %s: %v", what, p)
		}
	}()
	return f()
}

// resultFamily is the family of CNI result versions one libcni type
// decodes: "0.2" (types/020), "0.4" (types/040) or "1.0" (types/100); ""
// for a version libcni does not know.
func resultFamily(version string) string {
	switch version {
	case "0.1.0", "0.2.0":
		return "0.2"
	case "0.3.0", "0.3.1", "0.4.0":
		return "0.4"
	case "1.0.0", "1.1.0":
		return "1.0"
	}
	return ""
}

// listsDereferenced are the lists of a result whose every element libcni
// v1.3.1 dereferences when it converts a result from one family to
// another (see resultFamily). Within a family, and up from 0.1/0.2 (whose
// result holds no lists of pointers), it copies with methods that take a
// nil element, or shares the lists.
var listsDereferenced = map[[2]string][]string{
	{"0.4", "1.0"}: {"interfaces", "ips"},           // types/100 convertFrom04x
	{"1.0", "0.4"}: {"interfaces", "ips"},           // types/100 convertTo04x
	{"1.0", "0.2"}: {"interfaces", "ips", "routes"}, // convertTo04x, then types/040 convertTo02x
	{"0.4", "0.2"}: {"ips", "routes"},               // types/040 convertTo02x
}

// nullElementConverted says which list of res ("interfaces", "ips" or
// "routes") has a null element libcni's conversion of res to toVersion
// dereferences, "" when none does: that conversion would panic.
func nullElementConverted(res types.Result, toVersion string) string {
	from := res.Version()
	if from == toVersion {
		return "" // no conversion
	}
	var hasNull map[string]bool
	switch r := res.(type) {
	case *types040.Result:
		hasNull = map[string]bool{"interfaces": slices.Contains(r.Interfaces, nil), "ips": slices.Contains(r.IPs, nil), "routes": slices.Contains(r.Routes, nil)}
	case *current.Result:
		hasNull = map[string]bool{"interfaces": slices.Contains(r.Interfaces, nil), "ips": slices.Contains(r.IPs, nil), "routes": slices.Contains(r.Routes, nil)}
	default:
		return ""
	}
	for _, list := range listsDereferenced[[2]string{resultFamily(from), resultFamily(toVersion)}] {
		if hasNull[list] {
			return fmt.Sprintf("its %q has a null element, which libcni's conversion from CNI %s to %s dereferences", list, from, toVersion)
		}
	}
	return ""
}

// listAttachments reads the cache entries of cfg's networks, each through c
// (nil: read).
func listAttachments(ctx context.Context, cfg Config, cacheDir string, c *fileCache) ([]Attachment, []Unreadable, error) {
	dir := filepath.Join(cacheDir, "results")
	d, entries, err := dirlist.Open(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("libcni cache dir %s: %w", dir, err)
	}
	defer d.Close()
	dirFD := int(d.Fd())
	prefix := joinPrefix(dir)
	var (
		attachments []Attachment
		unreadable  []Unreadable
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("libcni cache dir %s: %w", dir, err)
		}
		name := e.Name()
		_, owner, ours := ownerFromCacheName(name, cfg.Networks)
		if !ours {
			continue // another network's entry: not containerd's
		}
		path := prefix + name // filepath.Join(dir, name)
		if !e.Type().IsRegular() {
			unreadable = append(unreadable, Unreadable{KindAttachment, path, owner, fmt.Sprintf("not a regular file (%s)", e.Type())})
			continue
		}
		a, reason, err := c.readCacheEntry(dirFD, path, name)
		switch {
		case err != nil:
			continue // removed since the directory was read
		case reason != "":
			unreadable = append(unreadable, Unreadable{KindAttachment, path, owner, reason})
			continue
		}
		if _, ok := cfg.Network(a.Network); !ok {
			continue // named and written for another network whose name starts like one of ours
		}
		attachments = append(attachments, a)
	}
	return attachments, unreadable, nil
}

// listReservations reads the reservation files in the host-local dirs of
// cfg's networks, each through c (nil: read).
func listReservations(ctx context.Context, cfg Config, c *fileCache) ([]Reservation, []Unreadable, error) {
	var (
		reservations []Reservation
		unreadable   []Unreadable
	)
	for _, n := range cfg.Networks {
		if n.HostLocalDir == "" {
			continue
		}
		r, u, err := listReservationsOf(ctx, n, c)
		if err != nil {
			return nil, nil, fmt.Errorf("host-local dir %s of network %s: %w", n.HostLocalDir, n.Name, err)
		}
		reservations = append(reservations, r...)
		unreadable = append(unreadable, u...)
	}
	return reservations, unreadable, nil
}

// listReservationsOf reads the reservation files in n's host-local dir,
// each through c (nil: read).
func listReservationsOf(ctx context.Context, n Network, c *fileCache) ([]Reservation, []Unreadable, error) {
	d, entries, err := dirlist.Open(ctx, n.HostLocalDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	dirFD := int(d.Fd())
	prefix := joinPrefix(n.HostLocalDir)
	var (
		reservations []Reservation
		unreadable   []Unreadable
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		name := e.Name()
		if isHostLocalBookkeeping(name) {
			continue
		}
		path := prefix + name // filepath.Join(n.HostLocalDir, name)
		r, reason, err := c.readReservation(dirFD, n.Name, path, name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // released since the directory was read
		case reason != "":
			unreadable = append(unreadable, Unreadable{KindReservation, path, r.Owner, reason})
			continue
		}
		reservations = append(reservations, r)
	}
	return reservations, unreadable, nil
}

// readReservation reads the reservation file at path of network. reason
// says why it is not a reservation host-local made ("" when it is); Owner is
// set even then when the content names a container. err is set only when the
// file is gone (fs.ErrNotExist).
func readReservation(network, path string) (r Reservation, reason string, err error) {
	r, reason, _, err = readReservationFile(network, path)
	return r, reason, err
}

// readReservationFile is readReservation that also returns the fstat of the
// file the verdict was drawn from: nil when it was not drawn from a regular
// file's content (as readCacheEntryFile).
func readReservationFile(network, path string) (r Reservation, reason string, info fs.FileInfo, err error) {
	name := filepath.Base(path)
	data, info, err := readSmallFile(path, maxReservationSize)
	if errors.Is(err, fs.ErrNotExist) {
		return Reservation{}, "", nil, err
	}
	if err != nil {
		return Reservation{}, err.Error(), nil, nil
	}
	owner, ifName, reason := parseReservation(data)
	r = Reservation{Network: network, IP: name, Path: path, Owner: owner, IfName: ifName, ModTime: info.ModTime()}
	if !isReservationName(name) {
		return r, "the name is not an IP address as host-local writes it: not a reservation", info, nil
	}
	return r, reason, info, nil
}

// readSmallFile reads a regular file of at most limit bytes without following
// a symlink, and returns it with its fstat, taken before it is read. The
// error names path; it wraps fs.ErrNotExist when the file is gone.
func readSmallFile(path string, limit int64) ([]byte, fs.FileInfo, error) {
	data, info, err := regularfile.Read(path, os.O_RDONLY|unix.O_NOFOLLOW, limit)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("%s is a symlink, not a regular file", path)
	}
	return data, info, err
}

// joinPrefix is what filepath.Join(dir, name) puts before name, for any name
// a directory entry can have (never "", "." or "..", and without a
// separator), so that a listing cleans dir once rather than every entry's
// path (TestJoinPrefix).
func joinPrefix(dir string) string {
	switch dir = filepath.Clean(dir); dir {
	case ".":
		return ""
	case string(filepath.Separator):
		return dir
	}
	return dir + string(filepath.Separator)
}
