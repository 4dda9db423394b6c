// Package plugin is the NRI side of nri-housekeeper: its handlers turn NRI
// lifecycle messages into podstate events and wake the housekeeping loop.
//
// Handlers only record and wake. containerd holds its NRI lock while a
// handler runs, so a handler that did I/O or called back into CRI would stall
// every pod operation on the node (and a CRI call would deadlock until the
// plugin is disconnected after the request timeout). Handlers never return an
// error either: for NRI an error from RunPodSandbox fails the pod.
package plugin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// Compile-time checks: the stub finds handlers by type assertion, so a
// handler with a wrong signature would be silently ignored. The stub is
// given a connection: the Plugin's handlers, and its own Configure.
var (
	_ stub.ConfigureInterface           = (*connection)(nil)
	_ stub.SynchronizeInterface         = (*connection)(nil)
	_ stub.RunPodInterface              = (*connection)(nil)
	_ stub.StopPodInterface             = (*connection)(nil)
	_ stub.RemovePodInterface           = (*connection)(nil)
	_ stub.PostCreateContainerInterface = (*connection)(nil)
	_ stub.PostStartContainerInterface  = (*connection)(nil)
	_ stub.StopContainerInterface       = (*connection)(nil)
	_ stub.RemoveContainerInterface     = (*connection)(nil)
)

// Waker is told when housekeeping should run early. Both methods must return
// at once.
type Waker interface {
	// Resync asks for a fresh listing now: NRI just (re)synchronized.
	Resync()
	// Wake asks for an early pass: something stopped or was removed.
	Wake()
}

// Observer is told about NRI traffic (package metrics implements it). Its
// methods are called from handlers, so they must be cheap and never block.
type Observer interface {
	ObserveNRIEvent(event string)
	SetNRIConnected(connected bool)
	ObserveNRIReconnect()
}

// ConfigFunc receives the configuration text containerd passes to a
// pre-registered plugin (the contents of its .conf file). An error rejects
// the configuration: containerd then drops the plugin.
type ConfigFunc func(text string) error

// Plugin implements the NRI handlers. Create it with New.
type Plugin struct {
	state     *podstate.State
	waker     Waker
	log       *handlerLog // never waits: see handlerLog
	now       func() time.Time
	configure ConfigFunc
	observer  Observer

	connected    atomic.Bool
	synchronized atomic.Bool
	stats        Stats

	connections atomic.Uint64 // numbers each NRI connection
	// current is the connection whose Configure came last, 0 once it is
	// lost; only its loss clears connected and synchronized, and only its
	// Synchronize sets synchronized. The mutex orders a Configure against an older
	// connection's loss or Synchronize.
	currentMu sync.Mutex
	current   uint64
}

// connection is the handlers of one NRI connection: the Plugin's, with a
// Configure that makes it the current one. nri's stub calls its close
// callback from its own goroutine, after its Run has returned; the plugin
// may have connected and synchronized again by then. Were that late call
// taken as the loss of the connection it replaced, housekeeping would wait,
// for as long as that connection lives, for a Synchronize that does not
// come again, and act on nothing.
type connection struct {
	*Plugin
	n uint64
	// configured is set once this connection's Configure was accepted:
	// what its watchdog waits for (another connection's, a late one of a
	// connection left behind, says nothing of this one).
	configured atomic.Bool
	// configure is who answers the stub's wait for Configure: the
	// runtime's (configureByRuntime) or, for a connection its watchdog
	// left behind, the plugin's own release (configureLeftBehind). One is
	// chosen: the watchdog leaves behind no connection whose Configure is
	// being handled, and a runtime's Configure that comes after the
	// release is accepted for nothing.
	configure atomic.Int32
}

// Values of connection.configure.
const (
	configureAwaited    int32 = iota
	configureByRuntime        // the runtime's Configure reached the handler
	configureLeftBehind       // left behind: the plugin's release answers
)

// newConnection returns the handlers for a new NRI connection.
func (p *Plugin) newConnection() *connection {
	return &connection{Plugin: p, n: p.connections.Add(1)}
}

// Configure is called once per connection, before Synchronize.
func (c *connection) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	if !c.configure.CompareAndSwap(configureAwaited, configureByRuntime) && c.configure.Load() == configureLeftBehind {
		// The plugin's own release of a stub left behind (releaseStub):
		// it only ends the stub's wait; the connection is closed.
		return 0, nil
	}
	mask, err := c.Plugin.configured(c.n, config, runtime, version)
	if err == nil {
		c.configured.Store(true)
	}
	return mask, err
}

