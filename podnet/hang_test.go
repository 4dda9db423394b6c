package podnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestADELWhosePluginWaitsInAChildIsCutOff: "a CNI DEL is cut off after a
// minute (each plugin killed with its process group: a child it left
// waiting too), so a plugin whose DEL hangs holds no pass". A plugin that
// hangs in a child process which inherited its stdout (a shell-script
// plugin or wrapper that runs `sleep`, `curl`, `iptables -w` ...) must be
// cut off with its child at the step timeout: killing the plugin alone,
// exec.Cmd.Run would wait for the child to close the pipe, and
// DeleteAttachment (and the pass, and every later pass) for as long as the
// child lives, and the child would go on acting on the node. A child that
// left the plugin's process group is not killed, but holds the DEL no
// longer than pluginWaitDelay.
func TestADELWhosePluginWaitsInAChildIsCutOff(t *testing.T) {
	for _, root := range []bool{false, true} {
		for _, child := range []struct {
			name   string
			run    string // how the script starts its child
			killed bool   // the child is killed with the plugin
		}{
			{"a child in its process group", "sleep 8", true},
			{"a child that left its process group", "setsid sleep 8", false},
		} {
			name := "own root, "
			if root {
				name = "network.exec_root (rootedExec), "
			}
			t.Run(name+child.name, func(t *testing.T) {
				ctx := context.Background()
				pidFile := filepath.Join(t.TempDir(), "child.pid")
				// The DEL runs with today's chain, whose port mapper is a
				// script that waits for a child (here: sleep 8).
				r, a := withScriptPortmap(t, "#!/bin/sh\n"+child.run+" &\necho $! > '"+pidFile+"'\nwait\necho '{}'\n", pidFile, root)
				r.stepTimeout = 300 * time.Millisecond
				start := time.Now()
				err := r.DeleteAttachment(ctx, a)
				took := time.Since(start)
				t.Logf("DeleteAttachment returned after %v: %v", took.Round(10*time.Millisecond), err)
				if took > 4*time.Second {
					t.Fatalf("the DEL was not cut off at the step timeout (300ms): it took %v, as long as the plugin's child lived", took.Round(100*time.Millisecond))
				}
				pid, err := childPid(pidFile)
				if err != nil {
					t.Fatalf("the script's child: %v", err)
				}
				if child.killed && !processGone(t, pid, time.Second) {
					t.Fatalf("the plugin's child %d (%s) still runs after its DEL was cut off", pid, child.run)
				}
			})
		}
	}
}

// withScriptPortmap adds an attachment of network "pods" with the fake
// plugins, and returns it with a Reclaimer whose chain has script as its
// port mapper ("sh-portmap"), run in network.exec_root "/" when root (the
// same files: only the exec path differs). A child the script leaves, whose
// pid it writes to pidFile, is killed when the test ends.
func withScriptPortmap(t *testing.T, script, pidFile string, root bool) (*Reclaimer, Attachment) {
	t.Helper()
	id := containerID(41)
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	n.add(t, cfg, "pods", id, "/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b")
	a := onlyAttachment(t, cfg, n, id)
	binDir := t.TempDir()
	if err := os.Link(filepath.Join(pluginDir, fakeVeth), filepath.Join(binDir, fakeVeth)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(binDir, "sh-portmap"), script)
	if err := os.Chmod(filepath.Join(binDir, "sh-portmap"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a child left alive
		if pid, err := childPid(pidFile); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	confDir := t.TempDir()
	writeFile(t, filepath.Join(confDir, "10-pods.conflist"), strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "sh-portmap"`, 1))
	delCfg, err := FromConfDir(confDir, []string{binDir}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	execRootDir := ""
	if root {
		execRootDir = "/"
	}
	return NewReclaimer(delCfg, n.cacheDir, execRootDir, thisProcess), a
}

// childPid reads the pid a test plugin wrote to path.
func childPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// processGone reports whether process pid has exited (gone, or a zombie no
// one reaped yet) within wait.
func processGone(t *testing.T, pid int, wait time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if errors.Is(err, os.ErrNotExist) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && strings.HasPrefix(string(b[i:]), ") Z") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestADELWhosePluginSucceedsLeavingAChildHoldingItsOutputSucceeds: a
// plugin that exits 0 but leaves a child holding its stdout (a shell-script
// plugin's `something &`) succeeded: its DEL is done, and the cache entry
// goes. Its output is cut off after pluginWaitDelay, and a DEL's output is
// not used. The child, which may sit in the pod's namespace and keep it
// for ever, is killed with the plugin's process group; one that left the
// group is out of reach, and holds the DEL no longer than pluginWaitDelay.
func TestADELWhosePluginSucceedsLeavingAChildHoldingItsOutputSucceeds(t *testing.T) {
	for _, root := range []bool{false, true} {
		for _, child := range []struct {
			name   string
			run    string // how the script starts its child
			killed bool   // the child is killed with the plugin's group
		}{
			{"a child in its process group", "sleep 30", true},
			{"a child that left its process group", "setsid sleep 30", false},
		} {
			name := "own root, "
			if root {
				name = "network.exec_root (rootedExec), "
			}
			t.Run(name+child.name, func(t *testing.T) {
				pidFile := filepath.Join(t.TempDir(), "child.pid")
				r, a := withScriptPortmap(t, "#!/bin/sh\n"+child.run+" &\necho $! > '"+pidFile+"'\necho '{}'\nexit 0\n", pidFile, root)
				start := time.Now()
				err := r.DeleteAttachment(context.Background(), a)
				took := time.Since(start)
				t.Logf("DeleteAttachment returned after %v: %v", took.Round(10*time.Millisecond), err)
				if err != nil {
					t.Fatalf("the DEL of a plugin that exited 0 failed: %v", err)
				}
				if took > pluginWaitDelay+2*time.Second {
					t.Fatalf("the DEL took %v, as long as the plugin's child lived", took.Round(100*time.Millisecond))
				}
				if exists(t, a.CacheFile) {
					t.Fatal("libcni kept the cache entry")
				}
				pid, err := childPid(pidFile)
				if err != nil {
					t.Fatalf("the script's child: %v", err)
				}
				if gone := processGone(t, pid, time.Second); gone != child.killed {
					t.Fatalf("the plugin's child %d (%s) gone: %v, want %v", pid, child.run, gone, child.killed)
				}
			})
		}
	}
}

// TestAPluginsOutputCutOffIsNotUsed: where the output matters (VERSION,
// ADD: libcni decodes it), output cut off after pluginWaitDelay because a
// child held the pipe may be incomplete: an error, though the plugin
// exited 0. The child is killed all the same.
func TestAPluginsOutputCutOffIsNotUsed(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	plugin := filepath.Join(t.TempDir(), "plugin")
	writeFile(t, plugin, "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}'\nsleep 30 &\necho $! > '"+pidFile+"'\nexit 0\n")
	if err := os.Chmod(plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid, err := childPid(pidFile); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	e := &rootedExec{}
	out, err := e.ExecPlugin(context.Background(), plugin, []byte(`{"cniVersion":"1.0.0"}`), append(os.Environ(), "CNI_COMMAND=VERSION"))
	if err == nil || !strings.Contains(err.Error(), "may be incomplete") {
		t.Fatalf("ExecPlugin = %q, %v; want an error saying its output may be incomplete", out, err)
	}
	pid, err := childPid(pidFile)
	if err != nil {
		t.Fatalf("the script's child: %v", err)
	}
	if !processGone(t, pid, time.Second) {
		t.Fatalf("the plugin's child %d still runs", pid)
	}
}
