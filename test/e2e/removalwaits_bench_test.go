//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Where containerd's RemovePodSandbox calls spend their time, from its
// goroutine profile, sampled while a variant of the reclaim benchmark runs.
// containerd keeps its metadata in one bbolt database, whose write
// transactions run one at a time: removals made in parallel queue for its
// writer lock, and that queue, not the caller, bounds how fast a node's
// pods can go. The profile is served on containerd's debug address: start
// the benchmark with LAB_DEBUG_ADDRESS set (a socket path, or
// 127.0.0.1:PORT), which lab.sh writes into [debug] address; make bench-lab
// does. Without it nothing is sampled.

// removalWaits counts, over the samples taken, the RemovePodSandbox calls
// found in containerd: waiting for bbolt's writer lock, committing a write
// transaction (writing and syncing the database, the lock held), or
// anywhere else (mount table reads, shim calls, CPU).
type removalWaits struct {
	samples, lockWait, committing, elsewhere int
}

func (w removalWaits) add(o removalWaits) removalWaits {
	return removalWaits{w.samples + o.samples, w.lockWait + o.lockWait, w.committing + o.committing, w.elsewhere + o.elsewhere}
}

func (w removalWaits) calls() int { return w.lockWait + w.committing + w.elsewhere }

// shares are the fractions of sampled calls waiting for the lock and
// committing; both 0 with no call sampled.
func (w removalWaits) shares() (lockWait, committing float64) {
	n := w.calls()
	if n == 0 {
		return 0, 0
	}
	return float64(w.lockWait) / float64(n), float64(w.committing) / float64(n)
}

// inFlight is the mean number of RemovePodSandbox calls in containerd per
// sample.
func (w removalWaits) inFlight() float64 {
	if w.samples == 0 {
		return 0
	}
	return float64(w.calls()) / float64(w.samples)
}

// writerBusy is the mean number of removals committing per sample: bbolt
// lets one write transaction commit at a time, so this is the share of the
// time the database's writer was kept busy by removals; near 1 it is the
// bound.
func (w removalWaits) writerBusy() float64 {
	if w.samples == 0 {
		return 0
	}
	return float64(w.committing) / float64(w.samples)
}

func (w removalWaits) String() string {
	if w.samples == 0 {
		return "not sampled (LAB_DEBUG_ADDRESS unset)"
	}
	lock, commit := w.shares()
	return fmt.Sprintf("%d samples, %.1f removals in containerd per sample: %.0f%% waiting for bbolt's writer lock, %.0f%% committing, %.0f%% elsewhere; the writer busy with removals %.0f%% of the time",
		w.samples, w.inFlight(), 100*lock, 100*commit, 100*(1-lock-commit), 100*w.writerBusy())
}

// sampleRemovalWaits samples containerd's goroutines every 100 ms until the
// returned stop is called, and returns what stop saw. A failed sample fails
// the benchmark: a figure from fewer samples than it says would mislead.
func sampleRemovalWaits(b *testing.B) (stop func() removalWaits) {
	addr := os.Getenv("LAB_DEBUG_ADDRESS")
	if addr == "" {
		return func() removalWaits { return removalWaits{} }
	}
	client, url := debugClient(addr)
	ctx, cancel := context.WithCancel(context.Background())
	var w removalWaits
	var sampleErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			profile, err := goroutineProfile(ctx, client, url)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				sampleErr = err
				return
			}
			lock, commit, elsewhere := classifyRemovals(profile)
			w.samples++
			w.lockWait += lock
			w.committing += commit
			w.elsewhere += elsewhere
		}
	})
	return func() removalWaits {
		cancel()
		wg.Wait()
		if sampleErr != nil {
			b.Fatalf("containerd's goroutine profile on %s: %v", addr, sampleErr)
		}
		return w
	}
}

// debugClient reaches containerd's debug server: over a unix socket when
// the address is an absolute path (as containerd listens, v2.4.2
// plugins/server/internal IsLocalAddress), else over TCP.
func debugClient(addr string) (*http.Client, string) {
	if !filepath.IsAbs(addr) {
		return http.DefaultClient, "http://" + addr + "/debug/pprof/goroutine?debug=1"
	}
	path := addr
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}, "http://containerd/debug/pprof/goroutine?debug=1"
}

func goroutineProfile(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return string(data), nil
}

