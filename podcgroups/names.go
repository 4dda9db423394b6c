// Package podcgroups finds kubelet's pod cgroups under the kubepods tree and
// destroys them (kill every process, then remove the cgroups bottom-up) or
// reduces their CPU to the minimum, as kubelet's cleanupOrphanedPodCgroups
// does (DESIGN.md §4 "Pod cgroups").
//
// Discover returns plain data (a Listing) for the planner and changes
// nothing. Destroy and ReduceCPU act on one PodCgroup and re-check it first:
// every path must be exactly where kubelet would have put that pod's cgroup
// and must be on a cgroup file system, or nothing at all is done.
//
// Both cgroup drivers and both cgroup versions are handled, including the
// hybrid layout (v1 controllers plus the cgroup2 mount at <mountpoint>/unified).
package podcgroups

import (
	"fmt"
	"strings"

	"github.com/nri-housekeeper/nri-housekeeper/poduid"
)

// Driver is kubelet's cgroup driver: it decides how cgroups are named.
type Driver string

const (
	// DriverCgroupfs names pod cgroups <root>/<qos>/pod<uid>.
	DriverCgroupfs Driver = "cgroupfs"
	// DriverSystemd names them
	// <root>.slice/<root>-<qos>.slice/<root>-<qos>-pod<uid_>.slice.
	DriverSystemd Driver = "systemd"
)

// QoS classes, lower-cased as in kubelet's cgroup names. Guaranteed pods sit
// directly under the root; the others under a cgroup named after the class.
const (
	QOSGuaranteed = "guaranteed"
	QOSBurstable  = "burstable"
	QOSBestEffort = "besteffort"
)

// Pod cgroup names, strict: a name is a pod cgroup only when every part of it
// is what kubelet produces, so a cgroup someone else made is never touched.
//
//	cgroupfs  pod<uid>
//	systemd   <prefix>-pod<uid with '-' written as '_'>.slice
//	          prefix: <root> (guaranteed) or <root>-<qos>
//	uid       UUID, 8-4-4-4-12 lowercase hex (API server pods), or
//	          32 lowercase hex digits (static pods: kubelet's md5 of the manifest)
//
// kubelet itself only requires "pod" to occur once in the name (GetAllPodsFromCgroups).
const (
	podPrefix   = "pod"
	sliceSuffix = ".slice"
)

// ParseCgroupfsName parses the name (not the path) of a cgroupfs pod cgroup,
// "pod<uid>", and returns the pod UID.
func ParseCgroupfsName(name string) (uid string, ok bool) {
	uid, found := strings.CutPrefix(name, podPrefix)
	if !found || !poduid.Valid(uid) {
		return "", false
	}
	return uid, true
}

// ParseSystemdName parses the name (not the path) of a systemd pod cgroup for
// the given cgroups root (e.g. "kubepods"): "kubepods-pod<uid_>.slice"
// (guaranteed), "kubepods-burstable-pod<uid_>.slice" or
// "kubepods-besteffort-pod<uid_>.slice". It returns the UID with dashes, as
// kubelet's, and the QoS class.
func ParseSystemdName(root, name string) (uid, qos string, ok bool) {
	prefix, err := systemdPrefix(root)
	if err != nil {
		return "", "", false
	}
	for _, q := range []string{QOSGuaranteed, QOSBurstable, QOSBestEffort} {
		if uid, ok := parseSystemdPod(qosPrefix(prefix, q), name); ok {
			return uid, q, true
		}
	}
	return "", "", false
}

// parseSystemdPod parses "<prefix>-pod<uid_>.slice". The UID part must not
// contain '-': systemd reads '-' as nesting, which is why kubelet writes the
// UID's dashes as '_'.
func parseSystemdPod(prefix, name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-"+podPrefix)
	if !ok {
		return "", false
	}
	escaped, ok := strings.CutSuffix(rest, sliceSuffix)
	if !ok || strings.Contains(escaped, "-") {
		return "", false
	}
	uid := strings.ReplaceAll(escaped, "_", "-")
	if !poduid.Valid(uid) {
		return "", false
	}
	return uid, true
}

// qosPrefix is the systemd name prefix of the pods of one QoS class.
func qosPrefix(rootPrefix, qos string) string {
	if qos == QOSGuaranteed {
		return rootPrefix
	}
	return rootPrefix + "-" + qos
}

// podParent is a directory (relative to a hierarchy) whose subdirectories
// are the pods of one QoS class.
type podParent struct {
	rel string // e.g. "kubepods/burstable" or "kubepods.slice/kubepods-burstable.slice"
	qos string
	// notPods are the names of the QoS cgroups that live next to the
	// guaranteed pods in the root: expected, so neither pods nor skipped.
	notPods []string
	// podName is the name kubelet gives the pod cgroup of uid here.
	podName func(uid string) string
	// parse returns the UID of a pod cgroup name of this parent.
	parse func(name string) (uid string, ok bool)
	// want describes the accepted names, for skip reasons.
	want string
}

