package nodefs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mkdirAll(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func skippedPaths(s []Skipped) map[string]string {
	m := map[string]string{}
	for _, e := range s {
		m[e.Path] = e.Reason
	}
	return m
}

func TestListPodDirs(t *testing.T) {
	const uidA, uidB = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	tests := []struct {
		rule      string
		setup     func(t *testing.T, root string)
		ctx       func() context.Context
		wantReady bool
		wantUIDs  []string
		wantErr   string // substring of Err when not ready
	}{
		{
			rule: "every directory entry is a present pod, parsed or not (kubelet's listPodsFromDisk)",
			setup: func(t *testing.T, root string) {
				mkdirAll(t, filepath.Join(root, "pods", uidA, "volumes"))
				mkdirAll(t, filepath.Join(root, "pods", testMD5UID))
				mkdirAll(t, filepath.Join(root, "pods", "not-a-uid"))
			},
			wantReady: true,
			wantUIDs:  []string{uidA, testMD5UID, "not-a-uid"},
		},
		{
			rule: "files and symlinks in the pods dir are not pods",
			setup: func(t *testing.T, root string) {
				mkdirAll(t, filepath.Join(root, "pods", uidA))
				writeFile(t, filepath.Join(root, "pods", uidB), "")
				symlink(t, filepath.Join(root, "pods", uidA), filepath.Join(root, "pods", "33333333-3333-3333-3333-333333333333"))
			},
			wantReady: true,
			wantUIDs:  []string{uidA},
		},
		{
			rule:      "an empty pods dir is ready with no pods",
			setup:     func(t *testing.T, root string) { mkdirAll(t, filepath.Join(root, "pods")) },
			wantReady: true,
		},
		{
			rule:    "a missing pods dir makes the oracle not ready and says what to check",
			setup:   func(t *testing.T, root string) {},
			wantErr: `does not exist: is pods.kubelet_root right? (pods.source = "none" disables the oracle)`,
		},
		{
			rule:    "a file instead of the pods dir makes the oracle not ready",
			setup:   func(t *testing.T, root string) { writeFile(t, filepath.Join(root, "pods"), "") },
			wantErr: "cannot be read",
		},
		{
			rule:  "a cancelled context makes the oracle not ready",
			setup: func(t *testing.T, root string) { mkdirAll(t, filepath.Join(root, "pods", uidA)) },
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			wantErr: "context canceled",
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			root := t.TempDir()
			tt.setup(t, root)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			got := ListPodDirs(ctx, root)
			if got.Ready != tt.wantReady {
				t.Fatalf("Ready = %v (Err %v), want %v", got.Ready, got.Err, tt.wantReady)
			}
			if !tt.wantReady {
				if got.Err == nil || !strings.Contains(got.Err.Error(), tt.wantErr) || !strings.Contains(got.Err.Error(), filepath.Join(root, "pods")) {
					t.Fatalf("Err = %v, want it to name %s and contain %q", got.Err, filepath.Join(root, "pods"), tt.wantErr)
				}
				if got.Present(uidA) {
					t.Fatal("a not-ready oracle reports a pod present")
				}
				return
			}
			if got.Err != nil {
				t.Fatalf("ready oracle with Err %v", got.Err)
			}
			if len(got.UIDs) != len(tt.wantUIDs) {
				t.Fatalf("UIDs = %v, want %v", got.UIDs, tt.wantUIDs)
			}
			for _, uid := range tt.wantUIDs {
				if !got.Present(uid) {
					t.Errorf("Present(%q) = false, want true (UIDs %v)", uid, got.UIDs)
				}
			}
		})
	}
}

