package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

type countingWaker struct{ resyncs, wakes atomic.Int64 }

func (w *countingWaker) Resync() { w.resyncs.Add(1) }
func (w *countingWaker) Wake()   { w.wakes.Add(1) }

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func kubeletPod(uid, id string) *api.PodSandbox {
	return &api.PodSandbox{Id: id, Uid: uid, Name: "pod-" + uid, Namespace: "ns", Labels: map[string]string{
		podstate.LabelPodUID: uid, podstate.LabelPodName: "pod-" + uid, podstate.LabelPodNamespace: "ns",
	}}
}

func ctr(pod *api.PodSandbox, id string, state api.ContainerState) *api.Container {
	return &api.Container{Id: id, PodSandboxId: pod.Id, Name: "app", State: state}
}

func newTestPlugin() (*Plugin, *podstate.State, *countingWaker) {
	state := podstate.New(0)
	w := &countingWaker{}
	return New(state, w, quietLogger(), nil), state, w
}

func podPhase(t *testing.T, s *podstate.State, uid string) podstate.Phase {
	t.Helper()
	p, ok := s.Pod(uid)
	if !ok {
		t.Fatalf("pod %s not tracked", uid)
	}
	return p.Phase
}

func TestHandlersRecordOnlyKubeletPods(t *testing.T) {
	p, state, _ := newTestPlugin()
	ctx := context.Background()
	pod := kubeletPod("u1", "s1")
	foreign := &api.PodSandbox{Id: "s2", Name: "buildkit", Labels: map[string]string{"app": "x"}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("handler returned an error: %v", err)
		}
	}
	must(p.RunPodSandbox(ctx, pod))
	must(p.RunPodSandbox(ctx, foreign))
	must(p.PostCreateContainer(ctx, pod, ctr(pod, "c1", api.ContainerState_CONTAINER_CREATED)))
	must(p.PostStartContainer(ctx, pod, ctr(pod, "c1", api.ContainerState_CONTAINER_RUNNING)))
	must(p.PostStartContainer(ctx, foreign, ctr(foreign, "c2", api.ContainerState_CONTAINER_RUNNING)))
	if got := len(state.View().Pods); got != 1 {
		t.Fatalf("tracked pods = %d, want 1 (the kubelet one)", got)
	}
	if got := p.Stats().Unmanaged.Load(); got != 2 {
		t.Fatalf("unmanaged = %d, want 2", got)
	}
	_, err := p.StopContainer(ctx, pod, ctr(pod, "c1", api.ContainerState_CONTAINER_STOPPED))
	must(err)
	must(p.StopPodSandbox(ctx, pod))
	if ph := podPhase(t, state, "u1"); ph != podstate.PhaseTerminated {
		t.Fatalf("phase = %s, want Terminated", ph)
	}
	must(p.RemoveContainer(ctx, pod, ctr(pod, "c1", api.ContainerState_CONTAINER_STOPPED)))
	must(p.RemovePodSandbox(ctx, pod))
	if ph := podPhase(t, state, "u1"); ph != podstate.PhaseRemoved {
		t.Fatalf("phase = %s, want Removed", ph)
	}
	if got := p.Stats().Events[podstate.StartContainer].Load(); got != 2 {
		t.Fatalf("StartContainer events = %d, want 2", got)
	}
}

func TestHandlersNeverFailEvenOnUnrecordableEvents(t *testing.T) {
	p, _, _ := newTestPlugin()
	pod := kubeletPod("u1", "") // no sandbox ID: podstate rejects it
	if err := p.RunPodSandbox(context.Background(), pod); err != nil {
		t.Fatalf("RunPodSandbox returned %v; an error would fail the pod in containerd", err)
	}
	if got := p.Stats().Rejected.Load(); got != 1 {
		t.Fatalf("rejected = %d, want 1", got)
	}
}