// Synchronize records the runtime's state if the connection is still the
// current one. One whose handler was still running when the connection
// went (the stub does not wait for it) must not open the gate for the
// next connection before that one's own Synchronize.
func (c *connection) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	c.currentMu.Lock()
	defer c.currentMu.Unlock()
	if c.n != c.current {
		c.log.say(logrus.DebugLevel, logrus.Fields{"connection": c.n, "current_connection": c.current}, nil,
			"a Synchronize of an earlier NRI connection ended after the current one registered; ignored")
		return nil, nil
	}
	return c.Plugin.Synchronize(ctx, pods, ctrs)
}

// lost is called when the connection is gone: by the stub's close
// callback, and when its Run returns. Either may come first.
func (c *connection) lost() { c.Plugin.lost(c.n) }

// Stats counts what the handlers saw. Read it with Plugin.Stats.
type Stats struct {
	Events        [podstate.RemoveContainer + 1]atomic.Uint64 // by podstate.EventKind
	Unmanaged     atomic.Uint64                               // events about objects without kubelet labels
	Rejected      atomic.Uint64                               // events podstate could not record
	Synchronizes  atomic.Uint64
	Registrations atomic.Uint64
}

// New returns a Plugin recording into state. configure may be nil (external
// mode: containerd passes no configuration then).
func New(state *podstate.State, waker Waker, log logrus.FieldLogger, configure ConfigFunc) *Plugin {
	return &Plugin{state: state, waker: waker, log: newHandlerLog(log), now: time.Now, configure: configure}
}

// SetObserver sets who hears of NRI traffic. Call it before Run.
func (p *Plugin) SetObserver(o Observer) { p.observer = o }

// Connected reports whether the plugin is registered with the runtime.
func (p *Plugin) Connected() bool { return p.connected.Load() }

// Synchronized reports whether the runtime sent its state since the last
// (re)connect: only then is the podstate complete.
func (p *Plugin) Synchronized() bool { return p.synchronized.Load() }

// Stats returns the handler counters.
func (p *Plugin) Stats() *Stats { return &p.stats }

// configured handles connection n's Configure. Only the newest connection
// may become the current one: the plugin opens a connection only once the
// one before it ended or was left behind (its watchdog), and the late
// Configure of one left behind, had it made that one current again, would
// have the new connection's Synchronize ignored and housekeeping wait for
// the next reconnect.
func (p *Plugin) configured(n uint64, config, runtime, version string) (api.EventMask, error) {
	if err := p.leftBehind(n); err != nil {
		return 0, err
	}
	p.log.say(logrus.InfoLevel, logrus.Fields{"runtime": runtime, "runtime_version": version, "connection": n}, nil, "registered with the runtime over NRI")
	if p.configure != nil {
		if err := p.configure(config); err != nil {
			p.log.say(logrus.ErrorLevel, nil, err, "rejecting the configuration containerd passed")
			return 0, err
		}
	}
	p.currentMu.Lock()
	if err := p.leftBehind(n); err != nil {
		p.currentMu.Unlock()
		return 0, err
	}
	if p.stats.Registrations.Add(1) > 1 && p.observer != nil {
		p.observer.ObserveNRIReconnect()
	}
	p.current = n
	p.connected.Store(true)
	if p.observer != nil {
		p.observer.SetNRIConnected(true)
	}
	p.currentMu.Unlock()
	// 0 subscribes to every event this plugin has a handler for.
	return 0, nil
}

// leftBehind refuses connection n when a newer one was opened since.
func (p *Plugin) leftBehind(n uint64) error {
	if newest := p.connections.Load(); n != newest {
		p.log.say(logrus.InfoLevel, logrus.Fields{"connection": n, "current_connection": newest}, nil,
			"the Configure of an NRI connection left behind came after a newer connection was opened; refused")
		return fmt.Errorf("NRI connection %d was left behind for connection %d", n, newest)
	}
	return nil
}

