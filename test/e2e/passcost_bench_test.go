//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// The cost of the plugin on a busy node, on the real lab (issue: "a pass
// costs what the listing costs"). Benchmarks, not tests: each takes minutes.
//
//	go test -tags e2e -run '^$' -bench 'Lab' -benchtime 1x -timeout 90m ./test/e2e/
//
// NRIHK_BENCH_PODS (300) live pods, each a sandbox with one running
// container, a third of them on the lab's pod network, are made once and
// shared; 0 runs them on an empty node. The passes run with the network
// side on, as by default.

func benchPods() int {
	if n, err := strconv.Atoi(os.Getenv("NRIHK_BENCH_PODS")); err == nil && n >= 0 {
		return n
	}
	return 300
}

// busyNode is the lab with its live pods and the kubelet stand-in that
// admitted them.
var busyNode struct {
	once sync.Once
	k    *kubelet
	err  error
	dir  string // removed by TestMain once the lab is down
}

func liveBusyNode(b *testing.B) *kubelet {
	busyNode.once.Do(func() {
		// The kubelet root outlives this benchmark: later ones share it.
		dir, err := os.MkdirTemp("", "nrihk-busy-")
		if err != nil {
			busyNode.err = err
			return
		}
		busyNode.dir = dir
		k := &kubelet{root: filepath.Join(dir, "kubelet"), linksDir: filepath.Join(dir, "containers"), lab: node}
		for _, d := range []string{filepath.Join(k.root, "pods"), k.linksDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				busyNode.err = err
				return
			}
		}
		start := time.Now()
		busyNode.err = makePods(context.Background(), k, "live", benchPods(), func(lab.Pod, string, string) error { return nil })
		busyNode.k = k
		b.Logf("%d live pods made in %v", benchPods(), time.Since(start).Round(time.Second))
	})
	if busyNode.err != nil {
		b.Fatal(busyNode.err)
	}
	return busyNode.k
}