func TestListPodLogDirs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	outside := t.TempDir()
	current := "default_nginx_" + testUUID
	static := "kube-system_etcd-node1_" + testMD5UID
	legacy := "99999999-9999-9999-9999-999999999999"
	symlinked := "default_linked_" + "88888888-8888-8888-8888-888888888888"
	file := "default_file_" + "77777777-7777-7777-7777-777777777777"
	mkdirAll(t, filepath.Join(dir, current, "nginx"))
	writeFile(t, filepath.Join(dir, current, "nginx", "0.log"), "log")
	mkdirAll(t, filepath.Join(dir, static))
	mkdirAll(t, filepath.Join(dir, legacy))
	mkdirAll(t, filepath.Join(outside, "target"))
	symlink(t, filepath.Join(outside, "target"), filepath.Join(dir, symlinked))
	writeFile(t, filepath.Join(dir, file), "")
	mkdirAll(t, filepath.Join(dir, "not_a_pod"))
	mkdirAll(t, filepath.Join(dir, "Default_nginx_"+testUUID))

	dirs, skipped, err := ListPodLogDirs(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]PodLogDir{
		current: {Path: filepath.Join(dir, current), Name: current, Namespace: "default", PodName: "nginx", UID: testUUID},
		static:  {Path: filepath.Join(dir, static), Name: static, Namespace: "kube-system", PodName: "etcd-node1", UID: testMD5UID},
		legacy:  {Path: filepath.Join(dir, legacy), Name: legacy, UID: legacy},
	}
	if len(dirs) != len(want) {
		t.Fatalf("dirs = %+v, want %d of them", dirs, len(want))
	}
	for _, d := range dirs {
		if d != want[d.Name] {
			t.Errorf("got %+v, want %+v", d, want[d.Name])
		}
	}
	t.Run("a symlink to a directory is skipped, never listed", func(t *testing.T) {
		if r := skippedPaths(skipped)[filepath.Join(dir, symlinked)]; !strings.Contains(r, "symlink") {
			t.Fatalf("reason %q", r)
		}
	})
	t.Run("a regular file with a valid name is skipped", func(t *testing.T) {
		if r := skippedPaths(skipped)[filepath.Join(dir, file)]; !strings.Contains(r, "not a directory") {
			t.Fatalf("reason %q", r)
		}
	})
	t.Run("directories whose names do not parse are skipped with the parse error", func(t *testing.T) {
		for _, n := range []string{"not_a_pod", "Default_nginx_" + testUUID} {
			if r := skippedPaths(skipped)[filepath.Join(dir, n)]; !strings.Contains(r, n) {
				t.Fatalf("%s: reason %q", n, r)
			}
		}
	})
	if len(skipped) != 4 {
		t.Errorf("skipped = %+v, want 4 entries", skipped)
	}

	t.Run("a missing pod logs dir is an error naming the path", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, _, err := ListPodLogDirs(context.Background(), missing)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestListContainerLogLinks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "containers")
	logs := t.TempDir()
	live := "nginx_default_nginx-" + testCID + ".log"
	dangling := "web_prod_app-abcdef012345.log"
	regular := "file_default_app-abcdef.log"
	unparsable := "nginx_default_nginx.log"
	notLog := "nginx_default_nginx-" + testCID + ".txt"
	loop := "loop_default_app-abcdef.log"
	asDir := "dir_default_app-abcdef.log"
	writeFile(t, filepath.Join(logs, "0.log"), "log")
	symlink(t, filepath.Join(logs, "0.log"), filepath.Join(dir, live))
	symlink(t, filepath.Join(logs, "gone.log"), filepath.Join(dir, dangling))
	writeFile(t, filepath.Join(dir, regular), "")
	symlink(t, filepath.Join(logs, "0.log"), filepath.Join(dir, unparsable))
	symlink(t, filepath.Join(logs, "0.log"), filepath.Join(dir, notLog))
	symlink(t, loop, filepath.Join(dir, loop)) // points at itself: ELOOP for a stat
	mkdirAll(t, filepath.Join(dir, asDir))

	links, skipped, err := ListContainerLogLinks(context.Background(), dir, logs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ContainerLogLink{
		live: {Path: filepath.Join(dir, live), Name: live, Target: filepath.Join(logs, "0.log"),
			ContainerID: testCID, PodName: "nginx", Namespace: "default", ContainerName: "nginx"},
		dangling: {Path: filepath.Join(dir, dangling), Name: dangling, Target: filepath.Join(logs, "gone.log"),
			ContainerID: "abcdef012345", PodName: "web", Namespace: "prod", ContainerName: "app", Dangling: true},
	}
	t.Run("live links are listed not dangling, dangling links dangling", func(t *testing.T) {
		if len(links) != len(want) {
			t.Fatalf("links = %+v, want %d", links, len(want))
		}
		for _, l := range links {
			if l != want[l.Name] {
				t.Errorf("got %+v, want %+v", l, want[l.Name])
			}
		}
	})
	sk := skippedPaths(skipped)
	for _, tt := range []struct{ rule, name, reason string }{
		{"a regular file with a valid name is skipped", regular, "not a symlink"},
		{"a directory is skipped", asDir, "not a symlink"},
		{"a link whose name does not parse is skipped", unparsable, "no '-'"},
		{"a link not named *.log is skipped", notLog, `does not end with ".log"`},
		{"a link pointing at itself is not followed, not called dangling", loop, "points outside logs.pod_logs_dir"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if r, ok := sk[filepath.Join(dir, tt.name)]; !ok || !strings.Contains(r, tt.reason) {
				t.Fatalf("skipped reason %q (present %v), want it to contain %q", r, ok, tt.reason)
			}
		})
	}
	if len(skipped) != 5 {
		t.Errorf("skipped = %+v, want 5", skipped)
	}
}

