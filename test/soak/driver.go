package soak

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// Driver is the kubelet stand-in: it runs the schedule's pod steps against
// the lab's containerd through CRI, plays kubelet's file side (pod dirs,
// container log links, pod cgroup removal) and records everything in the
// ground truth. Like kubelet it retries what containerd fails while it is
// killed or paused, and when a create call fails it lists what containerd
// made of it (by the pod's UID) and adopts that.
type Driver struct {
	lab         *lab.Lab
	rt          runtimeapi.RuntimeServiceClient
	truth       *Truth
	plan        *Plan
	kubeletRoot string
	linksDir    string
	hierarchies []string // cgroup mounts (v1 controllers and cgroup2)
	cgroupRel   string   // the lab's cgroup root without its slash
	period      time.Duration
	logf        func(format string, args ...any)

	pods   map[int]*Pod // by plan index
	counts PodCounts
	maxLag time.Duration
	follow []followUp

	procMu sync.Mutex
	procs  map[int]*exec.Cmd // processes left in leaked pod cgroups
}

// followUp is a step the stand-in scheduled itself (the delayed sandbox
// removal of a pod-dir leak).
type followUp struct {
	at time.Time
	do func(ctx context.Context)
}

// Timeouts of the stand-in's CRI calls: longer than a containerd pause or
// restart takes, so that a call fails only when containerd dies under it.
const (
	callTimeout = 30 * time.Second
	opDeadline  = 3 * time.Minute // a retried call gives up after this long: containerd is broken
)

func (d *Driver) labPod(p *Pod, attempt uint32) lab.Pod {
	lp := lab.Pod{Name: p.Name, Namespace: p.NS, UID: p.UID, Attempt: attempt}
	if p.Network {
		lp.Network = &lab.PodNetwork{}
	}
	return lp
}

// Run executes the schedule's steps (and the follow-ups they add) from
// start until ctx ends or every step ran. Steps late by more than they are
// apart run back to back: the schedule holds "as far as timing allows".
func (d *Driver) Run(ctx context.Context, start time.Time) {
	ops := d.plan.Ops
	for i := 0; ctx.Err() == nil; {
		// The earliest of the next planned step and the follow-ups.
		sort.SliceStable(d.follow, func(a, b int) bool { return d.follow[a].at.Before(d.follow[b].at) })
		var next time.Time
		planned := i < len(ops)
		if planned {
			next = start.Add(ops[i].At)
		}
		useFollow := len(d.follow) > 0 && (!planned || d.follow[0].at.Before(next))
		if useFollow {
			next = d.follow[0].at
		}
		if !planned && !useFollow {
			return
		}
		if !sleepUntil(ctx, next) {
			return
		}
		if lag := time.Since(next); lag > d.maxLag {
			d.maxLag = lag
		}
		if useFollow {
			f := d.follow[0]
			d.follow = d.follow[1:]
			f.do(ctx)
			continue
		}
		d.step(ctx, ops[i])
		i++
	}
}

// Drain runs the follow-ups still pending (at their time), so that every
// leak is complete before the soak settles.
func (d *Driver) Drain(ctx context.Context) {
	for len(d.follow) > 0 && ctx.Err() == nil {
		sort.SliceStable(d.follow, func(a, b int) bool { return d.follow[a].at.Before(d.follow[b].at) })
		f := d.follow[0]
		d.follow = d.follow[1:]
		if !sleepUntil(ctx, f.at) {
			return
		}
		f.do(ctx)
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (d *Driver) step(ctx context.Context, op Op) {
	switch op.Kind {
	case OpCreate:
		d.createPod(ctx, op.Pod)
	case OpDelete:
		p := d.pods[op.Pod]
		if p == nil || !p.Deleted.IsZero() {
			d.counts.Skipped++
			return
		}
		d.deletePod(ctx, p, op.Leak, false)
		d.counts.Deleted++
	case OpRestartContainer:
		p := d.pods[op.Pod]
		if p == nil || !p.Deleted.IsZero() || p.current == nil {
			d.counts.Skipped++
			return
		}
		d.restartContainer(ctx, p, op.Slot)
	case OpRestartSandbox:
		p := d.pods[op.Pod]
		if p == nil || !p.Deleted.IsZero() || p.current == nil {
			d.counts.Skipped++
			return
		}
		d.restartSandbox(ctx, p)
	}
}

// transient errors are containerd going away or not answering (killed,
// restarting, paused): the call is worth repeating once it is back.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		return true
	}
	return false
}

