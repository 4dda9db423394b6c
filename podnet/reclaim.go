package podnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/regularfile"
)

// lockPollInterval is how often ReleaseReservation tries host-local's lock
// while someone else holds it: flock(2) itself cannot be bounded by a
// context.
const lockPollInterval = 10 * time.Millisecond

// RefusedError is returned when a safety rule stops a step: nothing was
// changed. Retrying does not help until what Reason names has changed.
type RefusedError struct {
	Path   string // the cache entry, reservation file or namespace mount
	Reason string
	// Changed: the object is not what was listed any more (the cache
	// entry or reservation rewritten, another mount or namespace on the
	// path, a thread in the namespace now): the next plan decides anew
	// from a fresh listing. A refusal that lasts until the operator or
	// the node changes something (the configuration, a plugin, what
	// cannot be read) is not Changed: a failure, backed off from.
	Changed bool
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing to reclaim %s: %s", e.Path, e.Reason)
}

// ChangedSinceDecided reports whether the refusal is of an object changed
// since it was listed: not a failure, as when the check right before the
// step finds it (the executor counts it as aborted).
func (e *RefusedError) ChangedSinceDecided() bool { return e.Changed }

// refuse is a refusal that lasts until the operator or the node changes
// something.
func refuse(path, format string, args ...any) error {
	return &RefusedError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// refuseChanged is a refusal of an object changed since it was listed.
func refuseChanged(path, format string, args ...any) error {
	return &RefusedError{Path: path, Reason: fmt.Sprintf(format, args...), Changed: true}
}

// Reclaimer undoes the pod networking objects that List found, one at a time,
// re-checking each right before it acts. The caller has already decided that
// no containerd record, CRI listing or NRI event knows the owner; these
// checks are the last line of defence, not the decision. A Reclaimer is safe
// for concurrent use.
type Reclaimer struct {
	cfg      Config
	cacheDir string
	cni      *libcni.CNIConfig
	// execRoot is where plugins run (network.exec_root); "" is this
	// process's own root.
	execRoot string
	// stepTimeout bounds a CNI DEL and the wait for host-local's lock.
	stepTimeout time.Duration
	// threads is the node's threads' network namespaces, read again
	// right before each DEL, one read shared by the DELs of a second.
	threads recentThreads
	// delsIn lets the DELs of one namespace run one at a time.
	delsIn netnsTurns
	// lock takes host-local's lock on a network dir (lockHostLocal); a
	// field so that a test can see when it is let go.
	lock func(ctx context.Context, dir string) (unlock func(), err error)
	// runtimePID finds the runtime's process, whose mount namespace tells
	// whether a namespace that is not mounted here is gone (nil: not
	// known; see NetnsMountsUnseen).
	runtimePID RuntimePID
}

// StepTimeout bounds one CNI DEL (its plugins are killed then) and the wait
// for host-local's lock. A plugin whose DEL hangs (waiting for an agent or an
// API server that does not answer: the kind of teardown hang that leaks
// attachments in the first place) would otherwise hold its pass, and every
// pass after it, for ever. containerd's own DEL is bounded by the CRI call
// it runs in (kubelet's runtime-request-timeout, 2 minutes); a DEL that
// runs out is an error, retried with backoff.
const StepTimeout = time.Minute

// NewReclaimer returns a Reclaimer for cfg's networks and libcni's cache in
// cacheDir (/var/lib/cni for containerd). Plugins run from cfg.BinDirs; what
// a plugin prints on stderr is kept only when it fails (in the error).
// execRoot, when not "", is the root plugins run chrooted into
// (network.exec_root; see rootedExec); the plugins, and the namespace
// they are given, must be the same files there as here. runtimePID finds
// the runtime's process (nil: not known), for NetnsMountsUnseen.
func NewReclaimer(cfg Config, cacheDir, execRoot string, runtimePID RuntimePID) *Reclaimer {
	// An explicit exec: libcni sets its default lazily on first use,
	// which races between goroutines, and its RawExec does not kill a
	// plugin's children (see rootedExec).
	exec := &rootedExec{root: execRoot}
	return &Reclaimer{cfg: cfg, cacheDir: cacheDir, cni: libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cacheDir, exec),
		execRoot: execRoot, stepTimeout: StepTimeout,
		threads: recentThreads{read: netnsInUse, now: time.Now, maxAge: threadsMaxAge},
		lock:    lockHostLocal, runtimePID: runtimePID}
}

