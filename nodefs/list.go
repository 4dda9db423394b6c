package nodefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// PodDirs is kubelet's own record of the pods on the node: the
// <kubelet_root>/pods/<uid> directories. kubelet creates a pod's directory
// before its sandbox and removes it only after the pod is deleted and cleaned
// up, so an absent directory means kubelet no longer wants the pod.
type PodDirs struct {
	// Ready is true when the pods dir could be read. When false the oracle
	// knows nothing, and nothing that depends on it may happen.
	Ready bool
	// Err says why the oracle is not ready: it names the path and what to check.
	Err error
	// UIDs holds the name of every directory entry of the pods dir. Like
	// kubelet's listPodsFromDisk, every directory counts, parsed or not: an
	// odd name can only make a pod look present, never gone.
	UIDs map[string]struct{}
}

// Present reports whether uid has a pod directory. It is false for an oracle
// that is not ready; callers must check Ready first.
func (d PodDirs) Present(uid string) bool {
	_, ok := d.UIDs[uid]
	return ok
}

// ListPodDirs reads <kubeletRoot>/pods. It never returns a ready oracle built
// from partial data: any error while reading makes it not ready.
func ListPodDirs(ctx context.Context, kubeletRoot string) PodDirs {
	dir := filepath.Join(kubeletRoot, "pods")
	entries, err := readDir(ctx, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("kubelet pods dir %s does not exist: is kubelet_root right? (pods.source = \"none\" disables the oracle): %w", dir, err)
		} else {
			err = fmt.Errorf("kubelet pods dir %s cannot be read: check that it is a directory and that the plugin runs as root with it mounted: %w", dir, err)
		}
		return PodDirs{Err: err}
	}
	uids := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		// Type comes from lstat semantics: a symlink is not a directory,
		// exactly as in kubelet's listPodsFromDisk.
		if e.IsDir() {
			uids[e.Name()] = struct{}{}
		}
	}
	return PodDirs{Ready: true, UIDs: uids}
}

// PodLogDir is one directory of the pod logs dir whose name parses.
type PodLogDir struct {
	Path      string // Dir joined with Name
	Name      string // the directory's name
	Namespace string // empty for a legacy <uid> name
	PodName   string // empty for a legacy <uid> name
	UID       string
}

// Skipped is a directory entry that a listing left out, and why. Skipped
// entries are never removed.
type Skipped struct {
	Path   string
	Reason string
}

// ListPodLogDirs lists the pod log directories in dir (logs.pod_logs_dir).
// Only real directories (not symlinks) whose names parse are returned; every
// other entry is in skipped with the reason. err is set when dir itself
// cannot be read, and then nothing is returned.
func ListPodLogDirs(ctx context.Context, dir string) (dirs []PodLogDir, skipped []Skipped, err error) {
	entries, err := readDir(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("pod logs dir %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			skipped = append(skipped, Skipped{path, "a symlink, not a directory kubelet created"})
			continue
		case !e.IsDir():
			skipped = append(skipped, Skipped{path, "not a directory"})
			continue
		}
		d, err := ParsePodLogDirName(e.Name())
		if err != nil {
			skipped = append(skipped, Skipped{path, err.Error()})
			continue
		}
		d.Path = path
		dirs = append(dirs, d)
	}
	return dirs, skipped, nil
}

// ContainerLogLink is one legacy container log symlink whose name parses.
type ContainerLogLink struct {
	Path          string // Dir joined with Name
	Name          string // the link's name
	Target        string // what the link points to, as stored in the link
	ContainerID   string // may be a prefix of the real ID, see Truncated
	PodName       string
	Namespace     string
	ContainerName string
	// Truncated is true when the name is at the 255-byte limit, where kubelet
	// cuts it: ContainerID (rarely ContainerName) may be cut short, so match
	// it as a prefix, as the runtime does for short IDs.
	Truncated bool
	// Dangling is true when the target does not exist (stat says ENOENT),
	// kubelet's condition for looking at the container.
	Dangling bool
}

// ListContainerLogLinks lists the legacy container log links in dir
// (logs.container_logs_dir). Only symlinks whose names parse and whose target
// state is known are returned; every other entry is in skipped with the
// reason. err is set when dir itself cannot be read, and then nothing is
// returned.
func ListContainerLogLinks(ctx context.Context, dir string) ([]ContainerLogLink, []Skipped, error) {
	entries, err := readDir(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("container logs dir %s: %w", dir, err)
	}
	var (
		links   []ContainerLogLink
		skipped []Skipped
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("container logs dir %s: %w", dir, err)
		}
		path := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink == 0 {
			skipped = append(skipped, Skipped{path, "not a symlink (kubelet's container log links are symlinks)"})
			continue
		}
		l, err := ParseContainerLogLinkName(e.Name())
		if err != nil {
			skipped = append(skipped, Skipped{path, err.Error()})
			continue
		}
		l.Path = path
		l.Target, err = os.Readlink(path)
		if err != nil {
			skipped = append(skipped, Skipped{path, fmt.Sprintf("cannot read the link: %v", err)})
			continue
		}
		// os.Stat follows the link, as kubelet's check does. Only ENOENT
		// means dangling; any other error (ELOOP, EACCES, EIO...) leaves the
		// state unknown, so the link is not offered for removal at all.
		_, err = os.Stat(path)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist):
			l.Dangling = true
		default:
			skipped = append(skipped, Skipped{path, fmt.Sprintf("cannot tell whether the target exists: %v", err)})
			continue
		}
		links = append(links, l)
	}
	return links, skipped, nil
}

// readDir reads all entries of dir, sorted by name, checking ctx between
// batches so that a huge directory does not outlive a pass's deadline. Entry
// types have lstat semantics (a symlink is reported as a symlink).
func readDir(ctx context.Context, dir string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []fs.DirEntry
	for {
		batch, err := f.ReadDir(1024)
		all = append(all, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name() < all[j].Name() })
	return all, nil
}
