package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// Node removes each kind of log object under its own root only: pod log
// dirs and container log files under logs.pod_logs_dir, log links under
// logs.container_logs_dir. Each is made under its own root, and removed;
// a network step without a network reclaimer is refused.
func TestNodeRemovesEachLogObjectUnderItsOwnRoot(t *testing.T) {
	const uid = "00000001-0000-4000-8000-000000000000"
	podLogsDir, linksDir := t.TempDir(), t.TempDir()
	podLogs, err := nodefs.NewRemover(podLogsDir)
	if err != nil {
		t.Fatal(err)
	}
	links, err := nodefs.NewRemover(linksDir)
	if err != nil {
		t.Fatal(err)
	}
	n := Node{PodLogs: podLogs, Links: links, KubeletRoot: t.TempDir()}
	ctx := context.Background()

	mk := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(path string) {
		t.Helper()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left (lstat: %v)", path, err)
		}
	}

	logFile := filepath.Join(podLogsDir, "ns_web_"+uid, "app", "0.log")
	mk(logFile)
	if removed, err := n.RemoveContainerLogFiles(ctx, nodefs.ContainerLog{Path: logFile, PodUID: uid, ContainerName: "app"}, nil); err != nil || len(removed) != 1 {
		t.Errorf("container log files: removed %v, err %v", removed, err)
	}
	gone(logFile)

	podLogDir := filepath.Join(podLogsDir, "ns_web_"+uid)
	mk(filepath.Join(podLogDir, "app", "1.log"))
	if err := n.RemovePodLogDir(ctx, podLogDir); err != nil {
		t.Errorf("pod log dir: %v", err)
	}
	gone(podLogDir)

	link := filepath.Join(linksDir, "web_ns_app-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.log")
	if err := os.Symlink(filepath.Join(podLogsDir, "gone.log"), link); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveContainerLogLink(ctx, link); err != nil {
		t.Errorf("log link: %v", err)
	}
	gone(link)

	if err := n.DeleteCNIAttachment(ctx, podnet.Attachment{}); !errors.Is(err, errNoNetwork) {
		t.Errorf("CNI DEL without a network reclaimer: %v, want errNoNetwork", err)
	}
}