// netnsGone says why the namespace path netns, not mounted here, may not
// be gone, or "" when it is gone in containerd's view too: this process
// shares containerd's mount namespace, or the path is no namespace mount in
// containerd's own root (NetnsMountedForRuntime). Asked now, right before
// the DEL that rests on it.
func (r *Reclaimer) netnsGone(ctx context.Context, netns string) string {
	if r.runtimePID == nil {
		return "containerd's process is not known, and what is mounted in its view cannot be read"
	}
	pid, err := r.runtimePID(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("containerd's process cannot be found, and what is mounted in its view cannot be read (%v)", err)
	case pid <= 0:
		return "containerd's process is not visible from here (another PID namespace), and what is mounted in its view cannot be read: " +
			"give the plugin the node's PID namespace (hostPID)"
	}
	same, err := nodefs.SameMountNamespace(pid)
	switch {
	case err != nil:
		return fmt.Sprintf("whether this process shares containerd's (process %d) mount namespace cannot be told (%v)", pid, err)
	case same:
		return ""
	}
	return NetnsMountedForRuntime(pid, netns)
}

// NetnsUnseenBy is NetnsMountsUnseen for the runtime runtimePID finds (nil:
// out of sight), for a plan. A runtime that cannot be found is no answer.
func NetnsUnseenBy(ctx context.Context, runtimePID RuntimePID, netnsDir string) string {
	pid := 0
	if runtimePID != nil {
		p, err := runtimePID(ctx)
		if err != nil {
			return fmt.Sprintf("this process may not see the namespaces containerd mounts in %s: containerd's process cannot be found (%v)", netnsDir, err)
		}
		pid = p
	}
	return NetnsMountsUnseen(pid, netnsDir)
}

// checkExecRoot refuses a DEL whose plugins, or whose namespace, are not
// the same files in the exec root as here: checked for the whole chain
// before its first plugin runs, so that a refusal never leaves it half
// done. Each plugin is checked again right before it runs.
func (r *Reclaimer) checkExecRoot(list *libcni.NetworkConfigList, netns, hostLocalDir string) error {
	if r.execRoot == "" {
		return nil
	}
	if hostLocalDir != "" {
		if err := r.hostLocalDirInRoot(hostLocalDir); err != nil {
			return err
		}
	}
	for _, p := range list.Plugins {
		// The IPAM plugin too: the main plugin runs it from CNI_PATH,
		// in the root. Deeper delegates (a meta plugin's own) are not
		// known here.
		for _, typ := range []string{p.Network.Type, p.Network.IPAM.Type} {
			if typ == "" {
				continue
			}
			path, err := invoke.FindInPath(typ, r.cfg.BinDirs)
			if err != nil && typ == p.Network.IPAM.Type {
				// Not here, so not there either (the same dirs): a
				// plugin that needs it fails its DEL by itself.
				continue
			}
			if err != nil {
				return err
			}
			// containerd, and a chrooted main plugin looking for its IPAM
			// plugin in CNI_PATH, take the first plugin dir that has it
			// in the root: the dirs this pod lacks count there too.
			there, err := findInRoot(r.execRoot, typ, r.cfg.BinDirs)
			if err != nil {
				return err
			}
			if there != "" && there != path {
				return refuse(path, "network.exec_root %s has %s, which comes first in the plugin dirs: it is what runs there; mount every plugin dir into this pod at the node's path", r.execRoot, there)
			}
			if err := sameInRoot(r.execRoot, path); err != nil {
				return err
			}
		}
	}
	if netns != "" {
		return sameInRoot(r.execRoot, netns)
	}
	return nil
}

// network returns the network a step acts on, refusing one containerd no
// longer uses and one whose owner has asked runtimes not to garbage-collect.
func (r *Reclaimer) network(path, name string) (Network, error) {
	n, ok := r.cfg.Network(name)
	if !ok {
		return Network{}, refuse(path, "containerd no longer uses network %q (configuration from %s)", name, r.cfg.Source)
	}
	if n.List.DisableGC {
		// The CNI spec: a runtime must not garbage-collect such a
		// network, e.g. because its configuration is shared with
		// another runtime, whose attachments look stale here.
		return Network{}, refuse(path, "network %q sets disableGC", name)
	}
	return n, nil
}

