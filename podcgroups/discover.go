package podcgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nri-housekeeper/nri-housekeeper/dirlist"
)

// Version is a cgroup version: 1 (one hierarchy per controller) or 2 (unified).
type Version int

const (
	V1 Version = 1 // one hierarchy per controller (or group of controllers)
	V2 Version = 2 // the unified hierarchy
)

// DriverAuto is the Options.Driver value that picks the driver from the
// tree; see Options.Driver.
const DriverAuto = "auto"

// Options are the [cgroups] keys.
type Options struct {
	// Mountpoint is where the cgroup file systems are: the cgroup2 mount
	// itself (pure v2), or the directory holding one mount per hierarchy
	// (v1 and hybrid), e.g. /sys/fs/cgroup.
	Mountpoint string
	// Root is the kubepods cgroup relative to every hierarchy, e.g.
	// "kubepods" (the systemd driver turns it into "kubepods.slice").
	Root string
	// Driver is "cgroupfs", "systemd" or "auto" (also ""). auto picks systemd
	// when the root's systemd directory (e.g. kubepods.slice) exists in any
	// hierarchy and cgroupfs otherwise; a node has one driver, and a
	// kubepods.slice is only ever made by the systemd driver.
	Driver string
}

// Hierarchy is one cgroup hierarchy that Discover scans.
type Hierarchy struct {
	Path    string // its mount, e.g. /sys/fs/cgroup/memory, /sys/fs/cgroup/unified or /sys/fs/cgroup (pure v2)
	Version Version
}

// PodCgroup is one pod's cgroup, in every hierarchy where it exists.
type PodCgroup struct {
	UID    string // pod UID, with dashes as kubelet's
	QOS    string // QOSGuaranteed, QOSBurstable or QOSBestEffort
	Driver Driver
	Root   string // Options.Root it was found under; Destroy checks Paths against it
	// Paths is the pod cgroup directory in every hierarchy where it exists
	// (absolute), in the order of Listing.Hierarchies; nil unless Inspected.
	Paths []string
	// Inodes are the inode numbers of Paths, in the same order, when they
	// were inspected. A cgroup made again under the same path has a new
	// one (cgroupfs numbers its directories as it makes them), so Destroy
	// and ReduceCPU refuse a path whose inode is not this one, and a loop
	// can tell a pod cgroup kubelet made again from the one it saw.
	Inodes []uint64
	// Containers are the names of the pod cgroup's subdirectories in any
	// hierarchy (container IDs, or cri-containerd-<id>.scope), sorted:
	// Destroy and ReduceCPU refuse a pod cgroup with a child not named
	// here (made since, for a pod of that UID set up again).
	Containers []string
	// Procs is the number of distinct PIDs in the pod cgroup and all its
	// descendants, in any hierarchy. (cgroup v1 does not list processes
	// outside this PID namespace; v2 lists them all as PID 0.)
	Procs int
	// CPUReduced: every cpu.shares (v1) or cpu.weight (v2) of the pod
	// cgroup is already at the minimum ReduceCPU sets, and there is one.
	CPUReduced bool
	// Inspected: Containers, Procs and CPUReduced were read. A pod cgroup
	// that was not (its pod has listed objects, or its tree could not be
	// read) is known by name and Paths only, and nothing may be done to it.
	Inspected bool
	// Unreadable says why the pod cgroup's tree could not be read when it
	// was to be inspected (a threaded cgroup v2 subtree, whose cgroup.procs
	// fails with EOPNOTSUPP; an I/O error), or "". Nothing is done to it;
	// the other pods are listed as usual.
	Unreadable string
}

// Skipped is a directory next to pod cgroups that is not one, and why. It is
// never touched.
type Skipped struct {
	Path   string
	Reason string
}