// retry repeats an idempotent call until it succeeds, fails with NotFound,
// or opDeadline passes.
func (d *Driver) retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(opDeadline)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := f(cctx)
		cancel()
		switch {
		case err == nil, status.Code(err) == codes.NotFound, ctx.Err() != nil:
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("%s: still failing after %s: %w", what, opDeadline, err)
		}
		if !sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// ------------------------------------------------------------- create ---

func (d *Driver) createPod(ctx context.Context, idx int) {
	pp := d.plan.Pods[idx]
	p := &Pod{Index: idx, Name: pp.Name, NS: pp.Namespace, UID: pp.UID, Network: pp.Network, Anchor: pp.Anchor,
		PodDir: filepath.Join(d.kubeletRoot, "pods", pp.UID), attempts: map[string]uint32{}, slots: map[string]*Object{},
		containers: pp.Containers}
	p.LogDir = lab.PodLogDir(d.lab.LogRoot, d.labPod(p, 0))
	for i := range pp.Containers {
		p.slotNames = append(p.slotNames, fmt.Sprintf("app%d", i))
	}
	// kubelet admits the pod: its dir (with a volume dir and etc-hosts, as
	// kubelet sets them up) before anything runs.
	p.Admitted = time.Now()
	d.truth.AddPod(p)
	d.pods[idx] = p
	vol := filepath.Join(p.PodDir, "volumes", "kubernetes.io~empty-dir", "cache")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		d.truth.Fail("pod dir of %s: %v", p.Name, err)
	}
	_ = os.WriteFile(filepath.Join(p.PodDir, "etc-hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	// The pod log dir (kubelet makes it before RunPodSandbox): fails while
	// the pod log file system is full.
	if err := os.MkdirAll(p.LogDir, 0o755); err != nil {
		d.logf("create %s: pod log dir: %v: giving up on the pod", p.Name, err)
		d.abandon(ctx, p)
		return
	}
	sb, err := d.runSandbox(ctx, p)
	if err != nil {
		d.logf("create %s: %v: giving up on the pod", p.Name, err)
		d.abandon(ctx, p)
		return
	}
	d.recordCgroups(p)
	for _, name := range p.slotNames {
		if err := d.startContainer(ctx, p, sb, name); err != nil {
			d.logf("create %s: container %s: %v (the pod runs without it)", p.Name, name, err)
		}
	}
	d.counts.Created++
}

func (d *Driver) abandon(ctx context.Context, p *Pod) {
	d.counts.CreateFailed++
	d.deletePod(ctx, p, LeakNone, true)
}

// podCgroup is the pod's cgroup dir in hierarchy h.
func (d *Driver) podCgroup(h string, p *Pod) string {
	return filepath.Join(h, d.cgroupRel, "besteffort", "pod"+p.UID)
}

func (d *Driver) recordCgroups(p *Pod) {
	var cgs []string
	for _, h := range d.hierarchies {
		if dir := d.podCgroup(h, p); exists(dir) {
			cgs = append(cgs, dir)
		}
	}
	d.truth.Update(func() { p.Cgroups = cgs })
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// listSandboxes lists the pod's sandboxes (retrying until containerd answers).
func (d *Driver) listSandboxes(ctx context.Context, uid string) ([]*runtimeapi.PodSandbox, error) {
	var items []*runtimeapi.PodSandbox
	err := d.retry(ctx, "ListPodSandbox", func(ctx context.Context) error {
		r, err := d.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
		if err == nil {
			items = r.Items
		}
		return err
	})
	return items, err
}

// runSandbox runs the pod's next sandbox attempt. When the call fails,
// whatever containerd made of it (or of an earlier try) is adopted: a Ready
// sandbox is used, a NotReady one is dead (kubelet tries a new attempt).
func (d *Driver) runSandbox(ctx context.Context, p *Pod) (*Object, error) {
	var lastErr error
	for try := 0; try < 4 && ctx.Err() == nil; try++ {
		attempt := p.attempt
		p.attempt++
		lp := d.labPod(p, attempt)
		born := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := d.rt.RunPodSandbox(cctx, &runtimeapi.RunPodSandboxRequest{Config: lab.SandboxConfig(lp, d.lab.LogRoot, d.lab.CgroupRoot)})
		cancel()
		if err == nil {
			o := d.truth.AddObject(&Object{ID: r.PodSandboxId, Kind: KindSandbox, Pod: p, Attempt: attempt, Born: born})
			now := time.Now()
			d.truth.Update(func() { o.Started, p.current = now, o })
			d.recordNetns(ctx, p, o)
			return o, nil
		}
		lastErr = err
		found, lerr := d.listSandboxes(ctx, p.UID)
		if lerr != nil {
			return nil, fmt.Errorf("RunPodSandbox: %v; listing the pod's sandboxes: %w", err, lerr)
		}
		var ready *Object
		var strays []*Object
		for _, s := range found {
			o := d.truth.AddObject(&Object{ID: s.Id, Kind: KindSandbox, Pod: p, Attempt: s.GetMetadata().GetAttempt(), Born: born, Adopted: true})
			d.recordNetns(ctx, p, o)
			if s.GetMetadata().GetAttempt() >= p.attempt {
				p.attempt = s.GetMetadata().GetAttempt() + 1
			}
			d.truth.Update(func() {
				switch {
				case !o.Dead.IsZero():
				case s.State == runtimeapi.PodSandboxState_SANDBOX_READY && ready == nil:
					ready = o
				default:
					o.Dead = time.Now() // kubelet gives up on it
					if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
						strays = append(strays, o)
					}
				}
			})
		}
		for _, o := range strays {
			_ = d.retry(ctx, "StopPodSandbox", func(ctx context.Context) error {
				_, err := d.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: o.ID})
				return err
			})
		}
		if ready != nil {
			d.logf("create %s: RunPodSandbox failed (%v) but containerd has it Ready: adopted %s", p.Name, err, short(ready.ID))
			now := time.Now()
			d.truth.Update(func() { ready.Started, p.current = now, ready })
			return ready, nil
		}
		if !transient(err) && try > 0 {
			break
		}
		sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	}
	return nil, fmt.Errorf("RunPodSandbox: %w", lastErr)
}