// DeleteAttachment runs CNI DEL for one cached attachment through its
// network's whole chain, last plugin first (port mappings, then the
// interface, then IPAM inside it), with the RuntimeConf libcni's
// GCNetworkList uses for a stale attachment: container ID, namespace path,
// interface, CNI_ARGS and capability args from the cache entry. The plugins
// clean what they own; libcni removes the cache entry when every plugin
// succeeded.
//
// Right before, it re-checks:
//   - the network is still one of the Reclaimer's, and does not set
//     disableGC (else RefusedError);
//   - with an exec root, that its plugins (and their IPAM plugins) and the
//     namespace are the same files there as here (else RefusedError; a root
//     that cannot be opened is an error);
//   - a.CacheFile is libcni's cache entry for a (else RefusedError);
//   - the entry, read again, is gone (nil: a DEL by someone else won the
//     race) or holds exactly what was listed: namespace path, CNI_ARGS and
//     capability args (else RefusedError);
//   - no address of its cached result is reserved by another container on
//     the network's host-local dir (else RefusedError; see ipsStillItsOwn),
//     nor, whatever the IPAM, in another sandbox's cache entry's result
//     (else RefusedError; see ipsInNoOtherEntry);
//   - for a network of CNI 0.4.0 or later (whose DEL passes the cached
//     result on as prevResult), libcni can read its cached result as the
//     network's version: else its DEL would remove the entry first and run
//     without it, or crash on a null element its conversion dereferences
//     (RefusedError); and the result's addresses could be read, for the
//     checks above (else RefusedError);
//   - a namespace that is not mounted here is taken for gone only where it
//     is no namespace mount in containerd's view either (else
//     RefusedError; see NetnsMountedForRuntime);
//   - while its namespace is still mounted, no thread on the node is in it
//     (else RefusedError, also when that cannot be told): the plan saw it
//     unused when the pass began, but network steps run last, after the
//     pass's CRI steps, which can take minutes. The threads are read at
//     most threadsMaxAge before the DEL (see recentThreads), and the path
//     must still hold the namespace they were read for (else
//     RefusedError). The DELs of one namespace (every pod has two: its
//     network's and containerd's loopback) run one at a time, and each
//     rests on a read begun after the one before it ended: their plugins
//     enter the namespace, and would be taken for a workload there. A DEL
//     waits for its namespace's turn before every check above, which all
//     run after the wait (another namespace mounted on the path since the
//     turn was taken is a RefusedError).
//
// It never sends the CNI GC verb: the spec forbids GC while ADD or DEL may
// run on the network, and containerd's ADDs cannot be stopped; a DEL of one
// attachment is what containerd itself runs alongside its ADDs all the time.
// A plugin's failure is an error (not a refusal) and leaves the cache entry,
// so the DEL can be retried.
func (r *Reclaimer) DeleteAttachment(ctx context.Context, a Attachment) error {
	n, err := r.network(a.CacheFile, a.Network)
	if err != nil {
		return err
	}
	name := cacheFileName(a.Network, a.ContainerID, a.IfName)
	path := filepath.Join(r.cacheDir, "results", name)
	if a.CacheFile != path {
		return refuse(a.CacheFile, "libcni's cache entry for %s on network %q (%s) is %s", a.ContainerID, a.Network, a.IfName, path)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("CNI DEL of %s: %w", path, err)
	}
	// The DELs of one namespace run one at a time, and the wait for
	// another can last as long as its DEL: the turn is taken before
	// anything below is read, so that every check is right before the
	// DEL, not before the wait. It is the turn of the namespace on the
	// listed path; the entry must still name that path (below).
	var turn uint64 // the namespace's inode; 0: no turn taken
	var after time.Time
	if listed, ino, err := netnsForDel(a.NetNS); err == nil && listed != "" {
		// The wait is bounded as a DEL is: a step takes at most two of
		// them (what /healthz allows a step), however many wait.
		tctx, cancel := context.WithTimeout(ctx, r.stepTimeout)
		ended, release, err := r.delsIn.take(tctx, ino, r.threads.now)
		cancel()
		if err != nil {
			if ctx.Err() == nil && tctx.Err() != nil {
				err = fmt.Errorf("another DEL held it for more than %s: %w", r.stepTimeout, err)
			}
			return fmt.Errorf("CNI DEL of %s: waiting for another DEL in its namespace %s: %w", path, listed, err)
		}
		defer release()
		turn, after = ino, ended
	}
	cur, reason, info, err := readCacheEntryFile(path, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case reason != "" && info != nil:
		// Its content, read now, is not the attachment listed.
		return refuseChanged(path, "the cache entry can no longer be read as libcni's: %s", reason)
	case reason != "":
		return refuse(path, "the cache entry can no longer be read as libcni's: %s", reason)
	}
	if d := attachmentChange(a, cur); d != "" {
		return refuseChanged(path, "the cache entry changed since it was listed: %s", d)
	}
	if err := ipsStillItsOwn(n, cur); err != nil {
		return refuse(path, "%v", err)
	}
	if err := ipsInNoOtherEntry(ctx, r.cacheDir, cur); err != nil {
		return refuse(path, "%v", err)
	}
	netns, netnsIno, err := netnsForDel(cur.NetNS)
	if err != nil {
		return fmt.Errorf("CNI DEL of %s: %w", path, err)
	}
	if netns == "" && cur.NetNS != "" {
		// Not mounted here is gone only where it is not mounted in
		// containerd's view either: else the DEL would run with no
		// namespace, and no thread in it read.
		if why := r.netnsGone(ctx, cur.NetNS); why != "" {
			return refuse(path, "its namespace %s is not mounted here, which does not tell that it is gone: %s", cur.NetNS, why)
		}
	}
	if err := r.checkExecRoot(n.List, netns, n.HostLocalDir); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return refuse(path, "CNI DEL would run with %s: %s", refused.Path, refused.Reason)
		}
		return fmt.Errorf("CNI DEL of %s: %w", path, err)
	}
	if netns != "" {
		if netnsIno != turn {
			return refuseChanged(path, "another namespace is mounted on %s now (net:[%d]) than when the DEL took its namespace's turn (net:[%d]; 0: none)", netns, netnsIno, turn)
		}
		inUse, err := r.threads.get(ctx, after)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("CNI DEL of %s: %w", path, ctxErr)
		}
		switch {
		case err != nil:
			return refuse(path, "its namespace %s: %v", netns, err)
		case inUse[netnsIno]:
			return refuseChanged(path, "a thread is in its namespace %s (net:[%d]) now: something runs there again", netns, netnsIno)
		}
		// The threads were read for the namespace a stat found on the
		// path before; the plugins are handed the path. Another one
		// mounted there meanwhile (the read may wait for another DEL's)
		// is one whose threads were not looked for.
		switch ino, _, onNsfs, err := nsfsStat(netns); {
		case err != nil:
			return refuse(path, "cannot tell whether its namespace %s is still net:[%d], whose threads were read: %v", netns, netnsIno, err)
		case !onNsfs || ino != netnsIno:
			return refuseChanged(path, "another namespace, or none, is mounted on %s now (nsfs %v, inode %d), not net:[%d], whose threads were read", netns, onNsfs, ino, netnsIno)
		}
	}
	rt := &libcni.RuntimeConf{
		ContainerID:    cur.ContainerID,
		NetNS:          netns,
		IfName:         cur.IfName,
		Args:           cur.CniArgs,
		CapabilityArgs: cur.CapabilityArgs,
	}
	// libcni's DEL of a result it cannot read as the network's version
	// removes the entry first, then runs without it: a DEL that then fails
	// is never retried, the entry no longer holds the namespace, and the
	// plugins get no prevResult (as GetNetworkListCachedResult reads it).
	// A result with a null element its conversion dereferences would
	// crash the plugin there (see convertResult): checked first, and
	// libcni's own read runs under recover as a last defence, since it
	// reads the file again. A result whose addresses could not be read
	// (as the newest version) was checked for none of them, and the DEL
	// would pass them on.
	if gte, err := version.GreaterThanOrEqualTo(n.List.CNIVersion, "0.4.0"); err == nil && gte {
		if reason := resultNotConvertible(cur.result, n.List.CNIVersion); reason != "" {
			return refuse(path, "libcni cannot read its cached result as the network's version %s (%s): its DEL would crash, or remove the entry first and run without it", n.List.CNIVersion, reason)
		}
		_, err := withoutPanic("reading the cached result", func() (types.Result, error) {
			return r.cni.GetNetworkListCachedResult(n.List, rt)
		})
		if err != nil {
			return refuse(path, "libcni cannot read its cached result as the network's version %s (%v): its DEL would remove the entry first and run without it", n.List.CNIVersion, err)
		}
		if len(cur.result) > 0 {
			// Any error, not only the null elements checked above:
			// resultIPs read no address of such a result.
			if _, err := convertResult(cur.result, current.ImplementedSpecVersion); err != nil {
				return refuse(path, "its cached result's addresses cannot be read (%v): the DEL would pass on, as prevResult, addresses no check looked at", err)
			}
		}
	}
	dctx, cancel := context.WithTimeout(ctx, r.stepTimeout)
	defer cancel()
	if err := r.cni.DelNetworkList(dctx, n.List, rt); err != nil {
		if ctx.Err() == nil && dctx.Err() != nil {
			err = fmt.Errorf("did not finish within %s, its plugin was killed: %w", r.stepTimeout, err)
		}
		return fmt.Errorf("CNI DEL of %s (container %s, network %s, interface %s): %w", path, a.ContainerID, a.Network, a.IfName, err)
	}
	// libcni ignores a failure to remove the entry.
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("CNI DEL of %s succeeded, but libcni left the cache entry", path)
	}
	return nil
}