func TestOnlyStopAndRemoveEventsWakeHousekeeping(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		call  func(p *Plugin, pod *api.PodSandbox)
		wakes int64
	}{
		{"RunPodSandbox", func(p *Plugin, pod *api.PodSandbox) { _ = p.RunPodSandbox(ctx, pod) }, 0},
		{"PostCreateContainer", func(p *Plugin, pod *api.PodSandbox) { _ = p.PostCreateContainer(ctx, pod, ctr(pod, "c", 0)) }, 0},
		{"PostStartContainer", func(p *Plugin, pod *api.PodSandbox) { _ = p.PostStartContainer(ctx, pod, ctr(pod, "c", 0)) }, 0},
		{"StopContainer", func(p *Plugin, pod *api.PodSandbox) { _, _ = p.StopContainer(ctx, pod, ctr(pod, "c", 0)) }, 1},
		{"RemoveContainer", func(p *Plugin, pod *api.PodSandbox) { _ = p.RemoveContainer(ctx, pod, ctr(pod, "c", 0)) }, 0},
		{"StopPodSandbox", func(p *Plugin, pod *api.PodSandbox) { _ = p.StopPodSandbox(ctx, pod) }, 1},
		{"RemovePodSandbox", func(p *Plugin, pod *api.PodSandbox) { _ = p.RemovePodSandbox(ctx, pod) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, w := newTestPlugin()
			tc.call(p, kubeletPod("u", "s"))
			if got := w.wakes.Load(); got != tc.wakes {
				t.Fatalf("wakes = %d, want %d", got, tc.wakes)
			}
		})
	}
}