// recordNetns reads from containerd which network namespace sandbox o of a
// pod with its own netns has, so that the checker can tell whose a netns
// the plugin removes is (a remove-netns line may name no owner). A sandbox
// containerd no longer has has no netns to act on, nor may one a failed
// RunPodSandbox left (adopted); any other failure is the stand-in's: the
// plugin's steps on that netns could not be judged.
func (d *Driver) recordNetns(ctx context.Context, p *Pod, o *Object) {
	if !p.Network {
		return
	}
	var known string
	var adopted bool
	d.truth.Update(func() { known, adopted = o.Netns, o.Adopted })
	if known != "" {
		return
	}
	// A CRI call that fails is retried as any other; an answer without the
	// verbose info is not worth repeating.
	var n lab.SandboxNet
	var infoErr error
	err := d.retry(ctx, "PodSandboxStatus", func(ctx context.Context) error {
		var err error
		n, err = lab.SandboxNetwork(ctx, d.rt, o.ID)
		if _, grpcErr := status.FromError(err); !grpcErr {
			infoErr, err = err, nil
		}
		return err
	})
	switch {
	case status.Code(err) == codes.NotFound || ctx.Err() != nil:
	case err != nil:
		d.truth.Fail("netns of sandbox %s of %s: %v (the plugin's network steps on it cannot be judged)", short(o.ID), p.Name, err)
	case infoErr != nil:
		d.truth.Fail("netns of sandbox %s of %s: %v (the plugin's network steps on it cannot be judged)", short(o.ID), p.Name, infoErr)
	case n.NetnsPath == "" && adopted:
		// What a failed RunPodSandbox left may never have had a netns.
	case n.NetnsPath == "":
		d.truth.Fail("sandbox %s of %s, a pod with its own netns, names no netns in its metadata", short(o.ID), p.Name)
	default:
		d.truth.SetNetns(o, n.NetnsPath)
	}
}

