package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPeerPIDIsTheServingProcess(t *testing.T) {
	c, err := Dial(serve(t, &fakeRuntime{}), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pid, err := c.PeerPID(context.Background())
	if err != nil || pid != os.Getpid() {
		t.Fatalf("PeerPID = %d, %v; want this test's process, %d", pid, err, os.Getpid())
	}
	// The probe leaves the server serving.
	if _, err := c.Snapshot(context.Background()); err != nil {
		t.Fatalf("the server stopped serving after the probe: %v", err)
	}
}

func TestPeerPIDSaysWhichSocketItCannotReach(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	c, err := Dial("unix://"+sock, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.PeerPID(context.Background()); err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("err = %v, want one naming %s", err, sock)
	}
}