// testLinkName is a container log link name that parses.
const testLinkName = "nginx_default_nginx-" + testCID + ".log"

// testPodLogDir is a pod log dir name that parses: where testLinkName's
// target is, below the pod logs dir.
const testPodLogDir = "default_nginx_" + testUUID

// listOneLink makes dir/testLinkName pointing to target and lists dir with
// pods as the pod logs dir. It returns the link, or the skip reason.
func listOneLink(t *testing.T, dir, pods, target string) (l ContainerLogLink, reason string) {
	t.Helper()
	symlink(t, target, filepath.Join(dir, testLinkName))
	links, skipped, err := ListContainerLogLinks(context.Background(), dir, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(links) == 1 && len(skipped) == 0:
		if links[0].Target != target {
			t.Errorf("Target = %q, want the link's content %q", links[0].Target, target)
		}
		return links[0], ""
	case len(links) == 0 && len(skipped) == 1:
		if skipped[0].Path != filepath.Join(dir, testLinkName) {
			t.Errorf("skipped %s, want the link", skipped[0].Path)
		}
		return ContainerLogLink{}, skipped[0].Reason
	}
	t.Fatalf("links %+v, skipped %+v: want the one link listed or skipped", links, skipped)
	return ContainerLogLink{}, ""
}

// Whether a link dangles is decided with lstat only, and only inside the
// pod logs dir: a dead mount elsewhere cannot hang the listing.
func TestContainerLogLinkTargetsAreOnlyExaminedInsideThePodLogsDir(t *testing.T) {
	const listed = ""
	tests := []struct {
		rule string
		// setup lays out base, which holds containers/ (the container logs
		// dir) and pods/ (the pod logs dir), and returns the link's target.
		setup        func(t *testing.T, base, pods string) string
		wantDangling bool
		// wantReason is the skip reason, with $BASE and $PODS standing for
		// the paths; listed means the link is listed.
		wantReason string
	}{
		{
			rule: "a target inside the pod logs dir that exists does not dangle",
			setup: func(t *testing.T, _, pods string) string {
				writeFile(t, filepath.Join(pods, testPodLogDir, "nginx", "0.log"), "log")
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantReason: listed,
		},
		{
			rule: "a target missing at the last level dangles",
			setup: func(t *testing.T, _, pods string) string {
				mkdirAll(t, filepath.Join(pods, testPodLogDir, "nginx"))
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantDangling: true,
			wantReason:   listed,
		},
		{
			rule: "a target deeper than kubelet writes is not examined",
			setup: func(t *testing.T, _, pods string) string {
				return filepath.Join(pods, testPodLogDir, "nginx", strings.Repeat("d/", 20)+"0.log")
			},
			wantReason: "23 levels below logs.pod_logs_dir, deeper than kubelet's <pod log dir>/<container>/<n>.log: not examined",
		},
		{
			rule: "a target missing at an intermediate level dangles",
			setup: func(t *testing.T, _, pods string) string {
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantDangling: true,
			wantReason:   listed,
		},
		{
			rule: "a relative target is taken relative to the container logs dir",
			setup: func(t *testing.T, _, pods string) string {
				writeFile(t, filepath.Join(pods, testPodLogDir, "nginx", "0.log"), "log")
				return "../pods/" + testPodLogDir + "/nginx/0.log"
			},
			wantReason: listed,
		},
		{
			rule: "a relative target missing inside the pod logs dir dangles",
			setup: func(t *testing.T, _, _ string) string {
				return "../pods/" + testPodLogDir + "/nginx/0.log"
			},
			wantDangling: true,
			wantReason:   listed,
		},
		{
			rule: "a last component that exists does not dangle whatever it is, even a symlink to nowhere",
			setup: func(t *testing.T, base, pods string) string {
				symlink(t, filepath.Join(base, "nowhere"), filepath.Join(pods, testPodLogDir, "nginx", "0.log"))
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantReason: listed,
		},
		{
			rule: "a target outside the pod logs dir is not followed, even under a directory that does not exist",
			setup: func(t *testing.T, _, _ string) string {
				return "/nrihk-nonexistent-mount/" + testPodLogDir + "/nginx/0.log"
			},
			wantReason: "target /nrihk-nonexistent-mount/" + testPodLogDir + "/nginx/0.log points outside logs.pod_logs_dir ($PODS): not followed",
		},
		{
			rule: "a target under /proc is not followed, even one that leads back into the pod logs dir",
			setup: func(t *testing.T, _, pods string) string {
				writeFile(t, filepath.Join(pods, testPodLogDir, "nginx", "0.log"), "log")
				return "/proc/self/root" + pods + "/" + testPodLogDir + "/nginx/0.log"
			},
			wantReason: "target /proc/self/root$PODS/" + testPodLogDir + "/nginx/0.log points outside logs.pod_logs_dir ($PODS): not followed",
		},
		{
			rule: "a target that climbs out of the pod logs dir with .. is outside it",
			setup: func(t *testing.T, base, pods string) string {
				writeFile(t, filepath.Join(base, "outside", "0.log"), "log")
				return pods + "/" + testPodLogDir + "/../../outside/0.log"
			},
			wantReason: "target $PODS/" + testPodLogDir + "/../../outside/0.log has a '..' after a name, which the kernel resolves through that name (perhaps a symlink): not examined",
		},
		{
			rule: "a target with .. after a symlink is not examined: the kernel resolves the symlink first, the cleaned path does not",
			setup: func(t *testing.T, _, pods string) string {
				// sym/../gone/0.log is pods/a/gone/0.log to the kernel
				// (and to kubelet's os.Stat), pods/gone/0.log cleaned.
				mkdirAll(t, filepath.Join(pods, "a", "b"))
				writeFile(t, filepath.Join(pods, "a", "gone", "0.log"), "log")
				symlink(t, "a/b", filepath.Join(pods, "sym"))
				return pods + "/sym/../gone/0.log"
			},
			wantReason: "target $PODS/sym/../gone/0.log has a '..' after a name, which the kernel resolves through that name (perhaps a symlink): not examined",
		},
		{
			rule: "a relative target that resolves outside the pod logs dir is not followed",
			setup: func(t *testing.T, _, _ string) string {
				return "../outside/0.log"
			},
			wantReason: "target $BASE/outside/0.log points outside logs.pod_logs_dir ($PODS): not followed",
		},
		{
			rule: "the pod logs dir itself is not strictly below it",
			setup: func(t *testing.T, _, pods string) string {
				return pods + "/"
			},
			wantReason: "target $PODS points outside logs.pod_logs_dir ($PODS): not followed",
		},
		{
			rule: "a sibling whose name starts with the pod logs dir's is outside it",
			setup: func(t *testing.T, _, pods string) string {
				return pods + "-old/" + testPodLogDir + "/nginx/0.log"
			},
			wantReason: "target $PODS-old/" + testPodLogDir + "/nginx/0.log points outside logs.pod_logs_dir ($PODS): not followed",
		},
		{
			rule: "an intermediate symlink is not followed, even to an existing directory",
			setup: func(t *testing.T, _, pods string) string {
				writeFile(t, filepath.Join(pods, "elsewhere", "nginx", "0.log"), "log")
				symlink(t, filepath.Join(pods, "elsewhere"), filepath.Join(pods, testPodLogDir))
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantReason: "cannot tell whether the target $PODS/" + testPodLogDir + "/nginx/0.log exists: $PODS/" + testPodLogDir + " is a symlink, which is not followed",
		},
		{
			rule: "an intermediate symlink to nowhere does not make the target dangle",
			setup: func(t *testing.T, _, pods string) string {
				mkdirAll(t, filepath.Join(pods, testPodLogDir))
				symlink(t, "/nrihk-nonexistent-mount", filepath.Join(pods, testPodLogDir, "nginx"))
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantReason: "cannot tell whether the target $PODS/" + testPodLogDir + "/nginx/0.log exists: $PODS/" + testPodLogDir + "/nginx is a symlink, which is not followed",
		},
		{
			rule: "an intermediate non-directory leaves the state unknown",
			setup: func(t *testing.T, _, pods string) string {
				writeFile(t, filepath.Join(pods, testPodLogDir), "")
				return filepath.Join(pods, testPodLogDir, "nginx", "0.log")
			},
			wantReason: "cannot tell whether the target $PODS/" + testPodLogDir + "/nginx/0.log exists: $PODS/" + testPodLogDir + " is a regular file, not a directory",
		},
		{
			rule: "any other lstat error leaves the state unknown and is named",
			setup: func(t *testing.T, _, pods string) string {
				mkdirAll(t, filepath.Join(pods, testPodLogDir))
				return filepath.Join(pods, testPodLogDir, strings.Repeat("n", 300), "0.log")
			},
			wantReason: "/" + strings.Repeat("n", 300) + ": file name too long",
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			base := t.TempDir()
			dir, pods := filepath.Join(base, "containers"), filepath.Join(base, "pods")
			mkdirAll(t, dir)
			mkdirAll(t, pods)
			target := tt.setup(t, base, pods)
			l, reason := listOneLink(t, dir, pods, target)
			want := strings.NewReplacer("$BASE", base, "$PODS", pods).Replace(tt.wantReason)
			switch {
			case tt.wantReason == listed && reason != "":
				t.Fatalf("skipped (%s), want listed with Dangling %v", reason, tt.wantDangling)
			case tt.wantReason == listed && l.Dangling != tt.wantDangling:
				t.Fatalf("Dangling = %v, want %v", l.Dangling, tt.wantDangling)
			case tt.wantReason != listed && !strings.HasSuffix(reason, want):
				t.Fatalf("reason %q (listed %+v), want %q", reason, l, want)
			}
		})
	}
}

// A mount point inside the pod logs dir is found in the mount table and
// never stat'ed: lstat of a dead NFS mount point hangs.
func TestContainerLogLinkTargetsNeverEnterAMountPoint(t *testing.T) {
	setup := func(t *testing.T) (base, dir, pods string) {
		base = t.TempDir()
		dir, pods = filepath.Join(base, "containers"), filepath.Join(base, "pods")
		mkdirAll(t, dir)
		mkdirAll(t, filepath.Join(pods, testPodLogDir))
		return base, dir, pods
	}
	mountReason := func(target, mnt string) string {
		return "target " + target + " crosses into another file system at " + mnt + ", a mount point in logs.pod_logs_dir: not examined"
	}
	t.Run("a target below a mount point is skipped from the mount table", func(t *testing.T) {
		_, dir, pods := setup(t)
		mnt := filepath.Join(pods, testPodLogDir)
		mount(t, "tmpfs", mnt, "tmpfs")
		target := filepath.Join(mnt, "nginx", "0.log")
		writeFile(t, target, "log")
		if _, reason := listOneLink(t, dir, pods, target); reason != mountReason(target, mnt) {
			t.Fatalf("reason %q, want %q", reason, mountReason(target, mnt))
		}
	})
	t.Run("a target that is a mount point is skipped from the mount table", func(t *testing.T) {
		_, dir, pods := setup(t)
		mnt := filepath.Join(pods, testPodLogDir)
		mount(t, "tmpfs", mnt, "tmpfs")
		if _, reason := listOneLink(t, dir, pods, mnt); reason != mountReason(mnt, mnt) {
			t.Fatalf("reason %q, want %q", reason, mountReason(mnt, mnt))
		}
	})
	t.Run("a same-device bind mount is skipped from the mount table", func(t *testing.T) {
		base, dir, pods := setup(t)
		mkdirAll(t, filepath.Join(base, "elsewhere", "nginx"))
		mnt := filepath.Join(pods, testPodLogDir)
		mount(t, filepath.Join(base, "elsewhere"), mnt, "")
		target := filepath.Join(mnt, "nginx", "0.log")
		if _, reason := listOneLink(t, dir, pods, target); reason != mountReason(target, mnt) {
			t.Fatalf("reason %q, want %q", reason, mountReason(target, mnt))
		}
	})
	t.Run("a pod logs dir configured through a symlink finds the mount points in it", func(t *testing.T) {
		base, dir, pods := setup(t)
		mount(t, "tmpfs", filepath.Join(pods, testPodLogDir), "tmpfs")
		configured := filepath.Join(base, "pods-link")
		symlink(t, pods, configured)
		target := filepath.Join(configured, testPodLogDir, "nginx", "0.log")
		want := mountReason(target, filepath.Join(configured, testPodLogDir))
		if _, reason := listOneLink(t, dir, configured, target); reason != want {
			t.Fatalf("reason %q, want %q", reason, want)
		}
	})
	// A mount that appears after the table was read is still caught by the
	// lstat of the component: its device or mount differs.
	for _, tc := range []struct{ rule, fstype string }{
		{"a mount missing from the table is told apart by its device", "tmpfs"},
		{"a bind mount missing from the table is told apart by its mount", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			base, dir, pods := setup(t)
			mnt := filepath.Join(pods, testPodLogDir)
			src := "tmpfs"
			if tc.fstype == "" {
				src = filepath.Join(base, "elsewhere")
				mkdirAll(t, src)
			}
			mount(t, src, mnt, tc.fstype)
			targets, err := openLogTargets(pods)
			if err != nil {
				t.Fatal(err)
			}
			defer targets.close()
			targets.mounts = nil // as if the mount came after the table was read
			target := filepath.Join(mnt, "nginx", "0.log")
			_, reason := targets.examine(dir, target)
			if want := "target " + target + " crosses into another file system at " + mnt + ": "; !strings.HasPrefix(reason, want) {
				t.Fatalf("reason %q, want it to start with %q", reason, want)
			}
		})
	}
}

func TestListContainerLogLinksErrors(t *testing.T) {
	tests := []struct {
		rule string
		// setup returns the container logs dir and the pod logs dir.
		setup func(t *testing.T, base string) (dir, pods string)
		ctx   func() context.Context
		want  func(base string) string // what the error must name
		is    error                    // nil: any error
	}{
		{
			rule: "a missing container logs dir is an error naming it",
			setup: func(t *testing.T, base string) (string, string) {
				mkdirAll(t, filepath.Join(base, "pods"))
				return filepath.Join(base, "nope"), filepath.Join(base, "pods")
			},
			want: func(base string) string { return filepath.Join(base, "nope") },
			is:   fs.ErrNotExist,
		},
		{
			rule: "a missing pod logs dir is an error naming it",
			setup: func(t *testing.T, base string) (string, string) {
				symlink(t, filepath.Join(base, "nope", testPodLogDir, "nginx", "0.log"), filepath.Join(base, "containers", testLinkName))
				return filepath.Join(base, "containers"), filepath.Join(base, "nope")
			},
			want: func(base string) string { return "pod logs dir " + filepath.Join(base, "nope") },
			is:   fs.ErrNotExist,
		},
		{
			rule: "a pod logs dir that is not a directory is an error naming it",
			setup: func(t *testing.T, base string) (string, string) {
				containersDirWithALink(t, base)
				writeFile(t, filepath.Join(base, "pods"), "")
				return filepath.Join(base, "containers"), filepath.Join(base, "pods")
			},
			want: func(base string) string { return "pod logs dir " + filepath.Join(base, "pods") },
		},
		{
			rule: "a relative pod logs dir is an error",
			setup: func(t *testing.T, base string) (string, string) {
				containersDirWithALink(t, base)
				return filepath.Join(base, "containers"), "var/log/pods"
			},
			want: func(string) string { return `pod logs dir "var/log/pods" is not an absolute path` },
		},
		{
			rule: "the whole file system as the pod logs dir is an error",
			setup: func(t *testing.T, base string) (string, string) {
				containersDirWithALink(t, base)
				return filepath.Join(base, "containers"), "/"
			},
			want: func(string) string { return `pod logs dir "/" is the whole file system` },
		},
		{
			rule: "a cancelled context is an error",
			setup: func(t *testing.T, base string) (string, string) {
				mkdirAll(t, filepath.Join(base, "pods"))
				symlink(t, filepath.Join(base, "pods", testPodLogDir, "nginx", "0.log"), filepath.Join(base, "containers", testLinkName))
				return filepath.Join(base, "containers"), filepath.Join(base, "pods")
			},
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			want: func(base string) string { return filepath.Join(base, "containers") },
			is:   context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			base := t.TempDir()
			dir, pods := tt.setup(t, base)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			links, skipped, err := ListContainerLogLinks(ctx, dir, pods, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want(base)) || tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want it to name %q (and be %v)", err, tt.want(base), tt.is)
			}
			if links != nil || skipped != nil {
				t.Fatalf("links %+v, skipped %+v returned with an error", links, skipped)
			}
		})
	}
}

// containersDirWithALink makes base/containers with one link to examine:
// the pod logs dir is opened only for a link that needs it.
func containersDirWithALink(t *testing.T, base string) {
	t.Helper()
	mkdirAll(t, filepath.Join(base, "containers"))
	symlink(t, "/var/log/pods/x/0.log", filepath.Join(base, "containers", testLinkName))
}

// A link's target names the pod log dir of its pod: its UID names the pod
// in logs, but only when that dir's namespace and pod name are the link's.
func TestContainerLogLinkPodUIDComesFromATargetOfItsOwnPod(t *testing.T) {
	const uid = "8a5b8c3e-1f2d-4c5b-9a6e-7d8f9a0b1c2d"
	for _, tc := range []struct {
		rule, target, want string
	}{
		{"the target's pod log dir names the link's pod", "ns_web_" + uid + "/app/0.log", uid},
		{"a relative target is read relative to the link", "../pods/ns_web_" + uid + "/app/0.log", uid},
		{"another pod's dir names nothing", "ns_api_" + uid + "/app/0.log", ""},
		{"a legacy <uid> dir names nothing", uid + "/app/0.log", ""},
		{"a target outside the pod logs dir names nothing", "/elsewhere/ns_web_" + uid + "/app/0.log", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir, logs := linkAndLogDirs(t)
			target := tc.target
			if !filepath.IsAbs(target) && !strings.HasPrefix(target, "..") {
				target = filepath.Join(logs, target)
			}
			name := "web_ns_app-" + testCID + ".log"
			symlink(t, target, filepath.Join(dir, name))
			links, skipped, err := ListContainerLogLinks(context.Background(), dir, logs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && len(links) == 0 {
				return // skipped (outside the pod logs dir): names nothing either
			}
			if len(links) != 1 {
				t.Fatalf("links = %+v, skipped = %+v", links, skipped)
			}
			if links[0].PodUID != tc.want {
				t.Errorf("PodUID = %q, want %q", links[0].PodUID, tc.want)
			}
		})
	}
}

// linkAndLogDirs makes a container logs dir and a pod logs dir side by side
// (containers/ and pods/ in a temp dir).
func linkAndLogDirs(t *testing.T) (dir, logs string) {
	t.Helper()
	base := t.TempDir()
	dir, logs = filepath.Join(base, "containers"), filepath.Join(base, "pods")
	mkdirAll(t, dir)
	mkdirAll(t, logs)
	return dir, logs
}

// A link's TargetLogDir is the pod log dir its target lies below, whatever
// the dir's name: the link dangles once that dir is removed. A target
// directly in the pod logs dir lies below no pod log dir.
func TestContainerLogLinkTargetLogDirIsTheDirItsTargetLiesBelow(t *testing.T) {
	const uid = "8a5b8c3e-1f2d-4c5b-9a6e-7d8f9a0b1c2d"
	for _, tc := range []struct {
		rule, target, want string
	}{
		{"below a pod log dir of its pod", "ns_web_" + uid + "/app/0.log", "ns_web_" + uid},
		{"a relative target is read relative to the link", "../pods/ns_web_" + uid + "/app/0.log", "ns_web_" + uid},
		{"below another pod's dir", "ns_api_" + uid + "/app/0.log", "ns_api_" + uid},
		{"below a dir whose name does not parse", "junk/app/0.log", "junk"},
		{"a dangling target names its dir too", "ns_gone_" + uid + "/app/0.log", "ns_gone_" + uid},
		{"directly in the pod logs dir", "0.log", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir, logs := linkAndLogDirs(t)
			target := tc.target
			if !strings.HasPrefix(target, "..") {
				target = filepath.Join(logs, target)
			}
			if !strings.Contains(tc.rule, "dangling") {
				writeFile(t, filepath.Join(logs, tc.target), "log")
			}
			symlink(t, target, filepath.Join(dir, "web_ns_app-"+testCID+".log"))
			links, skipped, err := ListContainerLogLinks(context.Background(), dir, logs, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(links) != 1 {
				t.Fatalf("links = %+v, skipped = %+v", links, skipped)
			}
			want := ""
			if tc.want != "" {
				want = filepath.Join(logs, tc.want)
			}
			if links[0].TargetLogDir != want {
				t.Errorf("TargetLogDir = %q, want %q", links[0].TargetLogDir, want)
			}
		})
	}
}

// A link the caller rules out (its container is listed running) is not
// examined at all: neither listed nor skipped, whatever its target.
func TestOnlyCandidateLinksAreExamined(t *testing.T) {
	base := t.TempDir()
	dir, logs := filepath.Join(base, "containers"), filepath.Join(base, "pods")
	mkdirAll(t, dir)
	mkdirAll(t, logs)
	running, gone := "web_ns_app-"+testCID+".log", "web_ns_app-abcdef012345.log"
	symlink(t, "/outside/0.log", filepath.Join(dir, running)) // examined, it would be skipped
	symlink(t, filepath.Join(logs, "ns_web_x", "app", "0.log"), filepath.Join(dir, gone))
	notRunning := func(l ContainerLogLink) bool { return l.ContainerID != testCID }
	links, skipped, err := ListContainerLogLinks(context.Background(), dir, logs, notRunning)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Name != gone || !links[0].Dangling || len(skipped) != 0 {
		t.Fatalf("links = %+v, skipped = %+v; want only %s, dangling", links, skipped, gone)
	}
	if _, skipped, _ := ListContainerLogLinks(context.Background(), dir, logs, nil); len(skipped) != 1 {
		t.Fatalf("without a filter the outside link is not skipped (%+v): the test proves nothing", skipped)
	}
}

// TestListPodDirsReadsTheBirthTimeWhereTheFileSystemKeepsOne: the oracle's
// check of an empty pods dir made after the sandboxes needs it.
func TestListPodDirsReadsTheBirthTimeWhereTheFileSystemKeepsOne(t *testing.T) {
	root := t.TempDir()
	before := time.Now().Add(-time.Second)
	mkdirAll(t, filepath.Join(root, "pods"))
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, root, 0, unix.STATX_BTIME, &stx); err != nil || stx.Mask&unix.STATX_BTIME == 0 {
		t.Skipf("the file system of %s keeps no birth times (statx: %v)", root, err)
	}
	d := ListPodDirs(context.Background(), root)
	if !d.Ready {
		t.Fatal(d.Err)
	}
	if d.Born.Before(before) || d.Born.After(time.Now()) {
		t.Errorf("Born = %s, want the pods dir's making, after %s", d.Born, before)
	}
}

// TestAPodsDirReplacedWhileReadIsNoOracle: the pods dir's entries and its
// identity (which the check right before a step compares) must be of one
// directory; one mounted over or put in its place between the two reads
// gives no oracle this pass.
func TestAPodsDirReplacedWhileReadIsNoOracle(t *testing.T) {
	root := t.TempDir()
	pods := filepath.Join(root, "pods")
	if err := os.MkdirAll(filepath.Join(pods, "0f4d3c2b-1a2b-4c3d-8e9f-0123456789ab"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d := listPodDirs(context.Background(), root, nil); !d.Ready || d.Ino == 0 {
		t.Fatalf("the pods dir, left alone: %+v, want a ready oracle with its inode", d)
	}
	d := listPodDirs(context.Background(), root, func() {
		if err := os.Rename(pods, pods+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(pods, 0o755); err != nil {
			t.Fatal(err)
		}
	})
	if d.Ready || d.Err == nil || !strings.Contains(d.Err.Error(), "mounted over or replaced while it was read") {
		t.Fatalf("a pods dir replaced while read: ready %v, err %v; want no oracle, saying so", d.Ready, d.Err)
	}
}
