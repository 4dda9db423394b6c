package podnet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeProc is a /proc of threads (pid/task/tid/ns/net files) whose stats
// are scripted: each path answers its errors in turn, then its inode.
type fakeProc struct {
	root string
	// answers are what successive stats of a path return: an error, or nil
	// for the inode; the last one repeats.
	answers map[string][]error
	inodes  map[string]uint64
	// onStat runs after each scripted stat of path (e.g. the thread exits).
	onStat func(path string, call int)
	calls  map[string]int
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{root: t.TempDir(), answers: map[string][]error{}, inodes: map[string]uint64{}, calls: map[string]int{}}
}

// thread adds pid's thread tid in the namespace of inode ino, whose stats
// answer errs in turn first.
func (p *fakeProc) thread(t *testing.T, pid, tid string, ino uint64, errs ...error) string {
	dir := filepath.Join(p.root, pid, "task", tid, "ns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := p.root + "/" + pid + "/task/" + tid + "/ns/net"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.inodes[path] = ino
	p.answers[path] = append(errs, nil)
	return path
}

func (p *fakeProc) stat(path string) (uint64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err // gone from the tree: ENOENT, as the kernel's
	}
	call := p.calls[path]
	p.calls[path]++
	answers := p.answers[path]
	err := answers[min(call, len(answers)-1)]
	if p.onStat != nil {
		p.onStat(path, call)
	}
	if err != nil {
		return 0, err
	}
	return p.inodes[path], nil
}

func TestThreadsNetnsRereadsAThreadThatCouldNotBeRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		// build makes the tree; it returns the inodes wanted in use, or
		// the error text wanted.
		build   func(t *testing.T, p *fakeProc) (want []uint64, wantErr string)
		rereads int
	}{
		{
			name: "a thread that exits while it is read (EACCES, then gone) is in no namespace",
			build: func(t *testing.T, p *fakeProc) ([]uint64, string) {
				p.thread(t, "10", "10", 100)
				exiting := p.thread(t, "20", "21", 200, unix.EACCES)
				p.onStat = func(path string, call int) {
					if path == exiting && call == 0 {
						if err := os.RemoveAll(filepath.Join(p.root, "20")); err != nil {
							t.Error(err)
						}
					}
				}
				return []uint64{100}, ""
			},
			rereads: 3,
		},
		{
			name: "a thread unreadable once, then readable, counts",
			build: func(t *testing.T, p *fakeProc) ([]uint64, string) {
				p.thread(t, "10", "10", 100)
				p.thread(t, "20", "20", 200, unix.EACCES)
				return []uint64{100, 200}, ""
			},
			rereads: 3,
		},
		{
			name: "a thread that stays unreadable leaves nothing known",
			build: func(t *testing.T, p *fakeProc) ([]uint64, string) {
				p.thread(t, "10", "10", 100)
				p.thread(t, "20", "22", 200, unix.EACCES, unix.EACCES, unix.EACCES, unix.EACCES, unix.EACCES)
				return nil, "the network namespace of 1 threads cannot be read (read 3 more times"
			},
			rereads: 3,
		},
		{
			name: "without rereads an unreadable thread leaves nothing known (the old behaviour)",
			build: func(t *testing.T, p *fakeProc) ([]uint64, string) {
				p.thread(t, "20", "20", 200, unix.EACCES)
				return nil, "permission denied"
			},
			rereads: 0,
		},
		{
			name: "PID 1 unreadable is passed over",
			build: func(t *testing.T, p *fakeProc) ([]uint64, string) {
				p.thread(t, "1", "1", 1, unix.EACCES, unix.EACCES, unix.EACCES, unix.EACCES, unix.EACCES)
				p.thread(t, "10", "10", 100)
				return []uint64{100}, ""
			},
			rereads: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProc(t)
			want, wantErr := tc.build(t, p)
			got, err := threadsNetns(context.Background(), p.root, p.stat, tc.rereads, 0)
			if wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Fatalf("err = %v, want one containing %q (and no namespace known: %v)", err, wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("in use %v, want %v", got, want)
			}
			for _, ino := range want {
				if !got[ino] {
					t.Errorf("in use %v, want %d in it", got, ino)
				}
			}
		})
	}
}