func TestSynchronizeRecordsAndAsksForAListing(t *testing.T) {
	p, state, w := newTestPlugin()
	pod := kubeletPod("u1", "s1")
	foreign := &api.PodSandbox{Id: "s2"}
	_, err := p.Synchronize(context.Background(), []*api.PodSandbox{pod, foreign},
		[]*api.Container{ctr(pod, "c1", api.ContainerState_CONTAINER_RUNNING), ctr(foreign, "c2", api.ContainerState_CONTAINER_RUNNING)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Synchronized() || w.resyncs.Load() != 1 {
		t.Fatalf("synchronized = %v, resyncs = %d; want true, 1", p.Synchronized(), w.resyncs.Load())
	}
	v, _ := state.Pod("u1")
	if v.Phase != podstate.PhaseRunning || len(v.Containers) != 1 || v.Containers[0].State != podstate.ContainerRunning {
		t.Fatalf("pod = %+v", v)
	}
	if got := p.Stats().Unmanaged.Load(); got != 2 {
		t.Fatalf("unmanaged = %d, want 2", got)
	}
}

func TestConfigurePassesTheTextAndRejectsBadOnes(t *testing.T) {
	var got string
	p := New(podstate.New(0), &countingWaker{}, quietLogger(), func(text string) error {
		got = text
		if text == "bad" {
			return errors.New("line 1: bad")
		}
		return nil
	})
	c := p.newConnection()
	if _, err := c.Configure(context.Background(), "dry_run = true", "containerd", "2.4.2"); err != nil || got != "dry_run = true" {
		t.Fatalf("Configure = %v, text %q", err, got)
	}
	if !p.Connected() {
		t.Fatal("not connected after Configure")
	}
	c.lost()
	if _, err := p.newConnection().Configure(context.Background(), "bad", "containerd", "2.4.2"); err == nil {
		t.Fatal("a bad configuration was accepted")
	}
	if p.Connected() {
		t.Fatal("connected although the configuration was rejected")
	}
}

// connectedObserver keeps the last value of the NRI-connected gauge.
type connectedObserver struct{ connected atomic.Bool }

func (o *connectedObserver) ObserveNRIEvent(string)  {}
func (o *connectedObserver) ObserveNRIReconnect()    {}
func (o *connectedObserver) SetNRIConnected(ok bool) { o.connected.Store(ok) }

// TestOnlyTheCurrentConnectionsLossClearsItsState: nri's stub calls a lost
// connection's close callback from its own goroutine, after its Run has
// returned, so on a loaded node it can come after the plugin has connected
// again (after a backoff of 100 ms) and synchronized. That late call must
// leave the new connection as it is: marked lost, housekeeping would wait
// for a Synchronize that does not come again for as long as the connection
// lives, and the connected gauge would read 0.
func TestOnlyTheCurrentConnectionsLossClearsItsState(t *testing.T) {
	ctx := context.Background()
	p, _, _ := newTestPlugin()
	obs := &connectedObserver{}
	p.SetObserver(obs)
	state := func() string {
		return fmt.Sprintf("connected %v, synchronized %v, gauge %v", p.Connected(), p.Synchronized(), obs.connected.Load())
	}
	connect := func() *connection {
		t.Helper()
		c := p.newConnection()
		if _, err := c.Configure(ctx, "", "containerd", "2.4.2"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Synchronize(ctx, nil, nil); err != nil {
			t.Fatal(err)
		}
		return c
	}
	old := connect()
	old.lost() // its Run returned
	if got := state(); got != "connected false, synchronized false, gauge false" {
		t.Fatalf("after the connection's loss: %s", got)
	}
	current := connect()
	old.lost() // its stub's close callback, late
	if got := state(); got != "connected true, synchronized true, gauge true" {
		t.Fatalf("after an earlier connection's late close: %s; want the current connection untouched", got)
	}
	rejected := p.newConnection() // a connection whose Configure failed
	rejected.lost()
	if got := state(); got != "connected true, synchronized true, gauge true" {
		t.Fatalf("after a connection that never registered was lost: %s", got)
	}
	current.lost()
	if got := state(); got != "connected false, synchronized false, gauge false" {
		t.Fatalf("after the current connection's loss: %s", got)
	}
}

// fakeRuntime is the runtime side of NRI, in process: containerd/nri's own
// adaptation package, as containerd embeds it.
type fakeRuntime struct {
	*adaptation.Adaptation
	pods []*api.PodSandbox
	ctrs []*api.Container
}

func startRuntime(t *testing.T, socket string, pods []*api.PodSandbox, ctrs []*api.Container) *fakeRuntime {
	t.Helper()
	r := &fakeRuntime{pods: pods, ctrs: ctrs}
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, r.pods, r.ctrs)
		return err
	}
	update := func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil }
	a, err := adaptation.New("fake-containerd", "2.4.2", sync, update,
		adaptation.WithSocketPath(socket), adaptation.WithPluginPath(t.TempDir()), adaptation.WithPluginConfigPath(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	r.Adaptation = a
	return r
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func TestPluginFollowsARealNRIRuntimeAndReconnects(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	existing := kubeletPod("u0", "s0")
	rt := startRuntime(t, socket, []*api.PodSandbox{existing}, []*api.Container{ctr(existing, "c0", api.ContainerState_CONTAINER_RUNNING)})
	p, state, _ := newTestPlugin()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The in-process runtime's Stop does not close plugin connections the way
	// a dying containerd does, so the test keeps the connection to close it.
	var conn atomic.Pointer[net.Conn]
	dial := func(path string) (net.Conn, error) {
		c, err := net.Dial("unix", path)
		if err == nil {
			conn.Store(&c)
		}
		return c, err
	}
	go func() {
		done <- p.Run(ctx, ConnectOptions{SocketPath: socket, PluginName: "nri-housekeeper", PluginIndex: "10", Dial: dial})
	}()
	waitFor(t, "first synchronize", 5*time.Second, p.Synchronized)
	if ph := podPhase(t, state, "u0"); ph != podstate.PhaseRunning {
		t.Fatalf("synchronized pod phase = %s, want Running", ph)
	}
	// The runtime adds the plugin to its event fan-out just after the
	// Synchronize handler returns: probe until events arrive.
	probe := kubeletPod("probe", "s-probe")
	waitFor(t, "the runtime delivers events", 5*time.Second, func() bool {
		_ = rt.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: probe})
		_, ok := state.Pod("probe")
		return ok
	})

	pod := kubeletPod("u1", "s1")
	c := ctr(pod, "c1", api.ContainerState_CONTAINER_CREATED)
	steps := []struct {
		name string
		do   func() error
		want podstate.Phase
	}{
		{"RunPodSandbox", func() error { return rt.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}) }, podstate.PhaseRunning},
		{"PostCreateContainer", func() error {
			return rt.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: c})
		}, podstate.PhaseRunning},
		{"PostStartContainer", func() error {
			return rt.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: c})
		}, podstate.PhaseRunning},
		{"StopPodSandbox", func() error { return rt.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}) }, podstate.PhaseTerminating},
		{"StopContainer", func() error {
			_, err := rt.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: c})
			return err
		}, podstate.PhaseTerminated},
		{"RemoveContainer", func() error {
			return rt.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: c})
		}, podstate.PhaseTerminated},
		{"RemovePodSandbox", func() error { return rt.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod}) }, podstate.PhaseRemoved},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		// Delivery is synchronous: the handler ran before the call returned.
		if ph := podPhase(t, state, "u1"); ph != st.want {
			t.Fatalf("after %s: phase = %s, want %s", st.name, ph, st.want)
		}
	}

	// The runtime goes away and comes back with a new pod: the plugin
	// reconnects by itself and resynchronizes.
	rt.Stop()
	_ = (*conn.Load()).Close()
	waitFor(t, "disconnect noticed", 5*time.Second, func() bool { return !p.Connected() })
	newPod := kubeletPod("u2", "s2")
	rt = startRuntime(t, socket, []*api.PodSandbox{existing, newPod}, nil)
	defer rt.Stop()
	took := waitFor(t, "reconnect", 2*time.Second, func() bool { return p.Synchronized() && p.Connected() })
	t.Logf("reconnected and resynchronized %v after the runtime came back", took)
	if ph := podPhase(t, state, "u2"); ph != podstate.PhaseRunning {
		t.Fatalf("pod created while disconnected: phase = %s, want Running", ph)
	}
	if got := p.Stats().Registrations.Load(); got != 2 {
		t.Fatalf("registrations = %d, want 2", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after cancel, want nil", err)
	}
}