// Listing is what Discover found.
type Listing struct {
	// Ready is true when every hierarchy could be read completely. When
	// false, Pods is empty and nothing may be concluded from the listing.
	Ready bool
	// Err says why the listing is not ready, naming the path.
	Err         error
	Driver      Driver
	Hierarchies []Hierarchy
	// Pods is keyed by pod UID.
	Pods    map[string]PodCgroup
	Skipped []Skipped
	// RootMissing: the root is in none of the hierarchies read (a ready
	// listing, with no pods). kubelet makes it at its start, so with pods
	// running it means Options.Root (or the driver) is not kubelet's.
	RootMissing bool
}

// Discover lists the pod cgroups under opts.Root in every hierarchy under
// opts.Mountpoint. It never returns partial data: any error other than a
// missing root or QoS directory makes the listing not ready. A root that
// exists in no hierarchy gives a ready, empty listing (no pod cgroups).
//
// Every pod cgroup is found by name (one directory listing per QoS class
// and hierarchy); only those inspect says yes to (nil: all) are looked
// into: their descendants, processes and CPU (PodCgroup.Inspected). A pod
// with a listed sandbox or container is never a candidate, and on a busy
// node its cgroups are most of the tree. A loop lists them with a Scanner,
// which reads most hierarchies only now and then.
func Discover(ctx context.Context, opts Options, inspect func(uid string) bool) Listing {
	tree, failed := layout(ctx, opts)
	if failed != nil {
		return *failed
	}
	s := newScan(tree, inspect)
	for _, h := range tree.hierarchies {
		for _, p := range tree.parents {
			if err := s.parent(ctx, h, p, nil); err != nil {
				return tree.failed(err)
			}
		}
	}
	return s.listing()
}

// tree is where a node's pod cgroups are: its hierarchies, its driver and
// the parents of its pods in each.
type tree struct {
	root        string
	hierarchies []Hierarchy
	driver      Driver
	parents     []podParent
}

// layout finds the tree of opts; a Listing that is not ready when it
// cannot.
func layout(ctx context.Context, opts Options) (tree, *Listing) {
	if !filepath.IsAbs(opts.Mountpoint) || filepath.Clean(opts.Mountpoint) != opts.Mountpoint {
		return tree{}, &Listing{Err: fmt.Errorf("cgroups mountpoint %q is not a clean absolute path", opts.Mountpoint)}
	}
	if err := checkRoot(opts.Root); err != nil {
		return tree{}, &Listing{Err: err}
	}
	hierarchies, err := findHierarchies(ctx, opts.Mountpoint)
	if err != nil {
		return tree{}, &Listing{Err: err}
	}
	driver, err := pickDriver(opts, hierarchies)
	if err != nil {
		return tree{}, &Listing{Err: err, Hierarchies: hierarchies}
	}
	parents, err := podParents(driver, opts.Root)
	if err != nil {
		return tree{}, &Listing{Err: err, Driver: driver, Hierarchies: hierarchies}
	}
	return tree{root: opts.Root, hierarchies: hierarchies, driver: driver, parents: parents}, nil
}

// failed is the listing of a scan of t that could not complete.
func (t tree) failed(err error) Listing {
	return Listing{Err: err, Driver: t.driver, Hierarchies: t.hierarchies}
}

func newScan(t tree, inspect func(uid string) bool) *scan {
	return &scan{
		inspect:  inspect,
		tree:     t,
		pods:     map[string]PodCgroup{},
		pids:     map[string]map[int]struct{}{},
		cpuMin:   map[string]bool{},
		twoClass: map[string]string{},
		buf:      make([]byte, direntBufSize),
	}
}

// listing completes what the scan found.
func (s *scan) listing() Listing {
	for uid, pod := range s.pods {
		if !pod.Inspected {
			continue
		}
		pod.Procs = len(s.pids[uid])
		pod.CPUReduced = s.cpuMin[uid]
		sort.Strings(pod.Containers)
		s.pods[uid] = pod
	}
	// subdirs gives entries in directory order: sorted, the skips of the
	// same node read the same every pass.
	sort.Slice(s.skipped, func(i, j int) bool { return s.skipped[i].Path < s.skipped[j].Path })
	return Listing{Ready: true, Driver: s.tree.driver, Hierarchies: s.tree.hierarchies, Pods: s.pods, Skipped: s.skipped, RootMissing: !s.parentFound && len(s.pods) == 0}
}