// resultNotConvertible says why libcni's conversion of the cached result
// raw to toVersion would panic, "" when it would not. Whether libcni can
// decode raw at all, its own read tells (GetNetworkListCachedResult), as
// DelNetworkList reads it.
func resultNotConvertible(raw json.RawMessage, toVersion string) string {
	if len(raw) == 0 {
		return ""
	}
	res, err := create.CreateFromBytes(raw)
	if err != nil {
		return ""
	}
	return nullElementConverted(res, toVersion)
}

// hostLocalDirInRoot refuses a DEL in network.exec_root whose host-local
// dir is not the dir here: the addresses the DEL passes on are checked
// here (ipsStillItsOwn), and a dir this pod does not see, or another one,
// would say nobody holds an address a live pod holds on the node. Absent
// in both, nothing is reserved anywhere.
func (r *Reclaimer) hostLocalDirInRoot(dir string) error {
	_, err := os.Stat(dir)
	switch {
	case err == nil:
		return sameInRoot(r.execRoot, dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("host-local dir %s: %w", dir, err)
	}
	root, err := openRoot(r.execRoot)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	_, err = statInRoot(root, r.execRoot, dir)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return nil
	case nodefs.Openat2Blocked(err):
		return noResolveInRoot(r.execRoot, dir, err)
	case err != nil:
		return fmt.Errorf("checking %s in network.exec_root %s: %w", dir, r.execRoot, err)
	}
	return refuse(dir, "network.exec_root %s has host-local's dir, and this pod does not: the addresses the DEL passes on cannot be checked here; "+
		"mount host-local's data dir into this pod at the node's path", r.execRoot)
}

