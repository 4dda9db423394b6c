package nodefs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
			wantErr: `does not exist: is kubelet_root right? (pods.source = "none" disables the oracle)`,
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
	symlink(t, loop, filepath.Join(dir, loop)) // points at itself: ELOOP
	mkdirAll(t, filepath.Join(dir, asDir))

	links, skipped, err := ListContainerLogLinks(context.Background(), dir)
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
		{"a link whose target state is unknown (ELOOP) is skipped, not called dangling", loop, "cannot tell whether the target exists"},
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

	t.Run("a missing container logs dir is an error naming the path", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope")
		_, _, err := ListContainerLogLinks(context.Background(), missing)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err = %v", err)
		}
	})
}