// scan accumulates one Discover pass.
type scan struct {
	tree    tree
	inspect func(uid string) bool // nil: every pod
	pods    map[string]PodCgroup
	pids    map[string]map[int]struct{} // per UID, across hierarchies
	cpuMin  map[string]bool             // per UID: every CPU file seen is at the minimum
	skipped []Skipped
	// parentFound: a pod parent (the root or a QoS cgroup) was there in a
	// hierarchy read.
	parentFound bool
	// twoClass are the skips of pod cgroups found in a second QoS class
	// (path to pod UID), as opposed to names that are not pod cgroups.
	twoClass map[string]string
	buf      []byte // for subdirs
}

// visitFunc is what a scan does with a pod cgroup it found by name in a
// parent; a nil visitFunc adds it (scan.pod).
type visitFunc func(ctx context.Context, h Hierarchy, p podParent, uid, path string) error

// parent lists the pods of one QoS class in one hierarchy.
func (s *scan) parent(ctx context.Context, h Hierarchy, p podParent, visit visitFunc) error {
	dir := filepath.Join(h.Path, p.rel)
	names, symlinks, err := subdirs(ctx, dir, s.buf)
	if errors.Is(err, fs.ErrNotExist) {
		// kubelet does the same: a hierarchy without the root or a QoS
		// cgroup simply has no pods there.
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s cannot be read: %w", dir, err)
	}
	s.parentFound = true
	for _, name := range symlinks {
		// cgroup file systems have no symlinks; someone made this.
		s.skipped = append(s.skipped, Skipped{dir + "/" + name, "a symlink, not a cgroup"})
	}
	for _, name := range names {
		if contains(p.notPods, name) {
			continue
		}
		path := dir + "/" + name // dir is clean, the name one component
		uid, ok := p.parse(name)
		if !ok {
			s.skipped = append(s.skipped, Skipped{path, fmt.Sprintf("not a %s pod cgroup name for %s pods here (want %s)", s.tree.driver, p.qos, p.want)})
			continue
		}
		if visit == nil {
			err = s.pod(ctx, h, p.qos, uid, path)
		} else {
			err = visit(ctx, h, p, uid, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pod adds one pod cgroup directory to the listing, and looks into it
// when the pod is to be inspected.
func (s *scan) pod(ctx context.Context, h Hierarchy, qos, uid, path string) error {
	pod, seen := s.pods[uid]
	if seen && pod.QOS != qos {
		// A pod has one QoS class for life; two means a leftover from
		// something this package does not understand. Leave it alone.
		reason := fmt.Sprintf("pod %s was already found as %s", uid, pod.QOS)
		if len(pod.Paths) > 0 { // none kept for a pod known by name only
			reason += " at " + pod.Paths[0]
		}
		s.skipped = append(s.skipped, Skipped{path, reason})
		s.twoClass[path] = uid
		return nil
	}
	if !seen {
		pod = PodCgroup{UID: uid, QOS: qos, Driver: s.tree.driver, Root: s.tree.root, Inspected: s.inspects(uid)}
	}
	if !pod.Inspected {
		s.pods[uid] = pod // by name only: not even its path is kept
		return nil
	}
	// One pod whose tree cannot be read is that pod's problem: it is
	// left alone, and the node's other pods are listed (a cancelled
	// pass is the pass's).
	unreadable := func(err error) error {
		if ctx.Err() != nil {
			return err
		}
		if pod.Unreadable == "" {
			pod.Unreadable = err.Error()
		}
		pod.Inspected = false
		s.pods[uid] = pod
		return nil
	}
	dirs, ino, err := cgroupTree(ctx, path, s.buf)
	if err != nil {
		return unreadable(err)
	}
	if len(dirs) == 0 {
		return nil // removed since the parent was read
	}
	if s.pids[uid] == nil {
		s.pids[uid] = map[int]struct{}{}
	}
	pod.Paths = append(pod.Paths, path)
	pod.Inodes = append(pod.Inodes, ino)
	s.noteCPU(uid, path)
	for _, d := range dirs {
		if filepath.Dir(d) == path && !contains(pod.Containers, filepath.Base(d)) {
			pod.Containers = append(pod.Containers, filepath.Base(d))
		}
		pids, err := readPids(d)
		if err != nil {
			return unreadable(err)
		}
		for _, pid := range pids {
			s.pids[uid][pid] = struct{}{}
		}
	}
	s.pods[uid] = pod
	return nil
}

// noteCPU records whether the pod cgroup at path has its CPU at the minimum.
func (s *scan) noteCPU(uid, path string) {
	for file, minimum := range map[string]string{"cpu.shares": "2", "cpu.weight": "1"} {
		b, err := readControlFile(filepath.Join(path, file), maxValueSize)
		if err != nil {
			continue // no cpu controller in this hierarchy
		}
		reduced := strings.TrimSpace(string(b)) == minimum
		prev, seen := s.cpuMin[uid]
		s.cpuMin[uid] = reduced && (!seen || prev)
	}
}

// findHierarchies returns the hierarchies under mountpoint, sorted by path.
// Pure v2: mountpoint is the cgroup2 mount. v1 and hybrid: every directory
// directly under it that is a cgroup mount (cgroup.procs at its top, plus
// cgroup.controllers for cgroup2). Symlinks are skipped: they are aliases
// (cpu -> cpu,cpuacct) of a hierarchy listed under its own name.
func findHierarchies(ctx context.Context, mountpoint string) ([]Hierarchy, error) {
	unified, err := isFile(filepath.Join(mountpoint, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	if unified {
		return []Hierarchy{{Path: mountpoint, Version: V2}}, nil
	}
	entries, err := dirlist.Read(ctx, mountpoint)
	if err != nil {
		return nil, fmt.Errorf("cgroups mountpoint %s cannot be read: %w", mountpoint, err)
	}
	var hierarchies []Hierarchy
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(mountpoint, e.Name())
		v2, err := isFile(filepath.Join(path, "cgroup.controllers"))
		if err != nil {
			return nil, err
		}
		if v2 {
			hierarchies = append(hierarchies, Hierarchy{Path: path, Version: V2})
			continue
		}
		v1, err := isFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		if v1 {
			hierarchies = append(hierarchies, Hierarchy{Path: path, Version: V1})
		}
	}
	if len(hierarchies) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under cgroups mountpoint %s: neither a cgroup2 mount nor a directory of cgroup mounts", mountpoint)
	}
	return hierarchies, nil
}

// pickDriver resolves Options.Driver; see its comment for auto.
func pickDriver(opts Options, hierarchies []Hierarchy) (Driver, error) {
	switch opts.Driver {
	case string(DriverCgroupfs), string(DriverSystemd):
		return Driver(opts.Driver), nil
	case DriverAuto, "":
	default:
		return "", fmt.Errorf("unknown cgroups driver %q (want %q, %q or %q)", opts.Driver, DriverCgroupfs, DriverSystemd, DriverAuto)
	}
	rel, err := systemdRootRel(opts.Root)
	if err != nil {
		// This root cannot be named by the systemd driver at all.
		return DriverCgroupfs, nil
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h.Path, rel)
		fi, err := os.Lstat(dir)
		switch {
		case err == nil && fi.IsDir():
			return DriverSystemd, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("cgroup %s cannot be checked for the systemd driver: %w", dir, err)
		}
	}
	return DriverCgroupfs, nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