// ipsStillItsOwn checks that no address of a's cached result is reserved
// by another container on the network's host-local dir now. The DEL passes
// that result on as prevResult, and some plugins act by its addresses (the
// reference firewall plugin removes the rules of every IP in it): a
// teardown that got past IPAM and then failed frees the IP while libcni
// keeps the entry, and host-local may have given it to a new pod since.
// Read without host-local's lock (its own DEL takes it): a reservation
// made in the moment after is not seen.
func ipsStillItsOwn(n Network, a Attachment) error {
	if n.HostLocalDir == "" {
		return nil
	}
	for _, ip := range a.IPs {
		res, reason, err := readReservation(n.Name, filepath.Join(n.HostLocalDir, ip))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("cannot tell who holds %s, an address of its cached result, now: %w", ip, err)
		case reason != "" && res.Owner == "":
			return fmt.Errorf("cannot tell who holds %s, an address of its cached result, now: %s: %s", ip, res.Path, reason)
		case res.Owner != a.ContainerID:
			return fmt.Errorf("%s, an address of its cached result, is reserved by %s now: the DEL would act on another pod's address", ip, res.Owner)
		}
	}
	return nil
}

// ipsInNoOtherEntry checks that no newer cache entry in cacheDir (any
// network's) has an address of a's cached result in its own: the DEL passes
// a's result on as prevResult, and some plugins act by its addresses (the
// reference firewall plugin removes the rules of every IP in it). An IPAM
// other than host-local (ipsStillItsOwn) may have freed a's address and
// given it to a pod since (one that gets the same address each time, as a
// StatefulSet's with a fixed IP, too), whose entry is then newer. An older
// entry cannot hold an address given after a's: two stale entries of one
// address are taken newest first (OtherHolder), never each waiting for the
// other. Loopback addresses, which every sandbox's loopback attachment has,
// are no one's; nor are the sandbox's own on its other networks. An entry
// that cannot be read is passed over: it is no positive sign.
func ipsInNoOtherEntry(ctx context.Context, cacheDir string, a Attachment) error {
	if SharedAddress(a, a) == "" {
		return nil // no address anyone else can have
	}
	dir := filepath.Join(cacheDir, "results")
	entries, err := dirlist.Read(ctx, dir)
	if err != nil {
		return fmt.Errorf("cannot tell whether another attachment has an address of its cached result: %w", err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if path == a.CacheFile || !e.Type().IsRegular() {
			continue
		}
		other, reason, err := readCacheEntry(path, e.Name())
		if err != nil || reason != "" || other.ContainerID == a.ContainerID || !Newer(other, a) {
			continue // the same sandbox's attachment on another network is as stale
		}
		if ip := SharedAddress(a, other); ip != "" {
			return fmt.Errorf("%s, an address of its cached result, is in the result of %s's newer attachment on network %s (%s) now: the DEL would act on that pod's address",
				ip, other.ContainerID, other.Network, path)
		}
	}
	return nil
}

// Newer reports whether b's cache entry is newer than a's: written later,
// or at the same time with the greater container ID (an order, so that of
// two entries sharing an address exactly one is the newer).
func Newer(b, a Attachment) bool {
	return b.ModTime.After(a.ModTime) || b.ModTime.Equal(a.ModTime) && b.ContainerID > a.ContainerID
}

// SharedAddress returns an address that is in both a's and b's cached
// results ("" when none), loopback addresses aside: every sandbox's
// loopback attachment has them, and they are no one's.
func SharedAddress(a, b Attachment) string {
	for _, ip := range a.IPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil || addr.IsLoopback() {
			continue
		}
		for _, other := range b.IPs {
			if o, err := netip.ParseAddr(other); err == nil && o.Unmap() == addr.Unmap() {
				return ip
			}
		}
	}
	return ""
}

// attachmentChange says how cur differs from the listed a ("" when it does
// not).
func attachmentChange(a, cur Attachment) string {
	switch {
	case cur.NetNS != a.NetNS:
		return fmt.Sprintf("namespace %q, listed %q", cur.NetNS, a.NetNS)
	case !slices.Equal(cur.CniArgs, a.CniArgs):
		return fmt.Sprintf("CNI_ARGS %v, listed %v", cur.CniArgs, a.CniArgs)
	case !reflect.DeepEqual(cur.CapabilityArgs, a.CapabilityArgs):
		return "other capability args"
	}
	return ""
}

