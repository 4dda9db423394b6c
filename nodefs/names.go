// Package nodefs is the node file system side of housekeeping: kubelet's pod
// directories (the "is the pod still wanted" oracle), pod log directories,
// legacy container log links, and removal that cannot leave the configured
// roots.
//
// Listing functions return plain data for the planner, never remove
// anything and never follow a symlink below the configured dirs: a container
// log link's target is only looked at inside the pod logs dir, one component
// at a time, so that a link onto a dead mount cannot hang a pass
// (ListContainerLogLinks). Removal goes through a Remover, which only deletes
// below its roots, never follows a symbolic link, never crosses a file system
// or mount point, and leaves alone any name that does not parse as one of
// kubelet's formats (DESIGN.md §4, "Stricter than kubelet" rule 5).
package nodefs

import (
	"fmt"
	"strings"

	"github.com/nri-housekeeper/nri-housekeeper/poduid"
)

// Name grammar. kubelet itself is lax (it takes the pod UID as the last '_'
// field of a pod log dir name and the container ID as the text after the last
// '-' of a link name, and removes links it cannot parse). This package is
// strict instead: a name is only ever acted on when every part of it is what
// kubelet could have produced, so a file a person or another tool put there
// is left alone.
//
//	pod log dir        <namespace>_<podName>_<uid>   (BuildPodLogsDirectory)
//	legacy pod log dir <uid>
//	container log link <podName>_<namespace>_<containerName>-<containerID>.log
//
//	namespace     DNS-1123 label:     1-63 of [a-z0-9-], starting and ending alphanumeric
//	podName       DNS-1123 subdomain: 1-253 bytes, labels as above joined by '.'
//	containerName DNS-1123 label
//	uid           UUID, 8-4-4-4-12 lowercase hex (API server pods), or
//	              32 lowercase hex digits (static pods: kubelet's md5 of the manifest)
//	containerID   6-64 lowercase hex digits (kubelet needs at least 6;
//	              containerd and CRI-O IDs are 64)
//
// None of the parts can contain '_', so a valid name has exactly two '_'
// separators. A static pod whose manifest sets its own metadata.uid in another
// format is skipped: its log dir leaks, which is the safe direction.

const (
	maxLabelLen     = 63
	maxSubdomainLen = 253
	minContainerID  = 6
	maxContainerID  = 64
	// maxFileNameLen is ext4's limit; kubelet truncates link names to it.
	maxFileNameLen = 255
	logSuffix      = ".log"
)

// ParsePodLogDirName parses the name (not the path) of a directory in the pod
// logs dir: "<namespace>_<podName>_<uid>" or the legacy "<uid>". It fills
// Name, Namespace, PodName and UID; for a legacy name Namespace and PodName
// are empty. The error says why the name is not one kubelet produces.
func ParsePodLogDirName(name string) (PodLogDir, error) {
	parts := strings.Split(name, "_")
	switch len(parts) {
	case 1:
		if !poduid.Valid(name) {
			return PodLogDir{}, fmt.Errorf("legacy pod log dir name %q is not a pod UID", name)
		}
		return PodLogDir{Name: name, UID: name}, nil
	case 3:
	default:
		return PodLogDir{}, fmt.Errorf("pod log dir name %q is not <namespace>_<name>_<uid>: it has %d '_'-separated parts", name, len(parts))
	}
	d := PodLogDir{Name: name, Namespace: parts[0], PodName: parts[1], UID: parts[2]}
	if err := checkLabel("namespace", d.Namespace); err != nil {
		return PodLogDir{}, fmt.Errorf("pod log dir name %q: %w", name, err)
	}
	if err := checkSubdomain("pod name", d.PodName); err != nil {
		return PodLogDir{}, fmt.Errorf("pod log dir name %q: %w", name, err)
	}
	if !poduid.Valid(d.UID) {
		return PodLogDir{}, fmt.Errorf("pod log dir name %q: %q is not a pod UID", name, d.UID)
	}
	return d, nil
}

// ParseContainerLogLinkName parses the name (not the path) of a legacy
// container log link: "<podName>_<namespace>_<containerName>-<containerID>.log".
// It fills Name, PodName, Namespace, ContainerName, ContainerID and Truncated.
func ParseContainerLogLinkName(name string) (ContainerLogLink, error) {
	if len(name) > maxFileNameLen {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q is longer than %d bytes", name, maxFileNameLen)
	}
	base, ok := strings.CutSuffix(name, logSuffix)
	if !ok {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q does not end with %q", name, logSuffix)
	}
	parts := strings.Split(base, "_")
	if len(parts) != 3 {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q is not <pod>_<namespace>_<container>-<id>.log: it has %d '_'-separated parts", name, len(parts))
	}
	dash := strings.LastIndexByte(parts[2], '-')
	if dash < 0 {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q has no '-' before the container ID", name)
	}
	l := ContainerLogLink{
		Name:          name,
		PodName:       parts[0],
		Namespace:     parts[1],
		ContainerName: parts[2][:dash],
		ContainerID:   parts[2][dash+1:],
		// kubelet cuts "<pod>_<ns>_<container>-<id>" to 251 bytes before
		// adding ".log", so only a name of exactly 255 bytes can be cut.
		Truncated: len(name) == maxFileNameLen,
	}
	if err := checkSubdomain("pod name", l.PodName); err != nil {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q: %w", name, err)
	}
	if err := checkLabel("namespace", l.Namespace); err != nil {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q: %w", name, err)
	}
	if err := checkLabel("container name", l.ContainerName); err != nil {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q: %w", name, err)
	}
	if n := len(l.ContainerID); n < minContainerID || n > maxContainerID || !isLowerHex(l.ContainerID) {
		return ContainerLogLink{}, fmt.Errorf("container log link name %q: container ID %q is not %d-%d lowercase hex digits", name, l.ContainerID, minContainerID, maxContainerID)
	}
	return l, nil
}

// checkLabel checks a DNS-1123 label (namespaces, container names).
func checkLabel(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	if len(s) > maxLabelLen {
		return fmt.Errorf("%s %q is longer than %d bytes", what, s, maxLabelLen)
	}
	if !isLabel(s) {
		return fmt.Errorf("%s %q is not a DNS-1123 label (lowercase letters, digits and '-', alphanumeric at both ends)", what, s)
	}
	return nil
}

// checkSubdomain checks a DNS-1123 subdomain (pod names).
func checkSubdomain(what, s string) error {
	if s == "" {
		return fmt.Errorf("empty %s", what)
	}
	if len(s) > maxSubdomainLen {
		return fmt.Errorf("%s %q is longer than %d bytes", what, s, maxSubdomainLen)
	}
	for _, l := range strings.Split(s, ".") {
		if !isLabel(l) {
			return fmt.Errorf("%s %q is not a DNS-1123 subdomain (labels of lowercase letters, digits and '-' joined by '.')", what, s)
		}
	}
	return nil
}

// isLabel reports whether s is [a-z0-9]([-a-z0-9]*[a-z0-9])? (length is
// checked by the caller).
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isLowerAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLowerHexByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isLowerHexByte(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

func isLowerAlnum(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' }