func TestExternalModeKeepsRetryingUntilTheRuntimeAppears(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	p, _, _ := newTestPlugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = p.Run(ctx, ConnectOptions{SocketPath: socket, PluginName: "nri-housekeeper", PluginIndex: "10"})
	}()
	time.Sleep(1500 * time.Millisecond) // several failed attempts, backoff at its cap
	rt := startRuntime(t, socket, nil, nil)
	defer rt.Stop()
	took := waitFor(t, "connect", 2*time.Second, p.Synchronized)
	t.Logf("connected %v after the runtime appeared", took)
}

func TestPreRegisteredModeNeedsItsFd(t *testing.T) {
	t.Setenv(api.PluginSocketEnvVar, "not-a-number")
	t.Setenv(api.PluginNameEnvVar, "nri-housekeeper")
	t.Setenv(api.PluginIdxEnvVar, "10")
	p, _, _ := newTestPlugin()
	err := p.Run(context.Background(), ConnectOptions{})
	if err == nil {
		t.Fatal("pre-registered Run with a bad fd returned nil")
	}
	t.Log(err)
}

func BenchmarkHandlers10kPods(b *testing.B) {
	state := podstate.New(0)
	p := New(state, &countingWaker{}, quietLogger(), nil)
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i := range 10000 {
		pod := kubeletPod(fmt.Sprintf("uid-%05d", i), fmt.Sprintf("sandbox-%05d", i))
		pods = append(pods, pod)
		for j := range 3 {
			ctrs = append(ctrs, ctr(pod, fmt.Sprintf("ctr-%05d-%d", i, j), api.ContainerState_CONTAINER_RUNNING))
		}
	}
	if _, err := p.Synchronize(context.Background(), pods, ctrs); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	// One iteration is a pod's whole life: 1 + 3*4 + 2 = 15 events.
	for i := 0; b.Loop(); i++ {
		pod := kubeletPod(fmt.Sprintf("bench-%d", i), fmt.Sprintf("bench-sandbox-%d", i))
		_ = p.RunPodSandbox(ctx, pod)
		for j := range 3 {
			c := ctr(pod, fmt.Sprintf("bench-ctr-%d-%d", i, j), api.ContainerState_CONTAINER_CREATED)
			_ = p.PostCreateContainer(ctx, pod, c)
			_ = p.PostStartContainer(ctx, pod, c)
			_, _ = p.StopContainer(ctx, pod, c)
			_ = p.RemoveContainer(ctx, pod, c)
		}
		_ = p.StopPodSandbox(ctx, pod)
		_ = p.RemovePodSandbox(ctx, pod)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*15)/1000, "µs/event")
}

