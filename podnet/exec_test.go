package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// execRoot makes a root for network.exec_root holding, at the paths this
// process sees them, the given plugins as the same files (hard links), the
// directory of n's plugin log, and /proc (a node root has it: skel compares
// the namespace it is given with its own). What the plugins write there
// stays in the root.
func execRoot(t *testing.T, n node, plugins ...string) string {
	t.Helper()
	root := t.TempDir()
	mkdirAll(t, filepath.Join(root, "proc"))
	bindMount(t, "/proc", filepath.Join(root, "proc"))
	mkdirAll(t, filepath.Join(root, pluginDir))
	mkdirAll(t, filepath.Join(root, filepath.Dir(n.log)))
	for _, p := range plugins {
		if err := os.Link(filepath.Join(pluginDir, p), filepath.Join(root, pluginDir, p)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// copyFile copies src to dst as another file: same bytes, another inode.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func linesOf(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestDeleteAttachmentInAnExecRoot(t *testing.T) {
	ctx := context.Background()
	id := containerID(7)

	t.Run("plugins run chrooted in the exec root, with the node's PATH, on the same namespace", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		ns := newNetns(t, netnsPath(n.netnsDir, 1), false).Path
		root := execRoot(t, n, fakeVeth, fakePortmap)
		bindMount(t, ns, filepath.Join(root, ns)) // the node's view of the same namespace
		hostLocal := filepath.Join(n.dataDir, "pods")
		mkdirAll(t, hostLocal)
		mkdirAll(t, filepath.Join(root, hostLocal))
		bindMount(t, hostLocal, filepath.Join(root, hostLocal)) // and of the same host-local dir
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		if err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a); err != nil {
			t.Fatal(err)
		}
		// The ADDs ran here; the DELs in the root, where their log is.
		if calls := n.pluginCalls(t); len(calls) != 2 || !strings.HasPrefix(calls[0], "ADD ") || !strings.HasPrefix(calls[1], "ADD ") {
			t.Fatalf("calls outside the root:\n%s", strings.Join(calls, "\n"))
		}
		dels := linesOf(t, filepath.Join(root, n.log))
		if len(dels) != 2 || !strings.HasPrefix(dels[0], "DEL "+id+" eth0 "+ns+" "+fakePortmap+" ") || !strings.HasPrefix(dels[1], "DEL "+id+" eth0 "+ns+" "+fakeVeth+" ") {
			t.Fatalf("calls in the root, want the chain's DELs, last plugin first:\n%s", strings.Join(dels, "\n"))
		}
		env := linesOf(t, filepath.Join(root, n.log+".env"))
		if want := []string{"PATH=" + NodePath, "CWD=/"}; strings.Join(env, "\n") != strings.Join(want, "\n") {
			t.Errorf("the plugin ran with %q, want %q", env, want)
		}
		if exists(t, a.CacheFile) {
			t.Errorf("%s is still there", a.CacheFile)
		}
	})

	// Each refusal: the cache entry is kept and no plugin ran, here or in
	// the root: the whole chain is checked before its first plugin runs.
	refusals := []struct {
		name    string
		plugins []string                                // linked into the root
		list    func(string) string                     // changes the conflist
		prepare func(t *testing.T, n node, root string) // after the ADD
		netns   bool                                    // the attachment has a live namespace
		want    string
	}{
		{
			name:    "a plugin the exec root does not have refuses the DEL",
			plugins: []string{fakeVeth},
			want:    "CNI DEL would run with " + filepath.Join(pluginDir, fakePortmap) + ": network.exec_root ",
		},
		{
			// fake-veth runs last in the DEL: without the check of the
			// whole chain, fake-portmap's DEL would have run.
			name:    "a plugin that runs last in the DEL refuses it before the first one runs",
			plugins: []string{fakePortmap},
			want:    "CNI DEL would run with " + filepath.Join(pluginDir, fakeVeth) + ": network.exec_root ",
		},
		{
			// The main plugin runs its IPAM plugin itself, from
			// CNI_PATH in the root.
			name:    "an IPAM plugin that is another file in the exec root refuses the DEL",
			plugins: []string{fakeVeth, fakePortmap},
			list: func(s string) string {
				return strings.Replace(s, `"type": "host-local"`, `"type": "fake-ipam"`, 1)
			},
			prepare: func(t *testing.T, _ node, root string) {
				here := filepath.Join(pluginDir, "fake-ipam")
				if err := os.Link(filepath.Join(pluginDir, fakeVeth), here); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Remove(here) })
				copyFile(t, here, filepath.Join(root, here))
			},
			want: "CNI DEL would run with " + filepath.Join(pluginDir, "fake-ipam") + ": it is another file in network.exec_root",
		},
		{
			name:    "a plugin that is another file in the exec root refuses the DEL",
			plugins: []string{fakeVeth},
			prepare: func(t *testing.T, _ node, root string) {
				copyFile(t, filepath.Join(pluginDir, fakePortmap), filepath.Join(root, pluginDir, fakePortmap))
			},
			want: "CNI DEL would run with " + filepath.Join(pluginDir, fakePortmap) + ": it is another file in network.exec_root",
		},
		{
			// A chrooted plugin resolves an absolute symlink in the
			// root. Followed out of the root instead, this one leads to
			// a file that is the plugin here (a hard link of it): the
			// check would pass, and another binary would run.
			name:    "an absolute symlink is followed in the exec root, not out of it",
			plugins: []string{fakeVeth},
			prepare: func(t *testing.T, _ node, root string) {
				other := filepath.Join(t.TempDir(), "bin")
				mkdirAll(t, other)
				mkdirAll(t, filepath.Join(root, other))
				if err := os.Link(filepath.Join(pluginDir, fakePortmap), filepath.Join(other, fakePortmap)); err != nil {
					t.Fatal(err)
				}
				copyFile(t, filepath.Join(pluginDir, fakePortmap), filepath.Join(root, other, fakePortmap))
				if err := os.Symlink(filepath.Join(other, fakePortmap), filepath.Join(root, pluginDir, fakePortmap)); err != nil {
					t.Fatal(err)
				}
			},
			want: "CNI DEL would run with " + filepath.Join(pluginDir, fakePortmap) + ": it is another file in network.exec_root",
		},
		{
			name:    "a namespace the exec root does not have refuses the DEL",
			plugins: []string{fakeVeth, fakePortmap},
			netns:   true,
			want:    "has no such file: mount it into this pod at the node's path",
		},
		{
			// The DEL's prevResult is checked against host-local's dir
			// here: one only the root has would say nobody holds an
			// address a live pod holds on the node.
			name:    "a host-local dir only the exec root has refuses the DEL",
			plugins: []string{fakeVeth, fakePortmap},
			prepare: func(t *testing.T, n node, root string) {
				writeFile(t, filepath.Join(root, n.dataDir, "pods", "10.22.0.5"), containerID(8)+"\r\neth0")
			},
			want: "has host-local's dir, and this pod does not: the addresses the DEL passes on cannot be checked here",
		},
		{
			name:    "a host-local dir that is another one in the exec root refuses the DEL",
			plugins: []string{fakeVeth, fakePortmap},
			prepare: func(t *testing.T, n node, root string) {
				mkdirAll(t, filepath.Join(n.dataDir, "pods"))
				writeFile(t, filepath.Join(root, n.dataDir, "pods", "10.22.0.5"), containerID(8)+"\r\neth0")
			},
			want: "ipam/pods: it is another file in network.exec_root",
		},
		{
			name:    "a namespace that is another one in the exec root refuses the DEL",
			plugins: []string{fakeVeth, fakePortmap},
			netns:   true,
			prepare: func(t *testing.T, n node, root string) {
				newNetns(t, filepath.Join(root, netnsPath(n.netnsDir, 1)), false)
			},
			want: "it is another file in network.exec_root",
		},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			list := n.netConfList("pods", nil)
			if tc.list != nil {
				list = tc.list(list)
			}
			cfg := n.config(t, map[string]string{"10-pods.conflist": list})
			ns := netnsPath(n.netnsDir, 1)
			if tc.netns {
				newNetns(t, ns, false)
			}
			root := execRoot(t, n, tc.plugins...)
			n.add(t, cfg, "pods", id, ns)
			if tc.prepare != nil {
				tc.prepare(t, n, root)
			}
			a := onlyAttachment(t, cfg, n, id)
			err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a)
			wantRefused(t, err, a.CacheFile, tc.want, false) // until the exec root or the node changes
			if !exists(t, a.CacheFile) {
				t.Error("the cache entry is gone")
			}
			if calls := append(n.pluginCalls(t)[2:], linesOf(t, filepath.Join(root, n.log))...); len(calls) != 0 {
				t.Errorf("plugins ran:\n%s", strings.Join(calls, "\n"))
			}
		})
	}

	t.Run("absolute symlinks in the exec root are followed in it, as the chrooted plugin follows them", func(t *testing.T) {
		// /var/run -> /run on most nodes, a plugin dir linked elsewhere:
		// resolved from outside the root they would lead out of it.
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		ns := newNetns(t, netnsPath(n.netnsDir, 1), false).Path
		root := execRoot(t, n)
		real := filepath.Join("/", "real-"+filepath.Base(root))
		mkdirAll(t, filepath.Join(root, real, "bin"))
		for _, p := range []string{fakeVeth, fakePortmap} {
			if err := os.Link(filepath.Join(pluginDir, p), filepath.Join(root, real, "bin", p)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Remove(filepath.Join(root, pluginDir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(real, "bin"), filepath.Join(root, pluginDir)); err != nil {
			t.Fatal(err)
		}
		mkdirAll(t, filepath.Join(root, real, "netns"))
		mkdirAll(t, filepath.Join(root, filepath.Dir(n.netnsDir)))
		if err := os.Symlink(filepath.Join(real, "netns"), filepath.Join(root, n.netnsDir)); err != nil {
			t.Fatal(err)
		}
		bindMount(t, ns, filepath.Join(root, real, "netns", filepath.Base(ns)))
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		if err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a); err != nil {
			t.Fatal(err)
		}
		if dels := linesOf(t, filepath.Join(root, n.log)); len(dels) != 2 || !strings.HasPrefix(dels[0], "DEL "+id+" eth0 "+ns+" ") {
			t.Fatalf("calls in the root, want the chain's DELs:\n%s", strings.Join(dels, "\n"))
		}
	})

	t.Run("a plugin's failure in the exec root is its own CNI error, and keeps the entry", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "fake-portmap", "failDel": true`, 1)})
		root := execRoot(t, n, fakeVeth, fakePortmap)
		n.add(t, cfg, "pods", id, netnsPath(n.netnsDir, 1)) // no such namespace: the DEL gets none
		a := onlyAttachment(t, cfg, n, id)
		err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a)
		var cniErr *types.Error
		var refused *RefusedError
		if !errors.As(err, &cniErr) || errors.As(err, &refused) || !strings.Contains(err.Error(), "DEL fails, as configured") {
			t.Fatalf("err = %v, want the plugin's CNI error", err)
		}
		if !exists(t, a.CacheFile) {
			t.Error("the cache entry is gone")
		}
	})
}

// TestADELWhoseChainCannotBeCheckedInTheExecRootRunsNoPlugin: what the
// check of the whole chain cannot look at fails the DEL (an error, retried)
// before its first plugin runs, as a refusal does: the chain is never left
// half done.
func TestADELWhoseChainCannotBeCheckedInTheExecRootRunsNoPlugin(t *testing.T) {
	ctx := context.Background()
	id := containerID(11)
	for _, tc := range []struct {
		name string
		// prepare changes the DEL's configuration and the exec root, after
		// the ADD.
		prepare func(t *testing.T, n node, cfg *Config, root string)
		// netns: the root has the namespace too, so that only what the case
		// prepares stops the DEL
		netns bool
		want  string
	}{
		{
			// fake-veth runs last in the DEL: fake-portmap's would run.
			name: "a plugin of the chain that is not here",
			prepare: func(t *testing.T, n node, cfg *Config, root string) {
				confDir := t.TempDir()
				writeFile(t, filepath.Join(confDir, "10-pods.conflist"), strings.Replace(n.netConfList("pods", nil), `"type": "fake-veth"`, `"type": "fake-gone"`, 1))
				c, err := FromConfDir(confDir, []string{pluginDir}, 0, false)
				if err != nil {
					t.Fatal(err)
				}
				*cfg = c
			},
			netns: true,
			want:  `"fake-gone"`,
		},
		{
			// Whether the root's first plugin dir holds another fake-veth,
			// which the chrooted plugins would run, cannot be told.
			name: "a plugin dir before the plugin's that cannot be looked into in the exec root",
			prepare: func(t *testing.T, n node, cfg *Config, root string) {
				first := filepath.Join(n.root, "node-only-bin") // not in this pod
				cfg.BinDirs = []string{first, pluginDir}
				mkdirAll(t, filepath.Dir(filepath.Join(root, first)))
				if err := os.Symlink(first, filepath.Join(root, first)); err != nil { // a loop in the root
					t.Fatal(err)
				}
			},
			netns: true,
			want:  "looking for plugin",
		},
		{
			name: "a namespace path that cannot be looked into in the exec root",
			prepare: func(t *testing.T, n node, cfg *Config, root string) {
				mkdirAll(t, filepath.Dir(filepath.Join(root, n.netnsDir)))
				if err := os.Symlink(n.netnsDir, filepath.Join(root, n.netnsDir)); err != nil { // a loop in the root
					t.Fatal(err)
				}
			},
			want: filepath.Base(netnsPath("", 1)) + " in network.exec_root",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			ns := newNetns(t, netnsPath(n.netnsDir, 1), false).Path
			root := execRoot(t, n, fakeVeth, fakePortmap)
			if tc.netns {
				bindMount(t, ns, filepath.Join(root, ns))
			}
			n.add(t, cfg, "pods", id, ns)
			a := onlyAttachment(t, cfg, n, id)
			tc.prepare(t, n, &cfg, root)
			err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a)
			var refused *RefusedError
			if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an error (not a refusal) saying %q", err, tc.want)
			}
			t.Logf("error as wanted: %v", err)
			if !exists(t, a.CacheFile) {
				t.Error("the cache entry is gone")
			}
			if calls := append(n.pluginCalls(t)[2:], linesOf(t, filepath.Join(root, n.log))...); len(calls) != 0 {
				t.Errorf("plugins ran:\n%s", strings.Join(calls, "\n"))
			}
		})
	}
}

func TestRootedExecChecksThePluginRightBeforeItRuns(t *testing.T) {
	ctx := context.Background()
	n := newNode(t)
	root := execRoot(t, n, fakeVeth)
	e := &rootedExec{root: root}
	plugin := filepath.Join(pluginDir, fakeVeth)
	stdin := []byte(`{"cniVersion": "1.0.0", "name": "pods", "type": "fake-veth", "log": "` + n.log + `"}`)
	env := []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + containerID(1), "CNI_IFNAME=eth0", "CNI_PATH=" + pluginDir, "PATH=/image/bin"}
	if _, err := e.ExecPlugin(ctx, plugin, stdin, env); err != nil {
		t.Fatal(err)
	}
	if got := linesOf(t, filepath.Join(root, n.log)); len(got) != 1 || !strings.HasPrefix(got[0], "DEL ") {
		t.Fatalf("calls in the root: %q", got)
	}

	// Replaced in the root since libcni found it here: not run.
	if err := os.Remove(filepath.Join(root, plugin)); err != nil {
		t.Fatal(err)
	}
	copyFile(t, plugin, filepath.Join(root, plugin))
	// A plain error, not a refusal: the plugins of the chain that ran
	// before it changed the node.
	_, err := e.ExecPlugin(ctx, plugin, stdin, env)
	var refused *RefusedError
	if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), "not run: ") || !strings.Contains(err.Error(), "another file in network.exec_root") {
		t.Fatalf("err = %v, want a plain error saying the plugin was not run", err)
	}
	if got := linesOf(t, filepath.Join(root, n.log)); len(got) != 1 {
		t.Fatalf("the replaced plugin ran: %q", got)
	}
}

func TestAnExecRootThatCannotBeOpenedIsAnErrorNamingIt(t *testing.T) {
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	id := containerID(9)
	n.add(t, cfg, "pods", id, netnsPath(n.netnsDir, 1))
	a := onlyAttachment(t, cfg, n, id)
	root := filepath.Join(t.TempDir(), "typo")
	err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(context.Background(), a)
	var refused *RefusedError
	if err == nil || errors.As(err, &refused) || !strings.Contains(err.Error(), "network.exec_root "+root+" cannot be used") {
		t.Fatalf("err = %v, want an error naming network.exec_root %s", err, root)
	}
	if calls := n.pluginCalls(t); len(calls) != 2 || !exists(t, a.CacheFile) {
		t.Fatalf("a DEL ran, or the entry went: %q", calls)
	}
}

// TestAnExecRootThatFindsAnotherPluginFirstRefusesTheDEL: containerd has
// two plugin dirs, and this pod mounts only the second. In the exec root
// (the node's) the first holds its own IPAM plugin and its own main plugin:
// the chrooted main plugin runs its IPAM plugin from CNI_PATH, first dir
// first, and containerd runs the first dir's main plugin. The files the
// check compared (the second dir's) are not the ones that run, or that
// containerd runs: the DEL is refused, and nothing runs. The same when a
// plugin dir that neither has comes before them: it is passed over there as
// here.
func TestAnExecRootThatFindsAnotherPluginFirstRefusesTheDEL(t *testing.T) {
	ctx := context.Background()
	id := containerID(8)
	for _, tc := range []struct {
		typ    string
		absent bool // a plugin dir neither has comes first
	}{{"fake-ipam", false}, {fakeVeth, false}, {"fake-ipam", true}, {fakeVeth, true}} {
		name, typ := tc.typ, tc.typ
		if tc.absent {
			name += ", after a plugin dir neither has"
		}
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			list := strings.Replace(n.netConfList("pods", nil), `"type": "host-local"`, `"type": "fake-ipam"`, 1)
			ipam := filepath.Join(pluginDir, "fake-ipam")
			if err := os.Link(filepath.Join(pluginDir, fakeVeth), ipam); err != nil && !errors.Is(err, os.ErrExist) {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Remove(ipam) })
			cfg := n.config(t, map[string]string{"10-pods.conflist": list})
			first := filepath.Join(n.root, "node-only-bin") // not in this pod
			cfg.BinDirs = []string{first, pluginDir}
			if tc.absent {
				cfg.BinDirs = append([]string{filepath.Join(n.root, "no-such-bin")}, cfg.BinDirs...)
			}
			root := execRoot(t, n, fakeVeth, fakePortmap, "fake-ipam")
			mkdirAll(t, filepath.Join(root, first))
			copyFile(t, filepath.Join(pluginDir, fakeVeth), filepath.Join(root, first, typ))
			n.add(t, cfg, "pods", id, netnsPath(n.netnsDir, 1))
			a := onlyAttachment(t, cfg, n, id)
			err := NewReclaimer(cfg, n.cacheDir, root, thisProcess).DeleteAttachment(ctx, a)
			if dels := linesOf(t, filepath.Join(root, n.log)); len(dels) != 0 {
				t.Errorf("plugins ran in the exec root:\n%s", strings.Join(dels, "\n"))
			}
			wantRefused(t, err, a.CacheFile, filepath.Join(first, typ), false)
		})
	}
}

// TestAPluginsOutputIsKeptOnlySoFar: a CNI result or error is a few KiB; a
// broken plugin that writes without end (for its minute) had all of it
// kept in memory. Past the bound it is dropped: a success that printed too
// much is an error, and a failure's message holds the first of its output.
func TestAPluginsOutputIsKeptOnlySoFar(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	e := &rootedExec{}
	chatty := script("chatty", "head -c 5000000 /dev/zero | tr '\\0' x")
	if out, err := e.ExecPlugin(context.Background(), chatty, nil, nil); err == nil || !strings.Contains(err.Error(), "printed more than") || out != nil {
		t.Fatalf("%d bytes, err %v; want an error for the output past the bound", len(out), err)
	}
	failing := script("failing", "head -c 5000000 /dev/zero | tr '\\0' y >&2; exit 1")
	_, err := e.ExecPlugin(context.Background(), failing, nil, nil)
	if err == nil || len(err.Error()) > 2*maxPluginStderr || !strings.Contains(err.Error(), "yyyy") {
		t.Fatalf("err of %d bytes (%.80v); want the plugin's failure with the first %d bytes of its stderr", len(fmt.Sprint(err)), err, maxPluginStderr)
	}
}
