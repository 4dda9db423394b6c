//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

const leakedSandboxes = 100

// leak100 leaves 100 stopped, never removed sandboxes of deleted pods.
func leak100(b *testing.B) []string {
	b.Helper()
	ctx := context.Background()
	var ids []string
	for i := range leakedSandboxes {
		p := lab.Pod{Name: fmt.Sprintf("leak-%03d", i), Namespace: "bench", UID: lab.NewUID()}
		id, err := node.RunPod(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := node.StopPod(ctx, id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// BenchmarkReclaim100LeakedSandboxes compares a plain serial
// StopPodSandbox+RemovePodSandbox loop with one housekeeping pass (listing,
// plan, execution with max_parallel = 4) on the same containerd.
func BenchmarkReclaim100LeakedSandboxes(b *testing.B) {
	b.Run("serial-loop", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			b.StopTimer()
			ids := leak100(b)
			b.StartTimer()
			for _, id := range ids {
				if err := node.StopPod(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := node.RemovePod(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/100-sandboxes")
	})
	b.Run("housekeeping-pass", func(b *testing.B) {
		ctx := context.Background()
		kubeletRoot := b.TempDir()
		if err := os.MkdirAll(kubeletRoot+"/pods", 0o755); err != nil {
			b.Fatal(err)
		}
		client, err := cri.Dial("unix://"+node.CRISocket, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		counting := &inFlight{Client: client}
		podLogs, err := nodefs.NewRemover(node.LogRoot)
		if err != nil {
			b.Fatal(err)
		}
		files := executor.Node{PodLogs: podLogs, Links: podLogs, KubeletRoot: kubeletRoot}
		log := logrus.New()
		log.SetOutput(io.Discard)
		opts := housekeeping.Options{Period: time.Hour, KubeletRoot: kubeletRoot,
			Policy:   gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, PodLogsDir: node.LogRoot, ContainerLogsDir: b.TempDir()},
			Executor: executor.New(counting, files, executor.Options{MaxParallel: 4}, log)}
		for b.Loop() {
			b.StopTimer()
			leak100(b)
			loop := housekeeping.New(podstate.New(0), client, opts, log)
			b.StartTimer()
			r := loop.Pass(ctx)
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			removed := 0
			for _, o := range r.Outcomes {
				if o.Action.Kind == gc.RemoveSandbox && o.Result == executor.Success {
					removed++
				}
			}
			if removed != leakedSandboxes {
				b.Fatalf("removed %d sandboxes, want %d", removed, leakedSandboxes)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/100-sandboxes")
		b.ReportMetric(float64(counting.max.Load()), "max-in-flight")
		if counting.max.Load() > 4 {
			b.Fatalf("%d CRI calls in flight, max_parallel is 4", counting.max.Load())
		}
	})
}

// inFlight counts concurrent sandbox calls.
type inFlight struct {
	*cri.Client
	now, max atomic.Int64
}

func (c *inFlight) track() func() {
	n := c.now.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { c.now.Add(-1) }
}

func (c *inFlight) StopPodSandbox(ctx context.Context, id string) error {
	defer c.track()()
	return c.Client.StopPodSandbox(ctx, id)
}

func (c *inFlight) RemovePodSandbox(ctx context.Context, id string) error {
	defer c.track()()
	return c.Client.RemovePodSandbox(ctx, id)
}