// TestAConnectionThatDiesDuringRegistrationIsNotReused: containerd may close
// a plugin's connection while it registers (it restarts, or it still drops
// the plugin's previous connection). The next attempt must dial a new
// connection and register: nri's stub keeps a connection its registration
// failed on, so a plugin that reuses its stub retries on a dead connection
// for ever ("ttrpc: closed"; found by the chaos soak).
func TestAConnectionThatDiesDuringRegistrationIsNotReused(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	startRuntime(t, socket, nil, nil)
	p, _, _ := newTestPlugin()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dials atomic.Int64
	dial := func(path string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			// The first connection is gone before registration completes.
			a, b := net.Pipe()
			b.Close()
			return a, nil
		}
		return net.Dial("unix", path)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, ConnectOptions{SocketPath: socket, PluginName: "nri-housekeeper", PluginIndex: "10", Dial: dial,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	}()
	waitFor(t, "the plugin registers over a new connection", 5*time.Second, p.Synchronized)
	if n := dials.Load(); n < 2 {
		t.Fatalf("dialled %d time(s), want a new connection after the first died", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// stalledWriter is a log sink that does not take anything until released,
// as a journald that does not read its socket.
type stalledWriter struct {
	release chan struct{}
	mu      sync.Mutex
	written []string
}

func (w *stalledWriter) Write(b []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written = append(w.written, string(b))
	return len(b), nil
}

func (w *stalledWriter) lines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.written, "")
}

// TestHandlersNeverWaitForTheLog: containerd drops a plugin whose handler
// takes longer than its NRI request timeout (2 s), so a handler that logs
// must not wait for a log sink that stalls. Its lines are written once the
// sink takes them again, and a flood beyond the queue is counted, not kept.
func TestHandlersNeverWaitForTheLog(t *testing.T) {
	sink := &stalledWriter{release: make(chan struct{})}
	log := logrus.New()
	log.SetOutput(sink)
	state := podstate.New(0)
	p := New(state, &countingWaker{}, log, nil)
	ctx := context.Background()
	pod := kubeletPod("u1", "s1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := p.newConnection().Configure(ctx, "", "containerd", "v2.4.2"); err != nil {
			t.Error(err)
		}
		if _, err := p.Synchronize(ctx, []*api.PodSandbox{pod}, nil); err != nil {
			t.Error(err)
		}
		// Events podstate rejects (no sandbox ID) log a warning each,
		// more than the queue holds.
		for range handlerLogQueue + 10 {
			_ = p.RunPodSandbox(ctx, kubeletPod("u2", ""))
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the handlers waited for a stalled log")
	}
	close(sink.release)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(sink.lines(), "were dropped") && time.Now().Before(deadline) {
		_ = p.RunPodSandbox(ctx, kubeletPod("u2", "")) // a line after the flood says what was dropped
		time.Sleep(10 * time.Millisecond)
	}
	out := sink.lines()
	for _, want := range []string{"registered with the runtime over NRI", "synchronized with the runtime", "NRI event not recorded", "were dropped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q once the sink takes lines again:\n%s", want, out)
		}
	}
}

// registerThenClose is a runtime that answers RegisterPlugin and goes away
// before it sends Configure: containerd restarting right after it, or its
// registration timeout firing as it answered.
type registerThenClose struct{ conn net.Conn }

func (r *registerThenClose) RegisterPlugin(context.Context, *api.RegisterPluginRequest) (*api.Empty, error) {
	go func() { time.Sleep(50 * time.Millisecond); r.conn.Close() }()
	return &api.Empty{}, nil
}

func (r *registerThenClose) UpdateContainers(context.Context, *api.UpdateContainersRequest) (*api.UpdateContainersResponse, error) {
	return &api.UpdateContainersResponse{}, nil
}