// ReleaseReservation removes one host-local reservation file, under
// host-local's own lock: it flocks <HostLocalDir>/lock exclusively, as
// host-local's disk backend does around every reservation and release, so
// it never races an ADD or DEL of the network. Waiting for the lock is
// bounded by ctx.
//
// It is for a reservation no cached attachment explains: when libcni still
// caches the owner's attachment on the network, DeleteAttachment's DEL
// releases it (host-local included) and this refuses.
//
// Right before, it re-checks:
//   - the network is still one of the Reclaimer's, does not set disableGC,
//     and uses host-local; res.Path is <its HostLocalDir>/<res.IP>, and IP is
//     an address as host-local names its files (never "lock" or
//     "last_reserved_ip.*") (else RefusedError);
//   - libcni caches no attachment of res.Owner on the network (else
//     RefusedError);
//   - under the lock, the file is gone (nil) or still names res.Owner and
//     res.IfName, in the same format (else RefusedError).
func (r *Reclaimer) ReleaseReservation(ctx context.Context, res Reservation) error {
	n, err := r.network(res.Path, res.Network)
	if err != nil {
		return err
	}
	name := filepath.Base(res.Path)
	switch {
	case n.HostLocalDir == "":
		return refuse(res.Path, "network %q does not use host-local", res.Network)
	case filepath.Join(n.HostLocalDir, name) != res.Path:
		return refuse(res.Path, "not a file directly in host-local dir %s of network %q", n.HostLocalDir, res.Network)
	case isHostLocalBookkeeping(name):
		return refuse(res.Path, "host-local's own bookkeeping file, never a reservation")
	case name != res.IP || !isReservationName(name):
		return refuse(res.Path, "its name is not the reservation's IP address %q", res.IP)
	}
	if r := validID(res.Owner); r != "" {
		return refuse(res.Path, "%s", r)
	}
	if res.IfName != "" {
		if r := validIfName(res.IfName); r != "" {
			return refuse(res.Path, "%s", r)
		}
	}
	cached, err := r.cachedAttachment(ctx, res.Network, res.Owner, res.IfName)
	if err != nil {
		return fmt.Errorf("releasing %s: %w", res.Path, err)
	}
	if cached != "" {
		// The plan proposes a release only when its listing had no cache
		// entry of the owner on the network.
		return refuseChanged(res.Path, "libcni still caches attachment %s of %s: DeleteAttachment's CNI DEL releases the IP with the rest", cached, res.Owner)
	}

	lctx, cancel := context.WithTimeout(ctx, r.stepTimeout)
	defer cancel()
	unlock, err := r.lock(lctx, n.HostLocalDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the whole host-local dir is gone
	}
	if err != nil {
		return fmt.Errorf("releasing %s: %w", res.Path, err)
	}
	defer unlock()
	cur, reason, info, err := readReservationFile(res.Network, res.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	switch {
	case reason != "" && info != nil:
		// Its content, read now, is not the reservation listed.
		return refuseChanged(res.Path, "no longer a reservation host-local made: %s", reason)
	case reason != "":
		return refuse(res.Path, "no longer a reservation host-local made: %s", reason)
	case cur.Owner != res.Owner || cur.IfName != res.IfName:
		return refuseChanged(res.Path, "it now reserves the IP for %s (interface %q), not %s (interface %q)", cur.Owner, cur.IfName, res.Owner, res.IfName)
	}
	if err := unix.Unlink(res.Path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("releasing %s: %w", res.Path, &os.PathError{Op: "unlink", Path: res.Path, Err: err})
	}
	return nil
}

// cachedAttachment returns the cache entry libcni keeps for owner on network
// (with ifName, or any interface when ifName is ""), or "".
func (r *Reclaimer) cachedAttachment(ctx context.Context, network, owner, ifName string) (string, error) {
	dir := filepath.Join(r.cacheDir, "results")
	if ifName != "" {
		path := filepath.Join(dir, cacheFileName(network, owner, ifName))
		_, err := os.Lstat(path)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, fs.ErrNotExist):
			return "", nil
		}
		return "", err
	}
	names, err := readNames(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("libcni cache dir %s: %w", dir, err)
	}
	prefix := network + "-" + owner + "-"
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			return filepath.Join(dir, name), nil
		}
	}
	return "", nil
}

// netnsForDel is the CNI_NETNS a DEL gets: the ADD's namespace path while a
// network namespace is mounted there, else "". The CNI spec lets the
// namespace be gone by DEL, and containerd's own teardown passes "" then
// (v2.4.2 sandbox_stop.go): some plugins (host-device) fail a DEL whose
// path cannot be opened, which would keep the attachment, and its IP, for
// ever (after a reboot, every leaked namespace is gone). ino is the
// namespace's inode when the path is returned.
func netnsForDel(path string) (netns string, ino uint64, err error) {
	if path == "" {
		return "", 0, nil
	}
	ino, _, onNsfs, err := nsfsStat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", 0, nil
	case err != nil:
		return "", 0, fmt.Errorf("cannot tell whether its namespace %s is still there: %w", path, err)
	case !onNsfs:
		return "", 0, nil
	}
	return path, ino, nil
}