// classifyRemovals reads a goroutine profile in pprof's debug=1 text form
// (a "goroutine profile: total N" line, then records of identical stacks:
// "N @ pc…" and one "#" line per frame, separated by blank lines) and
// counts the goroutines inside containerd's CRI RemovePodSandbox by where
// they are.
func classifyRemovals(profile string) (lockWait, committing, elsewhere int) {
	count := func(record []string) {
		if len(record) == 0 {
			return
		}
		frames := strings.Join(record[1:], "\n")
		if !strings.Contains(frames, "criService).RemovePodSandbox") {
			return
		}
		head, _, _ := strings.Cut(record[0], " @ ")
		n, err := strconv.Atoi(head)
		if err != nil {
			return
		}
		switch {
		case strings.Contains(frames, "bbolt.(*DB).beginRWTx"):
			lockWait += n
		case strings.Contains(frames, "bbolt.(*Tx).Commit"):
			committing += n
		default:
			elsewhere += n
		}
	}
	var record []string
	for line := range strings.Lines(profile) {
		line = strings.TrimRight(line, "\n")
		if head, _, ok := strings.Cut(line, " @ "); ok && !strings.HasPrefix(line, "#") {
			if _, err := strconv.Atoi(head); err == nil {
				count(record)
				record = []string{line}
				continue
			}
		}
		if record != nil && strings.HasPrefix(line, "#") {
			record = append(record, line)
		}
	}
	count(record)
	return lockWait, committing, elsewhere
}

// A record of the debug=1 form, trimmed: the counts and frames that
// classifyRemovals reads are as containerd 2.4.2 serves them.
const removalProfile = `goroutine profile: total 9
3 @ 0x490cee 0x46de12
#	0xcacfff	go.etcd.io/bbolt.(*DB).beginRWTx+0x3f	/root/go/pkg/mod/go.etcd.io/bbolt@v1.5.0/db.go:847
#	0xd533e4	github.com/containerd/containerd/v2/core/metadata.(*sandboxStore).Delete+0x264	sandbox.go:269
#	0x1452596	github.com/containerd/containerd/v2/internal/cri/server.(*criService).RemovePodSandbox+0x1016	sandbox_remove.go:139

1 @ 0x48e4c5 0x48e0c5
#	0xcb6bbc	go.etcd.io/bbolt.(*Tx).write+0x45c	tx.go:588
#	0xcb4a49	go.etcd.io/bbolt.(*Tx).Commit+0x4e9	tx.go:244
#	0x14522a4	github.com/containerd/containerd/v2/internal/cri/server.(*criService).RemovePodSandbox+0xd24	sandbox_remove.go:99

2 @ 0x4b7365 0x4b4aa5
#	0x51163c	syscall.Read+0x21c	syscall_unix.go:183
#	0x14239f6	github.com/containerd/containerd/v2/internal/cri/server.(*criService).RemovePodSandbox+0x752	sandbox_remove.go:60

2 @ 0x46e0dd 0x46e0d1
#	0xcad4e9	go.etcd.io/bbolt.(*DB).Update+0xc9	db.go:929
#	0xd3a178	github.com/containerd/containerd/v2/core/metadata.(*DB).GarbageCollect+0x4f8	db.go:486

1 @ 0x490cee
#	0xcacfff	go.etcd.io/bbolt.(*DB).beginRWTx+0x3f	db.go:847
#	0x11dcaed	github.com/containerd/containerd/v2/internal/cri/server.(*criService).StopPodSandbox+0x1bd	sandbox_stop.go:40
`

func TestClassifyRemovalsCountsOnlyRemovalsByWhereTheyWait(t *testing.T) {
	lock, commit, elsewhere := classifyRemovals(removalProfile)
	if lock != 3 || commit != 1 || elsewhere != 2 {
		t.Errorf("classifyRemovals = lock %d, commit %d, elsewhere %d; want 3, 1, 2 (the GC and StopPodSandbox are not removals)",
			lock, commit, elsewhere)
	}
	w := removalWaits{samples: 2, lockWait: lock, committing: commit, elsewhere: elsewhere}
	if got := w.inFlight(); got != 3 {
		t.Errorf("inFlight = %v, want 3 (6 calls over 2 samples)", got)
	}
	if l, c := w.shares(); l != 0.5 || c != 1.0/6 {
		t.Errorf("shares = %v, %v; want 0.5, 1/6", l, c)
	}
	if got := w.writerBusy(); got != 0.5 {
		t.Errorf("writerBusy = %v, want 0.5 (1 committing over 2 samples)", got)
	}
}