// makePods runs n pods (sandbox + one running container, pod dir admitted)
// four at a time; then calls each with the pod, its sandbox and container.
func makePods(ctx context.Context, k *kubelet, prefix string, n int, then func(p lab.Pod, sandbox, container string) error) error {
	sem := make(chan struct{}, 4)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := lab.Pod{Name: fmt.Sprintf("%s-%04d", prefix, i), Namespace: "bench", UID: lab.NewUID()}
			if prefix == "live" && i%3 == 0 {
				// A third of the live pods on the pod network, as most
				// pods of a real node are (hostNetwork: the rest; the
				// lab's /24 holds 253): an attachment, a reservation and
				// a netns each, which every pass lists.
				p.Network = &lab.PodNetwork{}
			}
			if err := os.MkdirAll(filepath.Join(k.podDir(p), "volumes"), 0o755); err != nil {
				errs <- err
				return
			}
			sb, err := node.RunPod(ctx, p)
			if err != nil {
				errs <- fmt.Errorf("pod %s: %w", p.Name, err)
				return
			}
			c, err := node.RunContainer(ctx, p, sb, "app", 0)
			if err != nil {
				errs <- fmt.Errorf("pod %s: %w", p.Name, err)
				return
			}
			if err := then(p, sb, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchParallel is max_parallel: NRIHK_BENCH_PARALLEL, else the default 4.
func benchParallel() int {
	if n, err := strconv.Atoi(os.Getenv("NRIHK_BENCH_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return 4
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLoop is the loop the plugin runs (cgroups enabled, as by default),
// in this process, against the lab.
func benchLoop(b *testing.B, k *kubelet, client *cri.Client, grace time.Duration, cgroups bool) *housekeeping.Loop {
	podLogs, err := nodefs.NewRemover(node.LogRoot)
	if err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	files := executor.Node{PodLogs: podLogs, Links: podLogs, KubeletRoot: k.root}
	var cgroupOpts *podcgroups.Options
	if cgroups {
		cgroupOpts = &podcgroups.Options{Mountpoint: cgroupMount, Root: cgroupRoot(), Driver: "cgroupfs"}
	}
	return housekeeping.New(podstate.New(0), client, housekeeping.Options{
		Period: time.Hour, KubeletRoot: k.root, Cgroups: cgroupOpts,
		Policy: gc.Policy{MaxPerPodContainer: 1, MaxContainers: -1, LeakGrace: grace, StopTimeout: time.Second,
			// The budget out of the way (it is not what is measured): every
			// leak due is taken, whatever the node's Ready count.
			Budget:     gc.Budget{MaxPerPass: 1000, MaxFraction: 1, MinPerPass: 1000, MaxPerHour: 100000},
			PodLogsDir: node.LogRoot, ContainerLogsDir: k.linksDir},
		Executor: executor.New(client, files, executor.Options{MaxParallel: benchParallel()}, log),
		Network: housekeeping.NewNetwork(client, housekeeping.NetworkOptions{CacheDir: lab.CNICacheDir,
			ConfDir: "/nonexistent/net.d", BinDir: "/nonexistent/bin"}),
	}, log)
}

// BenchmarkLabPassBesideTheListing times, in one run and interleaved, the
// bare CRI listing (ListPodSandbox + ListContainers) and a whole pass of the
// plugin on the same node; with 30 leaked pod cgroups (no sandbox, a
// process inside) too, which the pass must find, every one.
func BenchmarkLabPassBesideTheListing(b *testing.B) {
	for _, leaked := range []int{0, 30} {
		b.Run(fmt.Sprintf("leaked-cgroups=%d", leaked), func(b *testing.B) {
			k := liveBusyNode(b)
			for range leaked {
				fakeOrphanCgroup(b, lab.NewUID())
			}
			client, err := cri.Dial("unix://"+node.CRISocket, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			loop := benchLoop(b, k, client, time.Hour, true)
			ctx := context.Background()
			loop.Pass(ctx) // podstate learns the node
			const rounds = 60
			var listings, passes []time.Duration
			var cpu time.Duration
			for b.Loop() {
				for range rounds {
					start := time.Now()
					if _, err := client.Snapshot(ctx); err != nil {
						b.Fatal(err)
					}
					listings = append(listings, time.Since(start))
					before := selfCPU()
					r := loop.Pass(ctx)
					cpu += selfCPU() - before
					if r.Err != nil || r.Blocked != "" && !strings.Contains(r.Blocked, "startup") {
						b.Fatalf("pass: %v %s", r.Err, r.Blocked)
					}
					passes = append(passes, r.Duration)
					if got := r.Plan.Leaks[gc.LeakPodCgroup]; got != leaked {
						b.Fatalf("the pass found %d leaked pod cgroups, want %d", got, leaked)
					}
				}
			}
			b.ReportMetric(ms(median(listings)), "listing-ms")
			b.ReportMetric(ms(median(passes)), "pass-ms")
			b.ReportMetric(float64(median(passes))/float64(median(listings)), "pass/listing")
			b.ReportMetric(ms(cpu)/float64(len(passes)), "cpu-ms/pass")
			b.Logf("%d pods: listing median %v (min %v max %v), pass median %v (min %v max %v), %d rounds",
				benchPods(), median(listings), slices.Min(listings), slices.Max(listings),
				median(passes), slices.Min(passes), slices.Max(passes), len(passes))
		})
	}
}

// procCPU is the CPU time a process has used (utime + stime).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ 100
}

// startPluginBinary runs the plugin binary (external mode) against the lab
// with cgroups enabled and period; it returns the process, a stop, and the
// number of passes it has logged so far (at info: those that changed
// something, such as the first, which learns the node).
func startPluginBinary(b *testing.B, k *kubelet, period time.Duration, name string) (cmd *exec.Cmd, stop func(), passes func() int) {
	dir := b.TempDir()
	exe := filepath.Join(dir, "nri-housekeeper")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/nri-housekeeper/nri-housekeeper/cmd/nri-housekeeper").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	logFile := filepath.Join(dir, "plugin.log")
	conf := filepath.Join(dir, "config.toml")
	addr := freePort(b)
	// The defaults otherwise: startup_delay 0 aside, as a node runs it.
	text := binaryConfig{Period: period.String(), Grace: "5m", LogFile: logFile, PluginName: name, MetricsAddr: addr,
		Tables: fmt.Sprintf("\n[cgroups]\nenabled = true\nroot = %q\n", cgroupRoot())}.text(k)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd = exec.Command(exe, "run", "--config", conf)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// Passes finished, whatever their result, as its metrics count them
	// (an idle pass logs nothing at the default level); 0 until the
	// metrics are served.
	passes = func() int {
		code, body := get("http://" + addr + "/metrics")
		if code != http.StatusOK {
			return 0
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			b.Fatalf("/metrics does not parse: %v", err)
		}
		n := 0.0
		for _, m := range families["nri_housekeeper_passes_total"].GetMetric() {
			n += m.GetCounter().GetValue()
		}
		return int(n)
	}
	// A plugin that exited (a bad config) would read as one costing
	// nothing: stop fails unless it ran to the end and passed.
	stop = func() {
		alive := !zombie(cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logs, _ := os.ReadFile(logFile)
		if !alive || !strings.Contains(string(logs), "housekeeping pass") {
			b.Fatalf("the plugin did not run its passes to the end (alive: %v); its log:\n%s", alive, logs)
		}
	}
	return cmd, stop, passes
}

// BenchmarkLabIdleCPU runs the plugin binary on the busy node with nothing
// to do and reads its CPU time: at the default period over
// NRIHK_BENCH_IDLE (5m), at a 2 s period over a fifth of that.
func BenchmarkLabIdleCPU(b *testing.B) {
	window := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("NRIHK_BENCH_IDLE")); err == nil {
		window = d
	}
	for _, tc := range []struct {
		period time.Duration
		window time.Duration
	}{{30 * time.Second, window}, {2 * time.Second, window / 5}} {
		b.Run("period="+tc.period.String(), func(b *testing.B) {
			k := liveBusyNode(b)
			for b.Loop() {
				cmd, stop, passes := startPluginBinary(b, k, tc.period, "idle-bench")
				// Connected, synchronized, its first pass done: what is
				// measured is the plugin idling, not starting.
				took := waitFor(b, "the plugin's first pass", 2*time.Minute, func() bool { return passes() > 0 })
				b.Logf("first pass logged %v after the start", took.Round(time.Millisecond))
				time.Sleep(time.Second)
				before, passesBefore := procCPU(b, cmd.Process.Pid), passes()
				time.Sleep(tc.window)
				used, ran := procCPU(b, cmd.Process.Pid)-before, passes()-passesBefore
				stop()
				// Idle, not wedged: it kept passing over the window (a
				// plugin stuck would post a lower figure).
				if want := int(tc.window/tc.period) * 3 / 4; ran < want { // a pass's own time delays the next
					b.Fatalf("%d passes over %v at a %v period, want at least %d", ran, tc.window, tc.period, want)
				}
				b.ReportMetric(100*float64(used)/float64(tc.window), "%-of-a-core")
				b.Logf("period %v: %v CPU over %v", tc.period, used, tc.window)
			}
		})
	}
}

// podLifecycle runs one pod the way kubelet does and removes it again:
// RunPodSandbox, CreateContainer, StartContainer, StopContainer,
// StopPodSandbox, RemovePodSandbox, and the pod cgroup removed (containerd
// leaves it to kubelet: left, every pod of a round would be a leak the
// next rounds look into).
func podLifecycle(ctx context.Context, hierarchies []string, i int) error {
	p := lab.Pod{Name: fmt.Sprintf("churn-%04d", i), Namespace: "bench", UID: lab.NewUID()}
	sb, err := node.RunPod(ctx, p)
	if err != nil {
		return err
	}
	c, err := node.RunContainer(ctx, p, sb, "app", 0)
	if err != nil {
		return err
	}
	if err := node.StopContainer(ctx, c, 1); err != nil {
		return err
	}
	if err := node.StopPod(ctx, sb); err != nil {
		return err
	}
	if err := node.RemovePod(ctx, sb); err != nil {
		return err
	}
	for _, h := range hierarchies {
		if err := syscall.Rmdir(filepath.Join(h, node.PodCgroupParent(p))); err != nil && err != syscall.ENOENT {
			return fmt.Errorf("removing the pod cgroup of %s: %w", p.Name, err)
		}
	}
	return nil
}

// BenchmarkLabChurnLatency times pod lifecycles on the busy node with the
// plugin running (default period) and without, in interleaved rounds of
// 100 (off-on, on-off, ...), and reads the plugin's CPU during its rounds.
func BenchmarkLabChurnLatency(b *testing.B) {
	const perRound, rounds = 100, 4
	k := liveBusyNode(b)
	ctx := context.Background()
	cgroupHierarchies := hierarchies(b)
	var on, off []time.Duration
	var pluginCPU, pluginTime time.Duration
	round := func(i int) time.Duration {
		start := time.Now()
		for j := range perRound {
			if err := podLifecycle(ctx, cgroupHierarchies, i*perRound+j); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / perRound
	}
	withPlugin := func(i int) time.Duration {
		cmd, stop, _ := startPluginBinary(b, k, 30*time.Second, "churn-bench")
		defer stop()
		time.Sleep(3 * time.Second)
		before, start := procCPU(b, cmd.Process.Pid), time.Now()
		d := round(i)
		pluginCPU += procCPU(b, cmd.Process.Pid) - before
		pluginTime += time.Since(start)
		return d
	}
	for b.Loop() {
		// off, on, on, off, ...: a node that drifts over the run (it
		// gets slower or faster) weighs on both alike.
		for r := range rounds {
			if r%2 == 0 {
				off = append(off, round(2*r))
				on = append(on, withPlugin(2*r+1))
			} else {
				on = append(on, withPlugin(2*r))
				off = append(off, round(2*r+1))
			}
		}
	}
	b.ReportMetric(ms(median(off)), "off-ms/pod")
	b.ReportMetric(ms(median(on)), "on-ms/pod")
	b.ReportMetric(float64(median(on))/float64(median(off)), "on/off")
	b.ReportMetric(100*float64(pluginCPU)/float64(pluginTime), "plugin-%-of-a-core")
	b.Logf("per-pod lifecycle, plugin off: %v; on: %v", off, on)
}

// BenchmarkLabReclaimLeakedPods: NRIHK_BENCH_LEAKED (300) leaked pods (a
// NotReady sandbox and an exited container each, the pod gone from
// kubelet), on the busy node of NRIHK_BENCH_PODS live ones, reclaimed by a plain serial StopPodSandbox+RemovePodSandbox loop
// and by one housekeeping pass, in the same run, round after round. A third
// variant is containerd's own ceiling for the pass: the same
// RemovePodSandbox calls, as many in flight as the pass makes, with nothing
// else (no listing, no plan, no log dirs): how fast this containerd removes
// these pods at all. Each variant's CPU (containerd's, the machine's) is
// reported next to what the node burns idle, to show the cores a remover
// has left; with LAB_DEBUG_ADDRESS (make bench-lab), so is where
// containerd's RemovePodSandbox calls were (removalWaits): queued for its
// metadata database's single writer, or not. With LAB_STATS_COLLECT_PERIOD
// (lab.sh), containerd's CPU stats collector runs at that period, to show
// what the cores it takes idle change.
func BenchmarkLabReclaimLeakedPods(b *testing.B) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("NRIHK_BENCH_LEAKED")); err == nil && v > 0 {
		n = v
	}
	// Beside the busy node's live pods (made once, shared with the other
	// benchmarks): the oracle must see their pod dirs, or it would take
	// them for gone and trust no pod-gone rule.
	k := liveBusyNode(b)
	ctx := context.Background()
	// leak makes the leaked pods; the loops leave their pod log dirs
	// (containerd never removes them), which forget removes, untimed, so
	// that each pass reclaims its own pods only.
	var logDirs []string
	leak := func() []string {
		var mu sync.Mutex
		var sandboxes []string
		err := makePods(ctx, k, "leak", n, func(p lab.Pod, sb, c string) error {
			if err := node.StopContainer(ctx, c, 1); err != nil {
				return err
			}
			if err := node.StopPod(ctx, sb); err != nil {
				return err
			}
			mu.Lock()
			sandboxes = append(sandboxes, sb)
			logDirs = append(logDirs, node.PodLogDir(p))
			mu.Unlock()
			return os.RemoveAll(k.podDir(p))
		})
		if err != nil {
			b.Fatal(err)
		}
		return sandboxes
	}
	forget := func() {
		for _, d := range logDirs {
			if err := os.RemoveAll(d); err != nil {
				b.Fatal(err)
			}
		}
		logDirs = nil
	}
	client, err := cri.Dial("unix://"+node.CRISocket, 30*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	var serial, pass, ceiling []time.Duration
	var idleCPU, serialCPU, passCPU, ceilingCPU []cpuUse
	var serialWaits, passWaits, ceilingWaits removalWaits
	for b.Loop() {
		for range 3 {
			ids := leak()
			// What the node burns doing nothing, the leaked pods in place:
			// containerd's stats collector asks every shim for its task's
			// metrics every second (stats_collect_period, 1s by default).
			cpu := startCPU(b)
			time.Sleep(10 * time.Second)
			idleCPU = append(idleCPU, cpu.stop(b))
			start := time.Now()
			cpu, waits := startCPU(b), sampleRemovalWaits(b)
			for _, id := range ids {
				if err := node.StopPod(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := node.RemovePod(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
			serial = append(serial, time.Since(start))
			serialCPU = append(serialCPU, cpu.stop(b))
			serialWaits = serialWaits.add(waits())
			forget()

			leak()
			// No grace: the first pass finds every leak due. Pod cgroups
			// are left alone, as by the loop: containerd leaves them (kubelet
			// removes them), and the pass would reclaim the loop's too.
			loop := benchLoop(b, k, client, 0, false)
			cpu, waits = startCPU(b), sampleRemovalWaits(b)
			r := loop.Pass(ctx)
			passCPU = append(passCPU, cpu.stop(b))
			passWaits = passWaits.add(waits())
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			removed, logDirsRemoved := 0, 0
			byKind := map[gc.Kind][2]time.Duration{} // count, summed call time
			for _, o := range r.Outcomes {
				if o.Action.Kind == gc.RemoveSandbox && o.Result == executor.Success {
					removed++
				}
				if o.Action.Kind == gc.RemovePodLogDir && o.Result == executor.Success {
					logDirsRemoved++
				}
				k := byKind[o.Action.Kind]
				byKind[o.Action.Kind] = [2]time.Duration{k[0] + 1, k[1] + o.Took}
			}
			b.Logf("pass %v: listing taken %v after its start; outcomes by kind (count, summed time): %v",
				r.Duration, r.Snapshot.TakenAt.Sub(r.Started), byKind)
			if removed != n || logDirsRemoved != n {
				b.Fatalf("the pass removed %d sandboxes and %d pod log dirs, want %d each: leaks %v, blocked %q, oracle untrusted %q",
					removed, logDirsRemoved, n, r.Plan.Leaks, r.Blocked, r.Plan.OracleUntrusted)
			}
			pass = append(pass, r.Duration)
			logDirs = nil // the pass removed them

			ids = leak()
			start, cpu, waits = time.Now(), startCPU(b), sampleRemovalWaits(b)
			if err := removeInParallel(ctx, ids, benchParallel()); err != nil {
				b.Fatal(err)
			}
			ceiling = append(ceiling, time.Since(start))
			ceilingCPU = append(ceilingCPU, cpu.stop(b))
			ceilingWaits = ceilingWaits.add(waits())
			forget()
		}
	}
	// How busy each variant kept containerd and the machine, next to what
	// the node burns idle: a remover has only the cores left over.
	for _, v := range []struct {
		name string
		use  []cpuUse
	}{{"idle", idleCPU}, {"serial", serialCPU}, {"pass", passCPU}, {"bare", ceilingCPU}} {
		containerd, machine := medianCores(v.use)
		b.ReportMetric(containerd, v.name+"-containerd-cores")
		b.ReportMetric(machine, v.name+"-machine-cores")
		b.Logf("%s: containerd %v, machine %.2f of %d cores (busy CPU time over wall time, per round)", v.name, v.use, machine, runtime.NumCPU())
	}
	// Where containerd's removals were, when sampled (LAB_DEBUG_ADDRESS):
	// the serial loop's one call queues only behind containerd's own GC, so
	// its lock share is the control for the others'.
	for _, v := range []struct {
		name  string
		waits removalWaits
	}{{"serial", serialWaits}, {"pass", passWaits}, {"bare", ceilingWaits}} {
		b.Logf("%s: %v", v.name, v.waits)
		if v.waits.samples == 0 {
			continue
		}
		lock, commit := v.waits.shares()
		b.ReportMetric(lock, v.name+"-bolt-lock-wait-share")
		b.ReportMetric(commit, v.name+"-bolt-commit-share")
		b.ReportMetric(v.waits.writerBusy(), v.name+"-bolt-writer-busy")
	}
	b.ReportMetric(ms(median(serial)), "serial-loop-ms")
	b.ReportMetric(ms(median(pass)), "one-pass-ms")
	b.ReportMetric(ms(median(ceiling)), "bare-parallel-remove-ms")
	b.ReportMetric(float64(median(serial))/float64(median(pass)), "speedup")
	b.ReportMetric(float64(median(serial))/float64(median(ceiling)), "bare-speedup")
	b.ReportMetric(float64(median(pass))/float64(median(ceiling)), "pass/bare")
	b.Logf("%d leaked pods: serial loop %v, one pass %v, bare RemovePodSandbox with %d in flight %v",
		n, serial, pass, benchParallel(), ceiling)
}

// cpuUse is the CPU time containerd and the whole machine (/proc/stat: all
// but idle and iowait) spent over a timed variant, and its wall time.
type cpuUse struct{ containerd, machine, wall time.Duration }

func (u cpuUse) String() string {
	return fmt.Sprintf("%.2f cores (%v CPU over %v)", float64(u.containerd)/float64(u.wall),
		u.containerd.Round(10*time.Millisecond), u.wall.Round(time.Millisecond))
}

// cpuClock is a started cpuUse.
type cpuClock struct {
	at                  time.Time
	containerd, machine time.Duration
}

func startCPU(b *testing.B) cpuClock {
	return cpuClock{at: time.Now(), containerd: procCPU(b, node.ContainerdPID()), machine: machineBusy(b)}
}

func (c cpuClock) stop(b *testing.B) cpuUse {
	return cpuUse{containerd: procCPU(b, node.ContainerdPID()) - c.containerd,
		machine: machineBusy(b) - c.machine, wall: time.Since(c.at)}
}

// medianCores is the median, over rounds, of the cores containerd and the
// machine kept busy.
func medianCores(use []cpuUse) (containerd, machine float64) {
	var c, m []float64
	for _, u := range use {
		c = append(c, float64(u.containerd)/float64(u.wall))
		m = append(m, float64(u.machine)/float64(u.wall))
	}
	slices.Sort(c)
	slices.Sort(m)
	return c[len(c)/2], m[len(m)/2]
}

// machineBusy is the CPU time all CPUs spent busy since boot: the first
// line of /proc/stat without idle and iowait.
func machineBusy(b *testing.B) time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		b.Fatalf("/proc/stat starts with %q, want the cpu line", line)
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("/proc/stat cpu field %d %q: %v", i+1, v, err)
		}
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond // USER_HZ 100
}

// removeInParallel removes the sandboxes with one RemovePodSandbox each
// (containerd 2 stops a sandbox on removal), inFlight at a time.
func removeInParallel(ctx context.Context, ids []string, inFlight int) error {
	sem := make(chan struct{}, inFlight)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := node.RemovePod(ctx, id); err != nil {
				errs <- fmt.Errorf("remove sandbox %s: %w", id, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