// threadsMaxAge is how old a read of every thread's network namespace may
// be for a DEL to rest on it. A read costs ~13 µs a thread here
// (BenchmarkNetnsInUse), tens of milliseconds on a node of a few thousand
// threads: one per DEL would add minutes of CPU to a mass reclaim; one a
// second adds a few percent of a core while DELs run, and leaves a window
// of a second, not of the pass.
const threadsMaxAge = time.Second

// recentThreads shares one read of the node's threads' network namespaces
// among the DELs that start within maxAge of the read's start, and after
// the DEL before them in their namespace ended (see netnsTurns). DELs that
// find it too old wait for one new read, not one each. A failed read is not
// kept.
type recentThreads struct {
	read   func(context.Context) (map[uint64]bool, error)
	now    func() time.Time
	maxAge time.Duration

	mu    sync.Mutex
	at    time.Time       // when the kept read started
	inUse map[uint64]bool // nil: no read kept
}

// get returns the inodes of the network namespaces some thread is in, as
// read no earlier than maxAge ago, and by a read begun after after (zero:
// any).
func (t *recentThreads) get(ctx context.Context, after time.Time) (map[uint64]bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := t.now()
	if age := start.Sub(t.at); t.inUse != nil && age >= 0 && age < t.maxAge && t.at.After(after) {
		return t.inUse, nil
	}
	inUse, err := t.read(ctx)
	if err != nil {
		t.inUse = nil
		return nil, err
	}
	t.at, t.inUse = start, inUse
	return inUse, nil
}

// netnsTurns lets the DELs of one network namespace run one at a time. The
// plugins of a DEL enter its namespace (loopback, bridge and ptp set links
// down there from a thread of their own): a read of the threads made
// meanwhile, for the next DEL in that namespace, would find them there and
// refuse it as "something runs there again". Every pod has two
// attachments in its namespace (its network's and containerd's loopback),
// and their DELs are due in the same wave.
type netnsTurns struct {
	mu    sync.Mutex
	turns map[uint64]*netnsTurn // by namespace inode
}

type netnsTurn struct {
	token chan struct{} // holds a value while no DEL runs in the namespace
	users int           // DELs that hold or wait for the turn
	ended time.Time     // when the namespace's last DEL ended
}

// take waits for ino's turn, or ctx. It returns when the namespace's DEL
// before ended (zero: none that a read of the threads still kept could
// predate), and release, to call when the DEL's plugins have ended.
func (n *netnsTurns) take(ctx context.Context, ino uint64, now func() time.Time) (ended time.Time, release func(), err error) {
	n.mu.Lock()
	if n.turns == nil {
		n.turns = make(map[uint64]*netnsTurn)
	}
	// A turn no one holds is kept while its end is younger than a read
	// the threads may still share: a DEL after it must not rest on a read
	// made while the plugins were in the namespace.
	for i, t := range n.turns {
		if t.users == 0 && now().Sub(t.ended) >= threadsMaxAge {
			delete(n.turns, i)
		}
	}
	t := n.turns[ino]
	if t == nil {
		t = &netnsTurn{token: make(chan struct{}, 1)}
		t.token <- struct{}{}
		n.turns[ino] = t
	}
	t.users++
	n.mu.Unlock()
	leave := func() {
		n.mu.Lock()
		t.users--
		n.mu.Unlock()
	}
	select {
	case <-t.token:
	case <-ctx.Done():
		leave()
		return time.Time{}, nil, ctx.Err()
	}
	n.mu.Lock()
	ended = t.ended
	n.mu.Unlock()
	return ended, func() {
		n.mu.Lock()
		t.ended = now()
		n.mu.Unlock()
		t.token <- struct{}{}
		leave()
	}, nil
}

