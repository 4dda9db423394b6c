package podnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"golang.org/x/sys/unix"
)

// NodePath is the PATH a CNI plugin gets when it runs in an exec root: the
// one containerd has when systemd starts it. The plugin's own PATH names
// the image's dirs, not the node's.
const NodePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// rootedExec runs CNI plugins, each in a process group of its own that is
// killed whole when the DEL's time runs out: a plugin that waits in a child
// holding its stdout (a shell-script plugin running iptables -w, curl)
// would otherwise hold the DEL, and the pass, for as long as that child
// lives. libcni's RawExec kills the plugin alone and waits for its pipes.
//
// With root "" a plugin runs in this process's root, as libcni runs it.
// Otherwise it runs chrooted into root (network.exec_root), the
// node's root when the plugin runs in a pod ("/proc/1/root" with hostPID).
// A plugin then finds what it finds when containerd runs it: the node's
// iptables or nft (portmap's and bridge's DEL), their libraries, the
// node's xtables lock, and files next to its configuration. The image has
// none of these. libcni's own exec has no hook for it.
//
// libcni finds a plugin in this process's view of the plugin dirs. Right
// before each run, rootedExec checks that the file at that path in root is
// the same file: else it would run another binary than the one libcni
// chose.
type rootedExec struct {
	root string
	version.PluginDecoder
}

// FindInPath is libcni's: in this process's view.
func (e *rootedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// textFileBusyRetries is how often a plugin being written is tried again,
// a second apart, as libcni's RawExec does.
const textFileBusyRetries = 5

// pluginWaitDelay bounds the wait for a plugin's pipes once it has exited
// or been killed: a child it left (in its process group, or one that left
// the group) could hold them open for ever.
const pluginWaitDelay = 2 * time.Second

// ExecPlugin runs pluginPath and returns its stdout: in root, in root's
// "/", with environ's PATH replaced by NodePath, when root is set. A
// failure is the plugin's CNI error when it printed one, as libcni's
// RawExec returns it.
func (e *rootedExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	env := environ
	if e.root != "" {
		env = make([]string, 0, len(environ)+1)
		for _, kv := range environ {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		env = append(env, "PATH="+NodePath)
	}
	for try := 0; ; try++ {
		if e.root != "" {
			if err := sameInRoot(e.root, pluginPath); err != nil {
				// Not a RefusedError: the chain's plugins after this one
				// (in DEL order) may already have run.
				return nil, fmt.Errorf("not run: %v", err)
			}
		}
		stdout, stderr := cappedBuffer{max: maxPluginStdout}, cappedBuffer{max: maxPluginStderr}
		c := exec.CommandContext(ctx, pluginPath)
		c.Env = env
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if e.root != "" {
			c.Dir = "/" // in root: the chroot is done before the chdir
			c.SysProcAttr.Chroot = e.root
		}
		c.Cancel = func() error { return unix.Kill(-c.Process.Pid, unix.SIGKILL) }
		c.WaitDelay = pluginWaitDelay
		c.Stdin = bytes.NewReader(stdinData)
		ioComplete, err := runPlugin(c, &stdout, &stderr)
		// A plugin that exited 0 with its output cut off (a child it
		// left held the pipe) succeeded. A DEL's output is not used
		// (libcni's ExecPluginWithoutResult drops it; the exit status
		// is the answer), so the DEL is done, and libcni removes the
		// cache entry. ADD's result and VERSION's answer libcni
		// decodes: what came before the cut may be a part, or have a
		// child's writes in it.
		if err == nil && !ioComplete && envValue(env, "CNI_COMMAND") != "DEL" {
			return nil, fmt.Errorf("%s exited successfully, but a process it left held its output open, which was cut off after %s: its output may be incomplete", pluginPath, pluginWaitDelay)
		}
		if err == nil && stdout.over {
			return nil, fmt.Errorf("%s printed more than %d bytes on stdout, which no CNI result is: the rest was not kept", pluginPath, maxPluginStdout)
		}
		if err == nil {
			return stdout.Bytes(), nil
		}
		if strings.Contains(err.Error(), "text file busy") && try < textFileBusyRetries {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) && e.root != "" {
			// The chroot or the exec failed: the plugin never ran.
			return nil, fmt.Errorf("running %s in network.exec_root %s: %w", pluginPath, e.root, err)
		}
		return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
	}
}

// runPlugin runs c, with its stdout and stderr copied to stdout and stderr
// through pipes of its own, and waits for it to exit, then for its output
// up to pluginWaitDelay. ioComplete is false when a process the plugin left
// still held a pipe open then (or its stdin was not taken): the output is
// cut off there, and the plugin's process group is killed, since what is
// left in it (which may sit in the pod's network namespace, and keep it for
// ever) belongs to no one once the plugin has exited.
//
// A plugin that exited 0 succeeded, whatever its children do: err is nil
// then. What that means for output cut off is the caller's to say. (Go's
// exec.Cmd reports such a run as exec.ErrWaitDelay, and cannot tell a
// plugin that failed apart from one that failed and left a child: hence
// the pipes here.)
func runPlugin(c *exec.Cmd, stdout, stderr io.Writer) (ioComplete bool, err error) {
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return true, err
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutW.Close()
		return true, err
	}
	defer stderrR.Close()
	// *os.File: the plugin gets them as they are, with no copying of
	// exec's own to wait for.
	c.Stdout, c.Stderr = stdoutW, stderrW
	err = c.Start()
	// The plugin has its copies: ours would keep the pipes from ending.
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		return true, err
	}
	var copies sync.WaitGroup
	for _, p := range []struct {
		w io.Writer
		r *os.File
	}{{stdout, stdoutR}, {stderr, stderrR}} {
		copies.Go(func() {
			_, _ = io.Copy(p.w, p.r) // ends at EOF, or when the pipe is closed below
		})
	}
	copied := make(chan struct{})
	go func() {
		copies.Wait()
		close(copied)
	}()
	err = c.Wait()
	ioComplete = true
	if errors.Is(err, exec.ErrWaitDelay) && c.ProcessState != nil && c.ProcessState.Success() {
		// exec cut off its copy of stdin; the plugin itself exited 0.
		ioComplete, err = false, nil
	}
	select {
	case <-copied:
	case <-time.After(pluginWaitDelay):
		ioComplete = false
	}
	if !ioComplete {
		killProcessGroup(c.Process.Pid)
		// A holder that left the group is out of reach: its pipe is
		// closed under it, which ends the copy.
		stdoutR.Close()
		stderrR.Close()
	}
	<-copied
	return ioComplete, err
}