// startContainer creates and starts the next attempt of container name in
// sandbox sb, with its log link.
func (d *Driver) startContainer(ctx context.Context, p *Pod, sb *Object, name string) error {
	// kubelet makes the container's log dir: fails while the disk is full
	// (a restart finds it there).
	if err := os.MkdirAll(filepath.Join(p.LogDir, name), 0o755); err != nil {
		return err
	}
	var lastErr error
	for try := 0; try < 4 && ctx.Err() == nil; try++ {
		attempt := p.attempts[name]
		p.attempts[name]++
		lp := d.labPod(p, sb.Attempt)
		born := time.Now()
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := d.rt.CreateContainer(cctx, &runtimeapi.CreateContainerRequest{
			PodSandboxId:  sb.ID,
			Config:        lab.ContainerConfig(lp, name, attempt, lab.SleeperImage, "-name", name, "-interval", "5s"),
			SandboxConfig: lab.SandboxConfig(lp, d.lab.LogRoot, d.lab.CgroupRoot),
		})
		cancel()
		var c *Object
		if err == nil {
			c = d.truth.AddObject(&Object{ID: r.ContainerId, Kind: KindContainer, Pod: p, Name: name, Attempt: attempt, Sandbox: sb, Born: born})
		} else {
			lastErr = err
			if c, err = d.adoptContainer(ctx, p, sb, name, attempt, born); err != nil {
				return fmt.Errorf("CreateContainer: %v; listing the sandbox's containers: %w", lastErr, err)
			}
			if c == nil {
				if !transient(lastErr) && try > 0 {
					break
				}
				sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
				continue
			}
			d.logf("create %s: CreateContainer %s failed (%v) but containerd has it: adopted %s", p.Name, name, lastErr, short(c.ID))
		}
		if err := d.start(ctx, c); err != nil {
			lastErr = err
			now := time.Now()
			d.truth.Update(func() {
				if c.Dead.IsZero() {
					c.Dead = now // kubelet gives up on this attempt
				}
			})
			if !transient(err) {
				break
			}
			continue
		}
		now := time.Now()
		link := &Link{Path: filepath.Join(d.linksDir, fmt.Sprintf("%s_%s_%s-%s.log", p.Name, p.NS, name, c.ID)), Container: c}
		d.truth.Update(func() { c.Started, p.slots[name] = now, c })
		if err := os.Symlink(filepath.Join(p.LogDir, name, fmt.Sprintf("%d.log", attempt)), link.Path); err != nil {
			d.truth.Fail("log link of %s: %v", c.describe(), err)
		} else {
			d.truth.AddLink(link)
		}
		return nil
	}
	return fmt.Errorf("container %s: %w", name, lastErr)
}

// adoptContainer finds the container a failed CreateContainer may have made
// (any other container of the sandbox the truth does not know is recorded
// dead).
func (d *Driver) adoptContainer(ctx context.Context, p *Pod, sb *Object, name string, attempt uint32, born time.Time) (*Object, error) {
	var list []*runtimeapi.Container
	err := d.retry(ctx, "ListContainers", func(ctx context.Context) error {
		r, err := d.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: sb.ID}})
		if err == nil {
			list = r.Containers
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var found *Object
	for _, c := range list {
		if d.truth.Object(c.Id) != nil {
			continue
		}
		o := d.truth.AddObject(&Object{ID: c.Id, Kind: KindContainer, Pod: p, Name: c.GetMetadata().GetName(),
			Attempt: c.GetMetadata().GetAttempt(), Sandbox: sb, Born: born, Adopted: true})
		if c.GetMetadata().GetName() == name && c.GetMetadata().GetAttempt() == attempt && found == nil {
			found = o
			continue
		}
		now := time.Now()
		d.truth.Update(func() { o.Dead = now })
	}
	return found, nil
}

// start starts a created container; when the call fails it asks containerd
// what became of it.
func (d *Driver) start(ctx context.Context, c *Object) error {
	var lastErr error
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := d.rt.StartContainer(cctx, &runtimeapi.StartContainerRequest{ContainerId: c.ID})
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		var st runtimeapi.ContainerState
		serr := d.retry(ctx, "ContainerStatus", func(ctx context.Context) error {
			r, err := d.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ID})
			if err == nil {
				st = r.GetStatus().GetState()
			}
			return err
		})
		switch {
		case serr != nil:
			return fmt.Errorf("StartContainer: %v; ContainerStatus: %w", err, serr)
		case st == runtimeapi.ContainerState_CONTAINER_RUNNING:
			return nil
		case st != runtimeapi.ContainerState_CONTAINER_CREATED:
			return fmt.Errorf("StartContainer: %w (now %s)", err, st)
		}
		sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	}
	return fmt.Errorf("StartContainer: %w", lastErr)
}

// ------------------------------------------------------------ restarts ---

