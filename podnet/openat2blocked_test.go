package podnet

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openat2BlockedEnv, set in a child test process, names the errno a seccomp
// filter installed there answers every openat2 with.
const openat2BlockedEnv = "PODNET_TEST_OPENAT2_BLOCKED_WITH"

// blockOpenat2 installs, on every thread of this process, a seccomp filter
// that fails openat2 with errno, as systemd's RestrictSUIDSGID= does
// (ENOSYS since systemd 248, EPERM before) and a SystemCallFilter= without
// it does (EPERM). Other system calls are allowed.
func blockOpenat2(t *testing.T, errno unix.Errno) {
	t.Helper()
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_OPENAT2},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_NO_NEW_PRIVS: %v", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		t.Fatalf("seccomp: %v", e)
	}
	if _, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH}); !errors.Is(err, errno) {
		t.Fatalf("openat2 under the filter: %v, want %v", err, errno)
	}
}

// TestWhereSeccompBlocksOpenat2NoNamespaceIsTakenForGone: under systemd's
// RestrictSUIDSGID= (or a SystemCallFilter= that leaves openat2 out) the
// kernel has openat2 but this process may not call it. The plan's question
// (does this process see the namespaces containerd mounts?) is then
// answered the other way, through the runtime's root magic link; the step's
// (is this namespace still mounted in containerd's view?) is not answered,
// and the reason says what blocks it, not that the kernel is old. Run in a
// child process each: a seccomp filter cannot be taken off again.
func TestWhereSeccompBlocksOpenat2NoNamespaceIsTakenForGone(t *testing.T) {
	if name := os.Getenv(openat2BlockedEnv); name != "" {
		errno := map[string]unix.Errno{"ENOSYS": unix.ENOSYS, "EPERM": unix.EPERM}[name]
		// The node: a netns dir containerd shares with this view
		// (HostToContainer), a namespace mounted in containerd's view.
		dir := filepath.Join(t.TempDir(), "netns")
		bindOnItself(t, dir, unix.MS_SHARED)
		other := inAnotherMountNamespace(t, "unchanged")
		setPropagation(t, dir, unix.MS_SLAVE)
		blockOpenat2(t, errno)
		if got := NetnsMountsUnseen(other, dir); got != "" {
			t.Fatalf("openat2 failing with %v: NetnsMountsUnseen = %q, want seen (through /proc/%d/root)", errno, got, other)
		}
		ns := filepath.Join(dir, "cni-0000")
		got := NetnsMountedForRuntime(other, ns)
		if got == "" || !strings.Contains(got, "openat2 is not available") || !strings.Contains(got, "seccomp") {
			t.Fatalf("openat2 failing with %v: NetnsMountedForRuntime = %q, want no answer, saying openat2 is not available and a seccomp filter may block it", errno, got)
		}
		return
	}
	for _, errno := range []string{"ENOSYS", "EPERM"} {
		t.Run("openat2 failing with "+errno, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWhereSeccompBlocksOpenat2NoNamespaceIsTakenForGone$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), openat2BlockedEnv+"="+errno)
			out, err := cmd.CombinedOutput()
			switch {
			case strings.Contains(string(out), "--- SKIP"):
				t.Skipf("the child skipped:\n%s", out)
			case err != nil:
				t.Fatalf("child: %v\n%s", err, out)
			case !strings.Contains(string(out), "--- PASS"):
				t.Fatalf("the child ran no test:\n%s", out)
			}
		})
	}
}