// TestAConnectionClosedBeforeConfigureIsLeftBehind: nri's stub waits for
// Configure holding its lock and ignoring its context, and its close
// callback needs that lock, so a runtime that closes the connection after
// registering and before Configure leaves it waiting for ever. The plugin
// must leave that stub behind, connect again, and still stop when asked.
func TestAConnectionClosedBeforeConfigureIsLeftBehind(t *testing.T) {
	dir := t.TempDir()
	closing, real := filepath.Join(dir, "closing.sock"), filepath.Join(dir, "nri.sock")
	l, err := net.Listen("unix", closing)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mux := multiplex.Multiplex(conn, multiplex.WithBlockedRead())
			rpcl, err := mux.Listen(multiplex.RuntimeServiceConn)
			if err != nil {
				return
			}
			srv, err := ttrpc.NewServer()
			if err != nil {
				return
			}
			api.RegisterRuntimeService(srv, &registerThenClose{conn: conn})
			go func() { _ = srv.Serve(context.Background(), rpcl) }()
			mux.Unblock()
		}
	}()
	startRuntime(t, real, nil, nil)
	var dials atomic.Int64
	dial := func(string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return net.Dial("unix", closing)
		}
		return net.Dial("unix", real)
	}
	p, _, _ := newTestPlugin()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, ConnectOptions{SocketPath: real, PluginName: "nri-housekeeper", PluginIndex: "10", Dial: dial,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ConfigureWithin: 300 * time.Millisecond})
	}()
	waitFor(t, "the plugin registers over a new connection after the one closed before Configure", 5*time.Second, p.Synchronized)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	// The stub left behind is released, not kept waiting: its Start (and
	// with it its close callback and ttrpc server) used to stay for the
	// life of the process, one set per connection left behind.
	waitFor(t, "no stub still waits for its Configure", 3*time.Second, func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "stub.(*stub).Start")
	})
}

// TestALateSynchronizeOfALostConnectionLeavesTheGateClosed: a Synchronize
// handler of connection 1 still running when containerd goes away (the
// stub does not wait for it before the close callback) finishes after
// connection 2 registered: it must not mark connection 2 synchronized
// before its own Synchronize, with the NRI events of the gap missing.
func TestALateSynchronizeOfALostConnectionLeavesTheGateClosed(t *testing.T) {
	p, _, w := newTestPlugin()
	c1 := p.newConnection()
	if _, err := c1.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	c1.lost() // containerd restarts while c1's Synchronize handler runs
	c2 := p.newConnection()
	if _, err := c2.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Synchronize(context.Background(), nil, nil); err != nil { // c1's handler returns now
		t.Fatal(err)
	}
	if p.Synchronized() || w.resyncs.Load() != 0 {
		t.Fatalf("synchronized %v, resyncs %d after connection 1's late Synchronize; want false, 0: connection 2 has not synchronized",
			p.Synchronized(), w.resyncs.Load())
	}
	if _, err := c2.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if !p.Synchronized() {
		t.Fatal("not synchronized after the current connection's Synchronize")
	}
}

// TestALateConfigureOfAConnectionLeftBehindDoesNotTakeOverTheNewOne: a
// connection whose Configure did not come within the watchdog's window is
// left behind and a new one opened; that Configure may still end (a
// handler already running), after the new connection's own. It must be
// refused: taken, it made the connection left behind the current one, the
// new connection's Synchronize was ignored, and housekeeping stayed gated
// until the next reconnect.
func TestALateConfigureOfAConnectionLeftBehindDoesNotTakeOverTheNewOne(t *testing.T) {
	p, _, w := newTestPlugin()
	behind := p.newConnection()
	behind.lost() // the watchdog left it behind
	c2 := p.newConnection()
	if _, err := c2.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := behind.Configure(context.Background(), "", "containerd", "v2"); err == nil {
		t.Fatal("the late Configure of a connection left behind was accepted")
	}
	if behind.configured.Load() {
		t.Fatal("the connection left behind counts as configured")
	}
	if got := p.Stats().Registrations.Load(); got != 1 {
		t.Fatalf("%d registrations counted, want 1: the refused Configure is none", got)
	}
	if _, err := c2.Synchronize(context.Background(), []*api.PodSandbox{kubeletPod("u", "s1")}, nil); err != nil {
		t.Fatal(err)
	}
	if !p.Synchronized() || w.resyncs.Load() != 1 {
		t.Fatalf("synchronized %v, resyncs %d after the new connection's Synchronize; want true, 1",
			p.Synchronized(), w.resyncs.Load())
	}
	behind.lost() // its stub's close callback, later still
	if !p.Connected() || !p.Synchronized() {
		t.Fatalf("connected %v, synchronized %v after the loss of the connection left behind; want both",
			p.Connected(), p.Synchronized())
	}
}

