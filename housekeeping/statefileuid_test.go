package housekeeping

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/statefile"
)

// TestTheStateFileTheLoopWritesIsOneItCanRead: whatever pods the loop
// saw torn down, the file it writes is one statefile.Load accepts. kubelet
// keeps a static pod's metadata.uid when its manifest sets one (it makes an
// md5 UID only when none is set), and makes <kubelet_root>/pods/<that uid>;
// the oracle counts every dir "parsed or not", so the pod's mark is kept
// and written. Decode then refuses the file the plugin itself wrote: the
// next start calls it unreadable, moves it aside, forgets every pod seen
// torn down and holds every budgeted step for an hour.
func TestTheStateFileTheLoopWritesIsOneItCanRead(t *testing.T) {
	for _, uid := range []string{
		testUID(7),                         // an API server's UUID: the control
		"etcd-static",                      // a static pod's metadata.uid, as its manifest set it
		"ABCDEF0123456789ABCDEF0123456789", // upper-case, as a manifest may set it
	} {
		t.Run(uid, func(t *testing.T) {
			root := podDirs(t, uid)
			path := filepath.Join(t.TempDir(), "state.json")
			opts := Options{Period: time.Minute, KubeletRoot: root, Synchronized: func() bool { return true }, StateFile: path,
				Policy: gc.Policy{LeakGrace: 5 * time.Minute, MaxPerPodContainer: 1, MaxContainers: -1,
					PodLogsDir: t.TempDir(), ContainerLogsDir: t.TempDir(),
					Budget: gc.Budget{MaxPerPass: 10, MaxFraction: 1, MinPerPass: 10, MaxPerHour: 100}}}
			rt := &fakeRuntime{}
			log, _ := testLogger()
			loop := New(tornDownState(t, uid), rt, opts, log)
			loop.started = now.Add(-time.Hour)
			loop.now = func() time.Time { return now }
			loop.Restore(context.Background())
			rt.set(cri.Snapshot{TakenAt: now}, nil)
			loop.Pass(context.Background())
			if loop.tornDown[uid] == nil {
				t.Fatal("the pod was not seen torn down: the test proves nothing")
			}
			if err := loop.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := statefile.Load(context.Background(), path); err != nil {
				restarted, logs := restartedLoop(nil, opts, rt, now.Add(time.Minute))
				t.Cleanup(func() { _ = restarted.Close() })
				var said []string
				for _, l := range strings.Split(logs(), "\n") {
					if strings.Contains(l, "cannot read") {
						said = append(said, l)
					}
				}
				t.Fatalf("the plugin wrote a state file it cannot read: %v; the restart holds every budgeted step: %q", err, said)
			}
		})
	}
}