func (d *Driver) restartContainer(ctx context.Context, p *Pod, slot int) {
	if slot >= len(p.slotNames) {
		return
	}
	name := p.slotNames[slot]
	if c := p.slots[name]; c != nil && c.Dead.IsZero() {
		d.stopContainer(ctx, c)
	}
	if err := d.startContainer(ctx, p, p.current, name); err != nil {
		d.logf("restart %s/%s: %v (the pod runs without it)", p.Name, name, err)
		return
	}
	d.counts.Restarts++
}

func (d *Driver) restartSandbox(ctx context.Context, p *Pod) {
	for _, name := range p.slotNames {
		if c := p.slots[name]; c != nil && c.Dead.IsZero() {
			d.stopContainer(ctx, c)
		}
	}
	d.stopSandbox(ctx, p.current)
	sb, err := d.runSandbox(ctx, p)
	if err != nil {
		d.logf("restart sandbox of %s: %v: giving up on the pod", p.Name, err)
		d.abandon(ctx, p)
		return
	}
	d.recordCgroups(p)
	for _, name := range p.slotNames {
		if err := d.startContainer(ctx, p, sb, name); err != nil {
			d.logf("restart sandbox of %s: container %s: %v (the pod runs without it)", p.Name, name, err)
		}
	}
	d.counts.SbRestarts++
}

// stopContainer stops a live container (its liveness ends now). A
// container that is gone although it was live was lost.
func (d *Driver) stopContainer(ctx context.Context, c *Object) {
	now := time.Now()
	wasLive := false
	d.truth.Update(func() {
		if c.Dead.IsZero() {
			c.Dead, wasLive = now, !c.Started.IsZero()
		}
	})
	err := d.retry(ctx, "StopContainer", func(ctx context.Context) error {
		_, err := d.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ID, Timeout: 2})
		return err
	})
	d.noteStopError(err, c, wasLive)
}

func (d *Driver) stopSandbox(ctx context.Context, sb *Object) {
	if sb == nil {
		return
	}
	now := time.Now()
	wasLive := false
	d.truth.Update(func() {
		if sb.Dead.IsZero() {
			sb.Dead, wasLive = now, !sb.Started.IsZero()
		}
	})
	err := d.retry(ctx, "StopPodSandbox", func(ctx context.Context) error {
		_, err := d.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.ID})
		return err
	})
	d.noteStopError(err, sb, wasLive)
}

func (d *Driver) noteStopError(err error, o *Object, wasLive bool) {
	switch {
	case err == nil:
	case status.Code(err) == codes.NotFound && wasLive:
		// Two sightings at once: gone is not a transient state.
		what := fmt.Sprintf("%s vanished while live (NotFound when the stand-in stopped it at %s)", o.describe(), stamp(o.Dead))
		d.truth.SawLost("gone/"+o.ID, what, o.Pod, time.Now())
		d.truth.SawLost("gone/"+o.ID, what, o.Pod, time.Now())
	case status.Code(err) == codes.NotFound:
	default:
		d.truth.Fail("stopping %s: %v", o.describe(), err)
	}
}

// --------------------------------------------------------------- delete ---