// killProcessGroup kills process group pgid, which an exited plugin led
// (started with Setpgid, its group's ID is its PID). While a member of the
// group lives, the kernel gives that number to no new process (a PID stays
// taken while a process, group or session uses it), so the signal reaches
// the plugin's leftovers only; when none is left there is no such group
// (ESRCH), and a number once freed comes round again only after the PID
// counter wraps around pid_max, not in the moment before this kill. Other
// errors are ignored too: the plugin's own run is over either way (EPERM,
// a member that changed its credentials, cannot be killed from here).
func killProcessGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
}

// envValue is the value of key in environ ("key=value" entries), "" when
// absent.
func envValue(environ []string, key string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// What is kept of a plugin's output: a CNI result or error is a few KiB,
// and a broken plugin that keeps writing for its minute must not fill the
// plugin's memory.
const (
	maxPluginStdout = 1 << 20
	maxPluginStderr = 64 << 10
)

// cappedBuffer keeps the first max bytes written to it, and takes (and
// drops) the rest, so the plugin is not stopped by a full pipe. It has no
// ReadFrom (an embedded bytes.Buffer's would be io.Copy's way around the
// cap).
type cappedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Bytes is what was kept.
func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }

// pluginError is a failed plugin's CNI error, as libcni's RawExec makes it.
func pluginError(err error, stdout, stderr []byte) error {
	e := &types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		e.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		e.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
	default:
		if perr := json.Unmarshal(stdout, e); perr != nil {
			e.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return e
}

// sameInRoot checks that path, as this process sees it, is the file (or
// the namespace) root has at path. A RefusedError when root has another or
// none: a plugin run in root would act on something this process never
// looked at.
func sameInRoot(root, path string) error {
	dir, err := openRoot(root)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var here unix.Stat_t
	if err := unix.Stat(path, &here); err != nil {
		return fmt.Errorf("checking %s against network.exec_root %s: %w", path, root, &os.PathError{Op: "stat", Path: path, Err: err})
	}
	there, err := statInRoot(dir, root, path)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return refuse(path, "network.exec_root %s has no such file: mount it into this pod at the node's path", root)
	}
	if nodefs.Openat2Blocked(err) {
		return noResolveInRoot(root, path, err)
	}
	if err != nil {
		return fmt.Errorf("checking %s in network.exec_root %s: %w", path, root, err)
	}
	if here.Dev != there.Dev || here.Ino != there.Ino {
		return refuse(path, "it is another file in network.exec_root %s than here: mount it into this pod at the node's path", root)
	}
	return nil
}

// openRoot opens network.exec_root for statInRoot.
func openRoot(root string) (int, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("network.exec_root %s cannot be used (/proc/1/root needs hostPID and CAP_SYS_PTRACE): %w", root, &os.PathError{Op: "open", Path: root, Err: err})
	}
	return dir, nil
}

// noResolveInRoot refuses path where openat2's RESOLVE_IN_ROOT is not
// available (statInRoot failed with ENOSYS or EPERM: openat2Blocked).
func noResolveInRoot(root, path string, err error) error {
	return refuse(path, "a path in network.exec_root %s cannot be resolved as the chrooted plugin would: openat2 (RESOLVE_IN_ROOT) is not available here (%v: a kernel before Linux 5.6, or a seccomp filter or security module that blocks it); allow openat2, or set network.exec_root = \"\"", root, err)
}

// statInRoot stats path resolved as a process chrooted into root (open as
// dir) resolves it: an absolute symlink on the way (/var/run -> /run on
// most nodes) points into root, not into this process's root, and ".."
// stops at root. Joining root and path would follow such a symlink out of
// root.
func statInRoot(dir int, root, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return st, &os.PathError{Op: "openat2 in " + root, Path: path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, &os.PathError{Op: "fstat in " + root, Path: path, Err: err}
	}
	return st, nil
}

// findInRoot is libcni's FindInPath as a process chrooted into root runs
// it: the first of dirs that has a regular file named plugin, each path
// resolved in root; "" when none has.
func findInRoot(root, plugin string, dirs []string) (string, error) {
	dir, err := openRoot(root)
	if err != nil {
		return "", err
	}
	defer unix.Close(dir)
	for _, d := range dirs {
		path := filepath.Join(d, plugin)
		st, err := statInRoot(dir, root, path)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
			continue
		case nodefs.Openat2Blocked(err):
			return "", noResolveInRoot(root, path, err)
		case err != nil:
			return "", fmt.Errorf("looking for plugin %s in network.exec_root %s: %w", plugin, root, err)
		case st.Mode&unix.S_IFMT == unix.S_IFREG:
			return path, nil
		}
	}
	return "", nil
}