// lockHostLocal takes host-local's lock on its network dir the way host-local
// takes it (backend/disk NewFileLock and go-filemutex): open <dir>/lock with
// O_CREAT|O_RDONLY, mode 0750, and flock it exclusively. It polls so that ctx
// bounds the wait. The error wraps fs.ErrNotExist when dir is gone.
//
// The open is non-blocking and what it opened must be a regular file, as
// host-local's is: a FIFO put there would otherwise block the open, and the
// pass, for ever.
func lockHostLocal(ctx context.Context, dir string) (unlock func(), err error) {
	path := filepath.Join(dir, hostLocalLock)
	f, _, err := regularfile.Open(path, os.O_CREATE|os.O_RDONLY, 0o750)
	if err != nil {
		return nil, fmt.Errorf("open host-local lock: %w", err)
	}
	fd := int(f.Fd())
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				unix.Flock(fd, unix.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		t.Reset(lockPollInterval)
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for host-local's lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}

// RemoveNetns unmounts and removes a namespace mount as containerd's netns
// Remove does (a lazy unmount, then removing the mount point), so the
// namespace goes away with its last reference.
//
// Right before, it re-checks:
//   - n.Path is clean, absolute and named in containerd's format (else
//     RefusedError);
//   - no libcni cache entry names the namespace (else RefusedError: the DEL
//     comes first, as containerd tears the network down before it removes
//     the namespace, so that the plugins can still clean inside it);
//   - Path is gone (nil), or is still exactly one nsfs mount of the same
//     namespace (n.Inode) in both the mount table and a stat, and no thread
//     on the node is in that namespace (else RefusedError, also when that
//     cannot be told: see List).
func (r *Reclaimer) RemoveNetns(ctx context.Context, n Netns) error {
	name := filepath.Base(n.Path)
	switch {
	case !filepath.IsAbs(n.Path) || filepath.Clean(n.Path) != n.Path:
		return refuse(n.Path, "not a clean absolute path")
	case !IsNetnsName(name):
		return refuse(n.Path, "not named like containerd's namespace mounts (cni-<uuid>)")
	}
	cached, err := r.attachmentIn(ctx, n.Path)
	if err != nil {
		return fmt.Errorf("removing %s: %w", n.Path, err)
	}
	if cached != "" {
		return refuse(n.Path, "libcni cache entry %s names it: CNI DEL that attachment first (DeleteAttachment)", cached)
	}
	realDir, err := filepath.EvalSymlinks(filepath.Dir(n.Path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing %s: %w", n.Path, err)
	}
	path := filepath.Join(realDir, name)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	mounts, err := mountsIn(realDir)
	if err != nil {
		return fmt.Errorf("removing %s: reading the mount table: %w", n.Path, err)
	}
	ms := mounts[name]
	// The listing took the path for one nsfs mount of n.Inode, by the
	// same rules: anything else there is a change since.
	if len(ms) == 0 {
		return refuseChanged(n.Path, "no longer a mount point")
	}
	m, err := oneMount(ms)
	if err != nil {
		return refuseChanged(n.Path, "%v", err)
	}
	ino, ok := netnsInode(m)
	switch {
	case !ok:
		return refuseChanged(n.Path, "it is now a %s mount of %s, not a network namespace", m.fstype, m.root)
	case ino != n.Inode:
		return refuseChanged(n.Path, "another namespace is mounted there: net:[%d], listed net:[%d]", ino, n.Inode)
	}
	statIno, _, onNsfs, err := nsfsStat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("removing %s: %w", n.Path, err)
	case !onNsfs || statIno != ino:
		return refuseChanged(n.Path, "the mount table says net:[%d], a stat says otherwise (nsfs %v, inode %d)", ino, onNsfs, statIno)
	}
	inUse, err := netnsInUse(ctx)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("removing %s: %w", n.Path, ctxErr)
	}
	if err != nil {
		return refuse(n.Path, "%v", err)
	}
	if inUse[ino] {
		return refuseChanged(n.Path, "a thread is in the namespace")
	}
	return unmountAndRemove(n.Path, path)
}

// unmountAndRemove unmounts the namespace mounted at path (lazily: a
// process that still opens it by path gets ENOENT, not another namespace)
// and removes the file it was mounted on. Nothing is followed: a symlink
// put there since the checks is neither unmounted through nor removed, and
// nothing but a regular file (what containerd mounts a namespace on) is
// removed. name is the path as listed, for errors.
func unmountAndRemove(name, path string) error {
	switch err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); {
	case err == nil, errors.Is(err, unix.ENOENT):
	case errors.Is(err, unix.EINVAL):
		// Not a mount point (unmounted since the checks), or a symlink.
		switch fi, err := os.Lstat(path); {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return fmt.Errorf("removing %s: %w", name, err)
		case !fi.Mode().IsRegular():
			return refuseChanged(name, "it is now a %s, not the file a namespace was mounted on", fileType(fi.Mode()))
		}
	default:
		return fmt.Errorf("removing %s: %w", name, &os.PathError{Op: "unmount", Path: path, Err: err})
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s after unmounting it: %w", name, err)
	}
	return nil
}

// fileType names a file's type for a person.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	default:
		return "special file (" + m.Type().String() + ")"
	}
}

// attachmentIn returns a cache entry, of any network, that names the
// namespace at netnsPath, or "". An entry counts when its bytes contain the
// namespace's name (plain ASCII, with 128 random bits): however the runtime
// spelt the directory, and even when the entry cannot be decoded.
func (r *Reclaimer) attachmentIn(ctx context.Context, netnsPath string) (string, error) {
	dir := filepath.Join(r.cacheDir, "results")
	entries, err := dirlist.Read(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("libcni cache dir %s: %w", dir, err)
	}
	needle := []byte(filepath.Base(netnsPath))
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, _, err := readSmallFile(path, maxCacheEntrySize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if bytes.Contains(data, needle) {
			return path, nil
		}
	}
	return "", nil
}