// deletePod deletes a pod the way kubelet does, or leaks it (see LeakKind).
func (d *Driver) deletePod(ctx context.Context, p *Pod, leak LeakKind, abandoned bool) {
	now := time.Now()
	d.truth.Update(func() { p.Deleted, p.Leak, p.Abandoned = now, leak, abandoned })
	for _, c := range append([]*Object(nil), p.Containers...) {
		if c.Dead.IsZero() {
			d.stopContainer(ctx, c)
		}
	}
	for _, sb := range append([]*Object(nil), p.Sandboxes...) {
		if sb.Dead.IsZero() {
			d.stopSandbox(ctx, sb)
		}
	}
	// The pod's own objects are dead once every stop was asked for.
	d.truth.Update(func() {
		p.Dead = p.Deleted
		for _, o := range append(append([]*Object(nil), p.Containers...), p.Sandboxes...) {
			if o.Dead.After(p.Dead) {
				p.Dead = o.Dead
			}
		}
	})
	made := func() {
		t := time.Now()
		d.truth.Update(func() { p.LeakMade = t })
	}
	switch leak {
	case LeakNone:
		d.removeSandboxes(ctx, p)
		d.removeCgroups(p)
		d.removeLinks(p)
		d.removeAll(p.LogDir)
		d.removeAll(p.PodDir)
	case Leak107730:
		d.removeAll(p.PodDir)
		made()
	case LeakLogDir:
		d.removeSandboxes(ctx, p)
		d.removeCgroups(p)
		d.removeLinks(p)
		d.removeAll(p.PodDir)
		made()
	case LeakLinks:
		d.removeSandboxes(ctx, p)
		d.removeCgroups(p)
		d.removeAll(p.LogDir)
		d.removeAll(p.PodDir)
		made()
	case LeakCgroup:
		d.removeSandboxes(ctx, p)
		d.removeLinks(p)
		d.removeAll(p.LogDir)
		d.leakProcess(p)
		d.removeAll(p.PodDir)
		made()
	case LeakPodDir:
		// Torn down in two steps a few periods apart, as kubelet stops a
		// pod and its garbage collector removes the sandbox later: the
		// plugin sees the sandbox NotReady, then gone.
		t := time.Now()
		d.truth.Update(func() { p.TeardownFrom = t })
		d.follow = append(d.follow, followUp{at: t.Add(3 * d.period), do: func(ctx context.Context) {
			d.removeSandboxes(ctx, p)
			d.removeLinks(p)
			d.removeAll(p.LogDir)
			t := time.Now()
			d.truth.Update(func() { p.TeardownUntil, p.LeakMade = t, t })
		}})
	}
}

func (d *Driver) removeSandboxes(ctx context.Context, p *Pod) {
	for _, sb := range append([]*Object(nil), p.Sandboxes...) {
		if !sb.Removed.IsZero() {
			continue
		}
		now := time.Now()
		err := d.retry(ctx, "RemovePodSandbox", func(ctx context.Context) error {
			_, err := d.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.ID})
			return err
		})
		if err != nil && status.Code(err) != codes.NotFound {
			d.truth.Fail("removing %s: %v", sb.describe(), err)
			continue
		}
		d.truth.Update(func() {
			sb.Removed = now
			for _, c := range p.Containers {
				if c.Sandbox == sb && c.Removed.IsZero() {
					c.Removed = now
				}
			}
		})
	}
}

// removeCgroups removes the pod cgroup bottom-up in every hierarchy, as
// kubelet does once the pod is gone (containerd leaves it).
func (d *Driver) removeCgroups(p *Pod) {
	for _, h := range d.hierarchies {
		dir := d.podCgroup(h, p)
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			for range 20 {
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				d.truth.Fail("removing cgroup %s of %s: %v", dirs[i], p.Name, err)
			}
		}
	}
}

func (d *Driver) removeLinks(p *Pod) {
	for _, l := range append([]*Link(nil), p.Links...) {
		if !l.Removed.IsZero() {
			continue
		}
		if err := os.Remove(l.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.truth.Fail("removing link %s: %v", l.Path, err)
		}
		now := time.Now()
		d.truth.Update(func() { l.Removed = now })
	}
}

func (d *Driver) removeAll(path string) {
	if err := os.RemoveAll(path); err != nil {
		d.truth.Fail("removing %s: %v", path, err)
	}
}

// leakProcess leaves a process in a container cgroup below the pod cgroup
// in every hierarchy: a pod cgroup kubelet could not remove.
func (d *Driver) leakProcess(p *Pod) {
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		d.truth.Fail("leak process of %s: %v", p.Name, err)
		return
	}
	pid := cmd.Process.Pid
	d.procMu.Lock()
	d.procs[pid] = cmd
	d.procMu.Unlock()
	go func() {
		_ = cmd.Wait()
		d.procMu.Lock()
		delete(d.procs, pid)
		d.procMu.Unlock()
	}()
	var cgs []string
	for _, h := range d.hierarchies {
		dir := filepath.Join(d.podCgroup(h, p), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
		if err := mkdirCgroup(h, dir); err != nil {
			d.truth.Fail("leak cgroup %s: %v", dir, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			d.truth.Fail("moving %d into %s: %v", pid, dir, err)
		}
		cgs = append(cgs, d.podCgroup(h, p))
	}
	d.truth.Update(func() { p.LeakProcess, p.Cgroups = pid, cgs })
}

// mkdirCgroup makes dir (below hierarchy h) level by level; a new cpuset
// cgroup gets its parent's CPUs and memory nodes, or no process could join.
func mkdirCgroup(h, dir string) error {
	rel, err := filepath.Rel(h, dir)
	if err != nil {
		return err
	}
	p := h
	for _, c := range strings.Split(rel, "/") {
		parent := p
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(p, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			val, _ := os.ReadFile(filepath.Join(parent, f))
			_ = os.WriteFile(filepath.Join(p, f), []byte(strings.TrimSpace(string(val))), 0)
		}
	}
	return nil
}

// KillLeakProcesses kills the processes left in leaked cgroups that the
// plugin did not kill, and waits for them.
func (d *Driver) KillLeakProcesses() int {
	d.procMu.Lock()
	var cmds []*exec.Cmd
	for _, c := range d.procs {
		cmds = append(cmds, c)
	}
	d.procMu.Unlock()
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		d.procMu.Lock()
		n := len(d.procs)
		d.procMu.Unlock()
		if n == 0 {
			break
		}
	}
	return len(cmds)
}

