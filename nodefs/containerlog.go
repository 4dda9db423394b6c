package nodefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// ContainerLog is one container's log file as the runtime reports it (CRI
// ContainerStatus log_path: the sandbox's log directory joined with the
// container's log path), and whose it must be.
type ContainerLog struct {
	// Path is <pod_logs_dir>/<namespace>_<pod>_<uid>/<container>/<restart count>.log
	// (kubelet's BuildContainerLogsDirectory and buildContainerLogsPath).
	Path          string
	PodUID        string // the container's pod UID label
	ContainerName string // the container's name
}

// RemoveContainerLogFiles removes a container's log file and the files
// kubelet's log rotation made of it (<n>.log.<timestamp>, compressed as
// .gz), as kubelet's removeContainerLog does before it removes a container
// (its log manager's Clean removes every file matching <log path>*). It is
// stricter than kubelet: the path must be a root's
// <pod log dir>/<container name>/<n>.log with the pod log dir of the
// container's own pod UID and a directory named after the container; only
// <n>.log itself and names beginning "<n>.log." are removed, only regular
// files, and no file named in keep (the log paths of the pod's other
// containers, read from the runtime right before). Every directory is
// entered without following a symlink and without crossing a mount. A
// missing file or directory is success. It returns the paths it removed;
// on a refusal or error it still removes what it safely can, and returns
// every file it left: as a RefusedError only when each was refused (a
// person should look at them), else as a plain error naming them all (the
// file system failed, and trying again may do: a container is removed only
// after its files).
func (r *Remover) RemoveContainerLogFiles(ctx context.Context, l ContainerLog, keep []string) ([]string, error) {
	root, rel, err := r.target(l.Path)
	if err != nil {
		return nil, err
	}
	path := filepath.Clean(l.Path)
	if len(rel) != 3 {
		return nil, refuse(path, "a container's log file must be <pod log dir>/<container name>/<restart count>.log directly below a removal root %v", r.roots)
	}
	d, err := ParsePodLogDirName(rel[0])
	if err != nil {
		return nil, refuse(path, "%v", err)
	}
	if d.UID != l.PodUID {
		return nil, refuse(path, "it is in the log dir of pod %s, not of the container's pod %s", d.UID, l.PodUID)
	}
	if rel[1] != l.ContainerName {
		return nil, refuse(path, "it is in the log dir of container %q, not of container %q", rel[1], l.ContainerName)
	}
	base := rel[2]
	if !isRestartLogName(base) {
		return nil, refuse(path, "%q is not <restart count>.log, the name kubelet gives a container's log file", base)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("removing %s: %w", path, err)
	}

	// Down to the container's dir; the mount table is checked there (a
	// bind mount statx could not tell, a file mounted over a log file).
	walk, found, err := r.descend(root, rel[:2], rel[:2], path)
	if !found || err != nil {
		return nil, err
	}
	defer walk.close()
	dirFd, dirPath := walk.dirFd, walk.dirPath

	// Read the names through a descriptor of our own: os.File closes it.
	listFd, err := unix.Dup(dirFd)
	if err != nil {
		return nil, fmt.Errorf("removing %s: %w", path, err)
	}
	dir := os.NewFile(uintptr(listFd), dirPath)
	defer dir.Close()
	names, err := readNames(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("removing %s: reading %s: %w", path, dirPath, err)
	}
	slices.Sort(names)
	kept, err := keptFiles(keep)
	if err != nil {
		// Not a refusal: EIO or ESTALE may pass, and until then no file
		// can be told from another container's.
		return nil, fmt.Errorf("removing %s: %w", path, err)
	}
	// keep is in the runtime's terms, as l.Path is: compare names there,
	// and files by identity (another spelling of the same file).
	dirOfPath := filepath.Dir(path)
	var removed []string
	var left leftFiles
	for _, n := range names {
		if n != base && !strings.HasPrefix(n, base+".") {
			continue
		}
		p := dirOfPath + "/" + n
		if slices.ContainsFunc(keep, func(k string) bool { return filepath.Clean(k) == p }) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("removing %s: %w", path, err)
		}
		fi, err := statAt(dirFd, n)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue
		case err != nil:
			err = fmt.Errorf("lstat %s: %w", p, err)
		case fi.mode != unix.S_IFREG:
			err = refuse(p, "it is a %s, not a log file", fi.kind())
		case kept[fileID{fi.dev, fi.ino}]:
			continue
		default:
			// A swap between the lstat and the unlink can at worst unlink
			// what now has this name in the container's log dir; unlink
			// never follows a link and never removes a directory.
			err = unlink(dirFd, n, p)
		}
		if err != nil {
			left.add(err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, left.err()
}

// leftFiles gathers why files were left: refused by the rules, or failed.
type leftFiles struct{ refused, failed []error }

func (l *leftFiles) add(err error) {
	var r *RefusedError
	if errors.As(err, &r) {
		l.refused = append(l.refused, err)
	} else {
		l.failed = append(l.failed, err)
	}
}

// err is nil, the refusals, or - when any file failed - every reason as
// plain errors: a refusal must not hide a failure, or the caller would
// take the failed file for one it may leave.
func (l *leftFiles) err() error {
	if len(l.failed) == 0 {
		return errors.Join(l.refused...)
	}
	all := slices.Clone(l.failed)
	for _, r := range l.refused {
		all = append(all, errors.New(r.Error()))
	}
	return errors.Join(all...)
}

// fileID is a file's identity: its device and inode numbers.
type fileID struct{ dev, ino uint64 }

// keptFiles returns the identity of each file in keep that exists (a kept
// path is followed: it may name the file through a symlinked alias of the
// pod logs dir). One that cannot be examined makes it impossible to tell
// which files are another container's: an error.
func keptFiles(keep []string) (map[fileID]bool, error) {
	ids := make(map[fileID]bool, len(keep))
	for _, k := range keep {
		var st unix.Stat_t
		err := unix.Stat(k, &st)
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			continue
		case err != nil:
			return nil, fmt.Errorf("cannot tell whether %s, the log file of another container of the pod, is one of its files: %w", k, err)
		}
		ids[fileID{st.Dev, st.Ino}] = true
	}
	return ids, nil
}

// isRestartLogName reports whether name is "<decimal restart count>.log".
func isRestartLogName(name string) bool {
	n, ok := strings.CutSuffix(name, logSuffix)
	if !ok || n == "" || len(n) > 10 {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
