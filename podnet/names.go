// Package podnet is the pod networking side of housekeeping on a containerd
// node: the CNI attachments libcni caches for containerd's networks, the IP
// reservations of host-local IPAM, and the network namespace mounts containerd
// makes for pod sandboxes.
//
// Config says which CNI networks containerd uses (FromContainerdStatus, or
// FromConfDir when containerd does not report them). List reads the three
// kinds of objects and returns plain data for the planner; it never changes
// anything. A Reclaimer undoes one object at a time, each step re-checked
// right before it acts:
//
//   - DeleteAttachment runs CNI DEL through the network's whole chain, as
//     libcni's GC does for a stale attachment, so the plugins clean up what
//     they own (veth, port mappings, IPAM);
//   - ReleaseReservation removes one host-local reservation file under
//     host-local's own lock, for a reservation no attachment explains;
//   - RemoveNetns unmounts and removes a namespace mount no thread is in.
//
// A step that a safety rule stops returns a *RefusedError and changes nothing.
package podnet

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// Formats, from the sources that write them:
//
//	libcni cache entry   <cacheDir>/results/<network>-<containerID>-<ifName>
//	                     (libcni getCacheFilePath), JSON with kind "cniCacheV1"
//	host-local file      <dataDir>/<network>/<ip>, content "<containerID>\r\n<ifName>",
//	                     or "<containerID>" (before plugins v0.7); next to them
//	                     "lock" and "last_reserved_ip.<range index>"
//	containerd netns     <netnsDir>/cni-<8>-<4>-<4>-<4>-<12 lowercase hex>
//	                     (pkg/netns newNS: 16 random bytes), an nsfs bind mount
//
// Container IDs, network names and interface names are checked with libcni's
// own validators (pkg/utils), which the runtime and the plugins apply too.
// containerd's sandbox IDs are 64 hex digits, so they never contain '-'.
const (
	// hostLocalLock is the lock file host-local flocks in its network dir
	// (backend/disk NewFileLock on the dir).
	hostLocalLock = "lock"
	// lastReservedPrefix starts host-local's per-range bookmark files.
	lastReservedPrefix = "last_reserved_ip."
	// hostLocalLineBreak separates the container ID from the interface name
	// in a reservation file (backend/disk LineBreak).
	hostLocalLineBreak = "\r\n"
	// defaultHostLocalDataDir is host-local's dataDir when the ipam section
	// sets none.
	defaultHostLocalDataDir = "/var/lib/cni/networks"
	// cniCacheKind is the kind libcni writes into every cache entry.
	cniCacheKind = "cniCacheV1"
	// maxReservationSize bounds how much of a reservation file is read: a
	// real one is a container ID and an interface name.
	maxReservationSize = 4096
)

// netnsName is the name containerd gives a sandbox's network namespace mount.
var netnsName = regexp.MustCompile(`^cni-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// IsNetnsName reports whether name (a base name, not a path) is the name
// containerd gives the network namespace mounts it makes.
func IsNetnsName(name string) bool { return netnsName.MatchString(name) }

// validID says why id cannot be a container ID libcni accepts ("" if it can).
func validID(id string) string {
	if plainName(id) {
		return ""
	}
	if err := utils.ValidateContainerID(id); err != nil {
		return fmt.Sprintf("container ID %q: %s", id, err.Msg)
	}
	return ""
}

// validNetworkName says why name cannot be a network name libcni accepts
// ("" if it can).
func validNetworkName(name string) string {
	if plainName(name) {
		return ""
	}
	if err := utils.ValidateNetworkName(name); err != nil {
		return fmt.Sprintf("network name %q: %s", name, err.Msg)
	}
	return ""
}

// plainName reports whether name is in the language of the regular
// expression libcni checks container IDs and network names with,
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, without running it: List checks a few
// names per attachment, and the regular expression takes microseconds on a
// 64-digit ID. When it is false, libcni's own validator decides (and says
// why): the answer is always libcni's (TestPlainNameIsLibcnisLanguage).
func plainName(name string) bool {
	if name == "" || !isAlnum(name[0]) {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// validIfName says why name cannot be an interface name ("" if it can).
func validIfName(name string) string {
	if err := utils.ValidateInterfaceName(name); err != nil {
		return fmt.Sprintf("interface name %q: %s", name, err.Msg)
	}
	return ""
}

// cacheFileName is libcni's name for the cache entry of one attachment.
func cacheFileName(network, containerID, ifName string) string {
	return network + "-" + containerID + "-" + ifName
}

// ownerFromCacheName tells the container ID from the name of a cache file that
// starts with "<network>-" for one of networks, when the rest is
// "<id>-<ifName>": first with the network's own interface name as the suffix,
// then splitting at the first '-' (containerd's IDs have none). owner is ""
// when neither works; ok is false when no known network's prefix matches.
func ownerFromCacheName(name string, networks []Network) (network, owner string, ok bool) {
	var byLen []Network
	for _, n := range networks {
		if strings.HasPrefix(name, n.Name+"-") {
			byLen = append(byLen, n)
		}
	}
	if len(byLen) == 0 {
		return "", "", false
	}
	// Longest name first, so that "k8s-pod-network-<id>-eth0" is not
	// taken as network "k8s".
	slices.SortStableFunc(byLen, func(a, b Network) int { return len(b.Name) - len(a.Name) })
	for _, n := range byLen {
		rest := name[len(n.Name)+1:]
		if id, found := strings.CutSuffix(rest, "-"+n.IfName); found && validID(id) == "" {
			return n.Name, id, true
		}
	}
	for _, n := range byLen {
		rest := name[len(n.Name)+1:]
		id, ifName, found := strings.Cut(rest, "-")
		if found && validID(id) == "" && validIfName(ifName) == "" {
			return n.Name, id, true
		}
	}
	return byLen[0].Name, "", true
}

// parseReservation reads the content of a host-local reservation file, as
// host-local matches it (after strings.TrimSpace): "<id>\r\n<ifName>", or just
// "<id>" in the old format. reason is set when the content is neither;
// owner is then the first line when that is a valid container ID, so that the
// caller still knows whom the file may belong to.
func parseReservation(content []byte) (owner, ifName, reason string) {
	s := strings.TrimSpace(string(content))
	first, second, two := strings.Cut(s, hostLocalLineBreak)
	if r := validID(first); r != "" {
		if id, _, _ := strings.Cut(s, "\n"); validID(strings.TrimSpace(id)) == "" {
			owner = strings.TrimSpace(id)
		}
		return owner, "", "not host-local's \"<container ID>\\r\\n<interface>\" or \"<container ID>\": " + r
	}
	if !two {
		return first, "", ""
	}
	if r := validIfName(second); r != "" {
		return first, "", "not host-local's \"<container ID>\\r\\n<interface>\": " + r
	}
	return first, second, ""
}

// isReservationName reports whether name is one host-local gives a
// reservation file: an IP address as net.IP.String writes it.
func isReservationName(name string) bool {
	ip := net.ParseIP(name)
	return ip != nil && ip.String() == name
}

// isHostLocalBookkeeping reports whether name is one of host-local's own
// files in a network dir, which are never reservations.
func isHostLocalBookkeeping(name string) bool {
	return name == hostLocalLock || strings.HasPrefix(name, lastReservedPrefix)
}