// TestASynchronizeThatEndsAfterItsConnectionsLossLeavesTheGateClosed: the
// stub runs a Synchronize handler and its close callback on goroutines of
// their own (deliverSync waits for the stub's lock, which connClosed holds
// while it closes, then calls the callback), so the loss of a connection
// can be recorded before that connection's Synchronize handler takes the
// plugin's lock, with no later connection registered yet. The plugin must
// not then say it is synchronized: no connection is, and the NRI events of
// the gap until the next connection's Synchronize are missing.
func TestASynchronizeThatEndsAfterItsConnectionsLossLeavesTheGateClosed(t *testing.T) {
	p, _, w := newTestPlugin()
	c1 := p.newConnection()
	if _, err := c1.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	c1.lost() // containerd goes away; the Synchronize handler has not taken the lock yet
	if _, err := c1.Synchronize(context.Background(), []*api.PodSandbox{kubeletPod("u", "s1")}, nil); err != nil {
		t.Fatal(err)
	}
	if p.Synchronized() || w.resyncs.Load() != 0 {
		t.Fatalf("synchronized %v, resyncs %d after a Synchronize of a connection already lost; want false, 0",
			p.Synchronized(), w.resyncs.Load())
	}
	c2 := p.newConnection()
	if _, err := c2.Configure(context.Background(), "", "containerd", "v2"); err != nil {
		t.Fatal(err)
	}
	if p.Synchronized() {
		t.Fatal("synchronized after the next connection's Configure, before its Synchronize")
	}
	if _, err := c2.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if !p.Synchronized() {
		t.Fatal("not synchronized after the current connection's Synchronize")
	}
}

// TestSynchronizeTakesAnUnknownContainerForOneThatMayRun: NRI reports a
// container whose task containerd could not load after a restart as
// UNKNOWN; it may still run, as the CRI listing's UNKNOWN is read. It was
// recorded as Created (never started), so a pod whose sandbox was seen
// stopped counted as Terminated, nothing running, until the next listing.
func TestSynchronizeTakesAnUnknownContainerForOneThatMayRun(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		state     api.ContainerState
		want      podstate.ContainerState
		wantPhase podstate.Phase
	}{
		{api.ContainerState_CONTAINER_UNKNOWN, podstate.ContainerUnknown, podstate.PhaseTerminating},
		{api.ContainerState_CONTAINER_RUNNING, podstate.ContainerRunning, podstate.PhaseTerminating},
		{api.ContainerState_CONTAINER_PAUSED, podstate.ContainerRunning, podstate.PhaseTerminating},
		{api.ContainerState_CONTAINER_CREATED, podstate.ContainerCreated, podstate.PhaseTerminated},
	} {
		t.Run(tt.state.String(), func(t *testing.T) {
			p, state, _ := newTestPlugin()
			pod := kubeletPod("u1", "s1")
			if err := p.RunPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			if err := p.StopPodSandbox(ctx, pod); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Synchronize(ctx, []*api.PodSandbox{pod}, []*api.Container{ctr(pod, "c1", tt.state)}); err != nil {
				t.Fatal(err)
			}
			v, _ := state.Pod("u1")
			if len(v.Containers) != 1 || v.Containers[0].State != tt.want || v.Phase != tt.wantPhase {
				t.Fatalf("pod %s, containers %+v; want its container %s, the pod %s", v.Phase, v.Containers, tt.want, tt.wantPhase)
			}
		})
	}
}