// ---------------------------------------------------------------- probe ---

// Probe checks that every live object is still whole: each live pod's
// current sandbox is listed Ready, its started containers RUNNING, and its
// pod dir, pod log dir, pod cgroup and container log links exist. An object
// counts as lost when two probes in a row find it hurt. Objects whose life
// ended during the probe are not judged. It does nothing when containerd
// does not answer within a few seconds (killed or paused).
func (d *Driver) Probe(ctx context.Context) {
	start := time.Now()
	type cand struct {
		o    *Object
		link *Link
	}
	var objs []cand
	var pods []*Pod
	d.truth.Update(func() {
		for _, p := range d.truth.podList {
			if !p.Deleted.IsZero() || p.current == nil || p.current.Started.IsZero() {
				continue
			}
			pods = append(pods, p)
			if p.current.Dead.IsZero() {
				objs = append(objs, cand{o: p.current})
			}
			for _, c := range p.slots {
				if c.Dead.IsZero() && !c.Started.IsZero() {
					var link *Link
					for _, l := range p.Links {
						if l.Container == c {
							link = l
						}
					}
					objs = append(objs, cand{o: c, link: link})
				}
			}
		}
	})
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sbs, err := d.rt.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	ctrs, err := d.rt.ListContainers(cctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return
	}
	state := map[string]string{}
	for _, s := range sbs.Items {
		state[s.Id] = s.State.String()
	}
	for _, c := range ctrs.Containers {
		state[c.Id] = c.State.String()
	}
	type finding struct {
		key, what string
		pod       *Pod
		check     func() bool // still live: judge it
	}
	var found []finding
	for _, c := range objs {
		o := c.o
		want := runtimeapi.PodSandboxState_SANDBOX_READY.String()
		if o.Kind == KindContainer {
			want = runtimeapi.ContainerState_CONTAINER_RUNNING.String()
		}
		live := func() bool { return o.Dead.IsZero() }
		if got, ok := state[o.ID]; !ok || got != want {
			if !ok {
				got = "not listed"
			}
			found = append(found, finding{"obj/" + o.ID, fmt.Sprintf("%s is %s", o.describe(), got), o.Pod, live})
		}
		if c.link != nil && !exists(c.link.Path) {
			found = append(found, finding{"link/" + c.link.Path, "log link " + c.link.Path + " of " + o.describe() + " is gone", o.Pod, live})
		}
	}
	for _, p := range pods {
		live := func() bool { return p.Deleted.IsZero() }
		for _, path := range append([]string{p.PodDir, p.LogDir}, p.Cgroups...) {
			if !exists(path) {
				found = append(found, finding{"path/" + path, fmt.Sprintf("%s of live pod %s/%s is gone", path, p.NS, p.Name), p, live})
			}
		}
	}
	hurt := map[string]bool{}
	d.truth.Update(func() {
		for _, f := range found {
			if f.check() {
				hurt[f.key] = true
			}
		}
	})
	now := time.Now()
	for _, f := range found {
		if hurt[f.key] {
			d.truth.SawLost(f.key, f.what+" (probe at "+stamp(start)+")", f.pod, now)
		}
	}
	d.truth.SawFine(hurt)
}

// LivePods is how many pods are live.
func (d *Driver) LivePods() int {
	n := 0
	d.truth.Update(func() {
		for _, p := range d.truth.podList {
			if p.Deleted.IsZero() {
				n++
			}
		}
	})
	return n
}