// Synchronize records the runtime's pods and running containers.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	sandboxes := make([]podstate.SyncedSandbox, 0, len(pods))
	idByPod := make(map[string]podstate.PodIdentity, len(pods))
	unmanaged := 0
	for _, pod := range pods {
		id, ok := podstate.KubeletPod(pod.GetLabels())
		if !ok {
			unmanaged++
			continue
		}
		idByPod[pod.GetId()] = id
		sandboxes = append(sandboxes, podstate.SyncedSandbox{Pod: id, SandboxID: pod.GetId()})
	}
	containers := make([]podstate.SyncedContainer, 0, len(ctrs))
	for _, c := range ctrs {
		id, ok := idByPod[c.GetPodSandboxId()]
		if !ok {
			unmanaged++
			continue
		}
		containers = append(containers, podstate.SyncedContainer{
			Pod: id, SandboxID: c.GetPodSandboxId(), ID: c.GetId(), Name: c.GetName(), State: syncedState(c.GetState()),
		})
	}
	r := p.state.Synchronize(p.now(), sandboxes, containers)
	p.stats.Synchronizes.Add(1)
	if p.observer != nil {
		p.observer.ObserveNRIEvent("Synchronize")
	}
	p.stats.Unmanaged.Add(uint64(unmanaged))
	p.stats.Rejected.Add(uint64(r.Skipped))
	p.synchronized.Store(true)
	p.log.say(logrus.InfoLevel, logrus.Fields{
		"pods": len(sandboxes), "containers": len(containers), "new_records": r.Added,
		"unmanaged": unmanaged, "malformed": r.Skipped,
	}, nil, "synchronized with the runtime")
	p.waker.Resync()
	return nil, nil
}

// syncedState maps an NRI container state; Synchronize leaves exited ones out,
// a paused container still has processes, and an UNKNOWN one may have (a
// task containerd could not load after a restart), as the CRI listing's
// UNKNOWN is read.
func syncedState(s api.ContainerState) podstate.ContainerState {
	switch s {
	case api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
		return podstate.ContainerRunning
	case api.ContainerState_CONTAINER_STOPPED:
		return podstate.ContainerExited
	case api.ContainerState_CONTAINER_UNKNOWN:
		return podstate.ContainerUnknown
	}
	return podstate.ContainerCreated
}

// RunPodSandbox records a new sandbox.
func (p *Plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podstate.RunPodSandbox, pod, nil)
	return nil
}

// StopPodSandbox records a stopped sandbox.
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podstate.StopPodSandbox, pod, nil)
	return nil
}

// RemovePodSandbox records a removed sandbox.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record(podstate.RemovePodSandbox, pod, nil)
	return nil
}

// PostCreateContainer records a created container.
func (p *Plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.record(podstate.CreateContainer, pod, c)
	return nil
}

// PostStartContainer records a running container.
func (p *Plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.record(podstate.StartContainer, pod, c)
	return nil
}

// StopContainer records a container stopped through CRI or exited by itself.
func (p *Plugin) StopContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.record(podstate.StopContainer, pod, c)
	return nil, nil
}

// RemoveContainer records a removed container.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, c *api.Container) error {
	p.record(podstate.RemoveContainer, pod, c)
	return nil
}

// record is the whole of every lifecycle handler: map, apply, maybe wake.
func (p *Plugin) record(kind podstate.EventKind, pod *api.PodSandbox, c *api.Container) {
	p.stats.Events[kind].Add(1)
	if p.observer != nil {
		p.observer.ObserveNRIEvent(kind.String())
	}
	id, ok := podstate.KubeletPod(pod.GetLabels())
	if !ok {
		p.stats.Unmanaged.Add(1)
		return
	}
	ev := podstate.Event{Kind: kind, At: p.now(), Pod: id, SandboxID: pod.GetId()}
	if c != nil {
		ev.ContainerID, ev.ContainerName = c.GetId(), c.GetName()
	}
	if err := p.state.Apply(ev); err != nil {
		p.stats.Rejected.Add(1)
		p.log.say(logrus.WarnLevel, nil, err, "NRI event not recorded")
		return
	}
	switch kind {
	case podstate.StopPodSandbox, podstate.RemovePodSandbox, podstate.StopContainer:
		p.waker.Wake()
	}
}

// lost marks connection n lost, if it is still the current one: a later
// connection's state is not n's to clear.
func (p *Plugin) lost(n uint64) {
	p.currentMu.Lock()
	defer p.currentMu.Unlock()
	if n != p.current {
		if p.connected.Load() {
			p.log.say(logrus.DebugLevel, logrus.Fields{"connection": n, "current_connection": p.current}, nil,
				"an earlier NRI connection's close came after the current one registered; ignored")
		}
		return
	}
	// No connection is current until the next Configure: a Synchronize
	// handler of n still running (the stub calls its close callback
	// without waiting for it) must not open the gate after this.
	p.current = 0
	p.connected.Store(false)
	p.synchronized.Store(false)
	if p.observer != nil {
		p.observer.SetNRIConnected(false)
	}
}