// podParents returns where the pods of every QoS class live for driver and
// root: the root itself (guaranteed), then its burstable and besteffort
// children (kubelet's qosContainerManager layout).
func podParents(driver Driver, root string) ([]podParent, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	switch driver {
	case DriverCgroupfs:
		cgroupfs := func(rel, qos string) podParent {
			p := podParent{
				rel:     rel,
				qos:     qos,
				podName: func(uid string) string { return podPrefix + uid },
				parse:   ParseCgroupfsName,
				want:    `"pod<uid>"`,
			}
			if qos == QOSGuaranteed {
				p.notPods = []string{QOSBurstable, QOSBestEffort}
			}
			return p
		}
		return []podParent{
			cgroupfs(root, QOSGuaranteed),
			cgroupfs(root+"/"+QOSBurstable, QOSBurstable),
			cgroupfs(root+"/"+QOSBestEffort, QOSBestEffort),
		}, nil
	case DriverSystemd:
		rootRel, err := systemdRootRel(root)
		if err != nil {
			return nil, err
		}
		prefix, err := systemdPrefix(root)
		if err != nil {
			return nil, err
		}
		systemd := func(qos string) podParent {
			qp := qosPrefix(prefix, qos)
			p := podParent{
				rel:     rootRel,
				qos:     qos,
				podName: func(uid string) string { return qp + "-" + podPrefix + strings.ReplaceAll(uid, "-", "_") + sliceSuffix },
				parse:   func(name string) (string, bool) { return parseSystemdPod(qp, name) },
				want:    fmt.Sprintf("%q", qp+"-pod<uid with _ for ->.slice"),
			}
			if qos == QOSGuaranteed {
				p.notPods = []string{qosPrefix(prefix, QOSBurstable) + sliceSuffix, qosPrefix(prefix, QOSBestEffort) + sliceSuffix}
			} else {
				p.rel = rootRel + "/" + qp + sliceSuffix
			}
			return p
		}
		return []podParent{systemd(QOSGuaranteed), systemd(QOSBurstable), systemd(QOSBestEffort)}, nil
	}
	return nil, fmt.Errorf("unknown cgroup driver %q (want %q or %q)", driver, DriverCgroupfs, DriverSystemd)
}

// podRel returns the path, relative to a hierarchy, where kubelet puts the
// cgroup of pod uid of class qos: the one place Destroy and ReduceCPU accept.
func podRel(driver Driver, root, qos, uid string) (string, error) {
	if !poduid.Valid(uid) {
		return "", fmt.Errorf("%q is not a pod UID", uid)
	}
	parents, err := podParents(driver, root)
	if err != nil {
		return "", err
	}
	for _, p := range parents {
		if p.qos == qos {
			return p.rel + "/" + p.podName(uid), nil
		}
	}
	return "", fmt.Errorf("unknown QoS class %q (want %q, %q or %q)", qos, QOSGuaranteed, QOSBurstable, QOSBestEffort)
}

// checkRoot accepts what config accepts for cgroups.root: a relative path of
// plain names, such as "kubepods" or "custom/kubepods".
func checkRoot(root string) error {
	if root == "" {
		return fmt.Errorf("empty cgroups root")
	}
	for _, c := range strings.Split(root, "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsRune(c, 0) {
			return fmt.Errorf("cgroups root %q is not a relative path of plain names", root)
		}
	}
	return nil
}

// systemdComponents escapes the root's components as kubelet's ToSystemd
// does ('-' becomes '_'). kubelet refuses components containing '_', which is
// what makes the escape reversible; so does this.
func systemdComponents(root string) ([]string, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	parts := strings.Split(root, "/")
	for i, c := range parts {
		if strings.Contains(c, "_") {
			return nil, fmt.Errorf("cgroups root %q cannot be named by the systemd driver: %q contains '_'", root, c)
		}
		if strings.HasSuffix(c, sliceSuffix) {
			return nil, fmt.Errorf("cgroups root %q: give the name without %q (\"kubepods\", not \"kubepods.slice\"); the systemd driver adds it", root, sliceSuffix)
		}
		parts[i] = strings.ReplaceAll(c, "-", "_")
	}
	return parts, nil
}

// systemdPrefix is the systemd name of the root without ".slice":
// "kubepods" for root "kubepods", "custom-kubepods" for "custom/kubepods".
func systemdPrefix(root string) (string, error) {
	parts, err := systemdComponents(root)
	if err != nil {
		return "", err
	}
	return strings.Join(parts, "-"), nil
}

// systemdRootRel is the root's directory as systemd expands the slice name
// (ExpandSlice): "kubepods.slice", or "custom.slice/custom-kubepods.slice".
func systemdRootRel(root string) (string, error) {
	parts, err := systemdComponents(root)
	if err != nil {
		return "", err
	}
	dirs := make([]string, len(parts))
	for i := range parts {
		dirs[i] = strings.Join(parts[:i+1], "-") + sliceSuffix
	}
	return strings.Join(dirs, "/"), nil
}
