package podnet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestADELWhosePluginWaitsInAChildIsCutOff: "a CNI DEL is cut off after a
// minute (the DEL's plugins killed), so a plugin whose DEL hangs holds no
// pass". A plugin that hangs in a child process which inherited its stdout
// (a shell-script plugin or wrapper that runs `sleep`, `curl`,
// `iptables -w` ...) must be cut off with its child at the step timeout:
// killing the plugin alone, exec.Cmd.Run would wait for the child to close
// the pipe, and DeleteAttachment (and the pass, and every later pass) for
// as long as the child lives.
func TestADELWhosePluginWaitsInAChildIsCutOff(t *testing.T) {
	for _, root := range []bool{false, true} {
		name := "own root"
		if root {
			name = "network.exec_root (rootedExec)"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			id := containerID(41)
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			n.add(t, cfg, "pods", id, "/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b")
			a := onlyAttachment(t, cfg, n, id)

			// The DEL runs with today's chain, whose port mapper is a
			// script that waits in a child (here: sleep 8).
			binDir := t.TempDir()
			for _, p := range []string{fakeVeth} {
				if err := os.Link(filepath.Join(pluginDir, p), filepath.Join(binDir, p)); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(binDir, "sh-portmap"), "#!/bin/sh\nsleep 8\necho '{}'\n")
			if err := os.Chmod(filepath.Join(binDir, "sh-portmap"), 0o755); err != nil {
				t.Fatal(err)
			}
			confDir := t.TempDir()
			writeFile(t, filepath.Join(confDir, "10-pods.conflist"), strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "sh-portmap"`, 1))
			delCfg, err := FromConfDir(confDir, []string{binDir}, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			execRootDir := ""
			if root {
				execRootDir = "/" // the same files: only the exec path differs
			}
			r := NewReclaimer(delCfg, n.cacheDir, execRootDir)
			r.stepTimeout = 300 * time.Millisecond
			start := time.Now()
			err = r.DeleteAttachment(ctx, a)
			took := time.Since(start)
			t.Logf("DeleteAttachment returned after %v: %v", took.Round(10*time.Millisecond), err)
			if took > 4*time.Second {
				t.Fatalf("the DEL was not cut off at the step timeout (300ms): it took %v, as long as the plugin's child lived", took.Round(100*time.Millisecond))
			}
		})
	}
}
