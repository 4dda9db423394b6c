package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// Config of one soak.
type Config struct {
	Seed     uint64
	Duration time.Duration // the chaos phase: pods, leaks and faults
	// Name makes the soak's paths: lab /tmp/<Name>-soak (cgroup root
	// /<Name>-soak), work dir /tmp/<Name>-soak-run (kept: the plugin's log,
	// the schedule, summary.txt and summary.json).
	Name     string
	Binary   string // a plugin binary to use; "" builds ./cmd/nri-housekeeper
	LogLevel string // the plugin's log.level; "" is info
	Logf     func(format string, args ...any)
}

// The plugin's settings in the soak: short, so that leaks are due within
// seconds and a 2-minute smoke sees many passes.
const (
	Period      = 2 * time.Second
	Grace       = 5 * time.Second
	SampleEvery = 10 * time.Second
	// reclaimSlack is added to the longest the settle waits, past every
	// reclaim bound, before it calls what is left missing.
	reclaimSlack = Period + 2*time.Second
	maxSettle    = 6 * time.Minute
)

// Flatness tolerances: the median of the last third of the judged run's
// samples may exceed that of its first third by this much.
const (
	rssTolFactor = 1.25
	rssTolAbs    = 4 << 20
	goTolFactor  = 1.20
	goTolAbs     = 4
	minSamples   = 6
)

// Paths of a soak.
func labDir(name string) string  { return "/tmp/" + name + "-soak" }
func WorkDir(name string) string { return labDir(name) + "-run" }

func pluginConfig(l *lab.Lab, kubeletRoot, linksDir, addr, logFile, level string) string {
	return fmt.Sprintf(`# nri-housekeeper chaos soak (test/soak): short period and grace; the
# budget is raised far above the leak rate (the soak checks safety under
# faults, the budget has its own tests); orphans are only reported.
[housekeeping]
period = %q
startup_delay = "0s"
leak_grace = %q
state_file = %q

[nri]
socket = %q

[runtime]
endpoint = "unix://%s"

[pods]
kubelet_root = %q

[orphans]
action = "report"

[budget]
max_per_pass = 10
max_fraction = 1.0
min_per_pass = 10
max_per_hour = 100000

[logs]
pod_logs_dir = %q
container_logs_dir = %q

[cgroups]
enabled = true
driver = "cgroupfs"
mountpoint = "/sys/fs/cgroup"
root = %q

[pod_dirs]
remove_orphaned = true

# The network's objects wait as long as the rest (the default, 2m, is far
# above this leak_grace, and the judge's bound is leak_grace + 2 periods).
[network]
min_age = %q

[metrics]
address = %q

[log]
level = %q
target = "file"
file = %q
`, Period, Grace, filepath.Join(filepath.Dir(logFile), "state.json"), l.NRISocket, l.CRISocket, kubeletRoot, l.LogRoot, linksDir,
		strings.TrimPrefix(l.CgroupRoot, "/"), Grace.String(), addr, level, logFile)
}

// hierarchies are the machine's cgroup mounts (v1 controllers and cgroup2).
func hierarchies() []string {
	var out []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // cpu -> cpu,cpuacct aliases
		}
		if exists(filepath.Join(p, "cgroup.procs")) {
			out = append(out, p)
		}
	}
	return out
}

// Run runs a soak and returns its summary; err is set when the soak could
// not run at all (the summary then says how far it got).
func Run(ctx context.Context, cfg Config) (s Summary, err error) {
	began := time.Now()
	logf := cfg.Logf
	s = Summary{Format: SummaryFormat, Seed: cfg.Seed, Duration: cfg.Duration, Leaks: map[string]int{}}
	defer func() {
		if err != nil {
			s.Verdict = "FAIL (did not run to its end)"
			s.Failures = append(s.Failures, err.Error())
		}
	}()
	level := cmpOr(cfg.LogLevel, "info")
	s.Config = fmt.Sprintf("period %s, leak_grace %s, startup_delay 0s, cgroups on, pod_dirs.remove_orphaned on, orphans report, network on (min_age = leak_grace), budget 10/pass 100000/h, log.level %s",
		Period, Grace, level)

	if err := lab.Install(ctx); err != nil {
		return s, fmt.Errorf("lab install: %w", err)
	}
	work := WorkDir(cfg.Name)
	if err := os.RemoveAll(work); err != nil {
		return s, err
	}
	kubeletRoot, linksDir := filepath.Join(work, "kubelet"), filepath.Join(work, "containers")
	for _, d := range []string{filepath.Join(kubeletRoot, "pods"), linksDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return s, err
		}
	}
	exe := filepath.Join(work, "nri-housekeeper")
	if cfg.Binary != "" {
		if out, err := exec.Command("cp", cfg.Binary, exe).CombinedOutput(); err != nil {
			return s, fmt.Errorf("copying %s: %v: %s", cfg.Binary, err, out)
		}
		s.Build = "NRIHK_E2E_BINARY=" + cfg.Binary
	} else {
		s.Build = "go build ./cmd/nri-housekeeper of the working tree"
		if desc, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
			s.Build += " at " + strings.TrimSpace(string(desc))
		}
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			s.Build += fmt.Sprintf(" (%d modified files)", strings.Count(string(st), "\n"))
		}
		logf("building the plugin (./cmd/nri-housekeeper)")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, "github.com/nri-housekeeper/nri-housekeeper/cmd/nri-housekeeper")
		if out, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("go build: %v: %s", err, out)
		}
	}

	logf("lab %s (cgroup root /%s-soak)", labDir(cfg.Name), cfg.Name)
	l, err := lab.Start(ctx, lab.Options{Dir: labDir(cfg.Name), CgroupRoot: "/" + cfg.Name + "-soak"})
	if err != nil {
		return s, fmt.Errorf("lab start: %w", err)
	}
	var (
		disk     *LogDisk
		plugin   *PluginProc
		inj      *Injector
		driver   *Driver
		downOnce sync.Once
		downErr  error
	)
	teardown := func() {
		downOnce.Do(func() {
			if inj != nil {
				inj.Cleanup()
			}
			if plugin != nil {
				plugin.Stop()
			}
			if driver != nil {
				if n := driver.KillLeakProcesses(); n > 0 {
					logf("killed %d processes left in leaked pod cgroups", n)
				}
			}
			if disk != nil {
				if err := disk.Unmount(); err != nil {
					logf("%v", err)
				}
			}
			downErr = l.Down(context.Background())
		})
	}
	defer teardown()

	nriTimeout, err := NRIRequestTimeout(l)
	if err != nil {
		return s, err
	}
	plan := NewPlan(cfg.Seed, cfg.Duration, nriTimeout)
	s.Schedule = plan.Fingerprint()
	s.Planned = PlanCounts{Pods: len(plan.Pods), Ops: len(plan.Ops), Faults: len(plan.Faults)}
	if err := os.WriteFile(filepath.Join(work, "schedule.txt"), []byte(plan.String()), 0o644); err != nil {
		return s, err
	}
	logf("schedule %s: %d pods, %d stand-in steps, %d faults (NRI request timeout %s); %s/schedule.txt",
		s.Schedule, len(plan.Pods), len(plan.Ops), len(plan.Faults), nriTimeout, work)

	if disk, err = MountLogDisk(l.LogRoot, filepath.Join(work, "logfs.img")); err != nil {
		return s, fmt.Errorf("pod log file system: %w", err)
	}
	s.LogFS = disk.Kind

	addr, err := FreeAddr()
	if err != nil {
		return s, err
	}
	logFile, conf := filepath.Join(work, "plugin.log"), filepath.Join(work, "config.toml")
	if err := os.WriteFile(conf, []byte(pluginConfig(l, kubeletRoot, linksDir, addr, logFile, level)), 0o644); err != nil {
		return s, err
	}
	if out, err := exec.Command(exe, "config", "check", conf).CombinedOutput(); err != nil {
		return s, fmt.Errorf("config check: %v: %s", err, out)
	}
	plugin = &PluginProc{Exe: exe, Config: conf, Stderr: filepath.Join(work, "plugin.stderr"), Addr: addr, Logf: logf}
	if err := plugin.Start(); err != nil {
		return s, err
	}
	if err := plugin.WaitReady(ctx, 30*time.Second); err != nil {
		return s, fmt.Errorf("the plugin did not get ready: %w", err)
	}

	truth := NewTruth()
	driver = &Driver{lab: l, rt: l.Runtime(), truth: truth, plan: &plan, kubeletRoot: kubeletRoot, linksDir: linksDir,
		hierarchies: hierarchies(), cgroupRel: strings.TrimPrefix(l.CgroupRoot, "/"), period: Period, logf: logf,
		pods: map[int]*Pod{}, procs: map[int]*exec.Cmd{}}
	inj = &Injector{Lab: l, Plugin: plugin, Disk: disk, Logf: logf}

	// The chaos phase.
	start := time.Now()
	logf("chaos for %s: log %s", cfg.Duration, logFile)
	var samplesMu sync.Mutex
	var samples []Sample
	samplerCtx, stopSampler := context.WithCancel(ctx)
	var samplerWG sync.WaitGroup
	samplerWG.Go(func() {
		tick := time.NewTicker(SampleEvery)
		defer tick.Stop()
		status := time.Now()
		for {
			select {
			case <-samplerCtx.Done():
				return
			case <-tick.C:
			}
			if smp, ok := plugin.Scrape(); ok {
				samplesMu.Lock()
				samples = append(samples, smp)
				samplesMu.Unlock()
			}
			driver.Probe(samplerCtx)
			if time.Since(status) >= time.Minute {
				status = time.Now()
				logf("status at %s: %d live pods, %d faults injected, plugin run %d, %d lost live objects",
					time.Since(start).Round(time.Second), driver.LivePods(), len(inj.Records()), plugin.Run(), len(truth.LostLive()))
			}
		}
	})
	// When each sandbox and container was last listed, from a CRI listing
	// every second: a step of a plugin run killed before it logged the
	// step leaves an object gone with no action logged, and only this
	// says when it went (the settle's own look comes later).
	listed := &listedTimes{last: map[string]time.Time{}}
	samplerWG.Go(func() { listed.poll(samplerCtx, l) })
	var wg sync.WaitGroup
	wg.Go(func() { driver.Run(ctx, start) })
	wg.Go(func() { inj.Run(ctx, start, plan.Faults) })
	wg.Wait()
	driver.Drain(ctx)
	if ctx.Err() != nil {
		stopSampler()
		samplerWG.Wait()
		return s, ctx.Err()
	}

	// Settle: no more faults nor leaks; every leak must go within its bound.
	records := inj.Records()
	var lastFault time.Time
	for _, r := range records {
		if r.End.After(lastFault) {
			lastFault = r.End
		}
	}
	var lastLeak time.Time
	for _, p := range truth.Pods() {
		if p.LeakMade.After(lastLeak) {
			lastLeak = p.LeakMade
		}
	}
	settleFrom := lastFault
	if lastLeak.After(settleFrom) {
		settleFrom = lastLeak
	}
	leaks := leakObjects(truth)
	listed.markGone(leaks)
	logf("chaos done at %s; settling: %d leaked objects to be reclaimed (last fault ended %s, last leak made %s)",
		time.Since(start).Round(time.Second), len(leaks), stamp(lastFault), stamp(lastLeak))
	hard := settleFrom.Add(3*(Grace+Period) + Period + reclaimSlack + 10*time.Second)
	var netLeft []string
	var netChecked time.Time
	for {
		now := time.Now()
		allGone := observeGone(ctx, l, leaks, now)
		if now.Sub(netChecked) >= 2*time.Second {
			netLeft, netChecked = networkLeftovers(ctx, l, truth), now
		}
		if allGone && len(netLeft) == 0 && now.After(settleFrom.Add(Grace+2*Period)) {
			break
		}
		if now.After(hard) {
			// Objects the plugin backs off from get until their retry.
			if ext := backoffUntil(logFile, truth, leaks); ext.After(hard) && ext.Before(settleFrom.Add(maxSettle)) {
				logf("settle: waiting until %s for objects the plugin backs off from", stamp(ext))
				hard = ext
				continue
			}
			break
		}
		if !sleepUntil(ctx, now.Add(500*time.Millisecond)) {
			break
		}
	}
	netLeft = networkLeftovers(ctx, l, truth)
	// Live objects must still be whole: two probes in a row.
	driver.Probe(ctx)
	sleepUntil(ctx, time.Now().Add(2*time.Second))
	driver.Probe(ctx)
	stopSampler()
	samplerWG.Wait()
	if smp, ok := plugin.Scrape(); ok {
		samples = append(samples, smp)
	}
	s.Plugin.Healthz, _ = plugin.Get("/healthz")
	plugin.Stop()
	s.Total = time.Since(began)

	// The plugin's log against the ground truth.
	f, err := os.Open(logFile)
	if err != nil {
		return s, err
	}
	entries, other, err := ParseLog(f)
	f.Close()
	if err != nil {
		return s, fmt.Errorf("reading %s: %w", logFile, err)
	}
	check := CheckLog(entries, other, truth)
	evaluate(&s, plan, truth, check, leaks, records, lastFault, netLeft, driver, plugin, samples)
	// How many pauses ended in an NRI reconnect of the plugin: containerd
	// drops a plugin whose NRI call outlives the request timeout.
	reconnects := map[FaultKind]int{}
	for _, r := range records {
		if r.Kind != FaultContainerdPause && r.Kind != FaultPluginPause || r.Err != nil {
			continue
		}
		for _, e := range entries {
			if e.Msg == "NRI connection lost, reconnecting" && !e.T.Before(r.Start) && e.T.Before(r.End.Add(3*time.Second)) {
				reconnects[r.Kind]++
				break
			}
		}
	}
	for i, f := range s.Faults {
		if k := FaultKind(f.Kind); k == FaultContainerdPause || k == FaultPluginPause {
			s.Faults[i].Detail += fmt.Sprintf("; %d ended in an NRI reconnect", reconnects[k])
		}
	}
	if b, err := os.ReadFile(plugin.Stderr); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "panic") || strings.Contains(line, "fatal error") {
				s.Plugin.Panics++
				s.Failures = append(s.Failures, "plugin stderr: "+line)
			}
		}
	}
	teardown()
	if downErr != nil {
		s.Failures = append(s.Failures, "lab down: "+downErr.Error())
	}
	s.Verdict = "PASS"
	if len(s.Failures) > 0 {
		s.Verdict = "FAIL"
	}
	_ = os.WriteFile(filepath.Join(work, "summary.txt"), []byte(s.String()), 0o644)
	_ = os.WriteFile(filepath.Join(work, "summary.json"), s.JSON(), 0o644)
	return s, nil
}

// leakObj is one leaked object the plugin must reclaim.
type leakObj struct {
	key, what string
	pod       *Pod
	// stage, for the record: 1, the leak's first objects; 2, what goes
	// after them (the pod log dir and cgroup of a 107730 leak, the cgroup
	// of a pod-dir leak); 3, what goes after those (the links into a 107730
	// leak's log dir). Every stage has the same bound: the plugin takes a
	// leak's stages in one pass.
	stage  int
	id     string
	paths  []string // gone when none of them exists
	goneAt time.Time
	// podDir: an object of a pod-dir leak, which the plugin need not
	// reclaim when it did not see the pod torn down (decided from its log).
	podDir bool
}

// leakObjects lists every object of every leak, with its stage.
func leakObjects(tr *Truth) []*leakObj {
	var out []*leakObj
	for _, p := range tr.Pods() {
		if p.Leak == "" || p.Leak == LeakNone || p.LeakMade.IsZero() {
			continue
		}
		name := p.NS + "/" + p.Name
		add := func(o *leakObj) { o.pod = p; o.podDir = p.Leak == LeakPodDir; out = append(out, o) }
		logDir := func(stage int) {
			add(&leakObj{key: ReclaimKey("logdir", p.LogDir), what: "pod log dir of " + name, stage: stage, paths: []string{p.LogDir}})
		}
		cgroup := func(stage int) {
			if len(p.Cgroups) > 0 {
				add(&leakObj{key: ReclaimKey("cgroup", p.UID), what: "pod cgroup of " + name, stage: stage, paths: p.Cgroups})
			}
		}
		links := func(stage int) {
			for _, l := range p.Links {
				if l.Removed.IsZero() {
					add(&leakObj{key: ReclaimKey("link", l.Path), what: "log link of " + l.Container.describe(), stage: stage, paths: []string{l.Path}})
				}
			}
		}
		switch p.Leak {
		case Leak107730:
			for _, o := range append(append([]*Object(nil), p.Sandboxes...), p.Containers...) {
				if o.Removed.IsZero() {
					add(&leakObj{key: ReclaimKey(string(o.Kind), o.ID), what: o.describe(), stage: 1, id: o.ID})
				}
			}
			logDir(2)
			cgroup(2)
			links(3)
		case LeakLogDir:
			logDir(1)
		case LeakLinks:
			links(1)
		case LeakCgroup:
			cgroup(1)
		case LeakPodDir:
			add(&leakObj{key: ReclaimKey("poddir", p.UID), what: "pod dir of " + name, stage: 1, paths: []string{p.PodDir}})
			cgroup(2)
		}
	}
	return out
}

// listedTimes is when each sandbox and container was last seen in a
// complete CRI listing, and when the complete listings were taken.
type listedTimes struct {
	mu    sync.Mutex
	last  map[string]time.Time
	polls []time.Time
}

// poll lists every second until ctx ends; a listing that fails (containerd
// paused or restarting) says nothing.
func (t *listedTimes) poll(ctx context.Context, l *lab.Lab) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		at := time.Now()
		sbs, err1 := l.Runtime().ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{})
		ctrs, err2 := l.Runtime().ListContainers(lctx, &runtimeapi.ListContainersRequest{})
		cancel()
		if err1 != nil || err2 != nil {
			continue
		}
		t.mu.Lock()
		for _, sb := range sbs.Items {
			t.last[sb.Id] = at
		}
		for _, c := range ctrs.Containers {
			t.last[c.Id] = at
		}
		t.polls = append(t.polls, at)
		t.mu.Unlock()
	}
}

// markGone sets the time a listed object was first missing from a
// listing after it was last seen: an upper bound on when it went.
func (t *listedTimes) markGone(leaks []*leakObj) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range leaks {
		last, seen := t.last[o.id]
		if o.id == "" || !seen {
			continue
		}
		if i, _ := slices.BinarySearchFunc(t.polls, last, func(p, at time.Time) int { return p.Compare(at) }); i+1 < len(t.polls) {
			o.goneAt = t.polls[i+1]
		}
	}
}

// observeGone marks the objects found gone now; it reports whether all are.
func observeGone(ctx context.Context, l *lab.Lab, leaks []*leakObj, now time.Time) bool {
	listed := map[string]bool{}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sbs, err1 := l.Runtime().ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	ctrs, err2 := l.Runtime().ListContainers(cctx, &runtimeapi.ListContainersRequest{})
	listOK := err1 == nil && err2 == nil
	if listOK {
		for _, s := range sbs.Items {
			listed[s.Id] = true
		}
		for _, c := range ctrs.Containers {
			listed[c.Id] = true
		}
	}
	all := true
	for _, o := range leaks {
		if !o.goneAt.IsZero() {
			continue
		}
		gone := true
		if o.id != "" {
			gone = listOK && !listed[o.id]
		}
		for _, p := range o.paths {
			if exists(p) {
				gone = false
			}
		}
		if gone {
			o.goneAt = now
		} else {
			all = false
		}
	}
	return all
}

// backoffUntil reads the plugin's log for the retry times of objects it
// failed to reclaim: the latest retry (plus a period) among those still
// there.
func backoffUntil(logFile string, tr *Truth, leaks []*leakObj) time.Time {
	f, err := os.Open(logFile)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	entries, other, err := ParseLog(f)
	if err != nil {
		return time.Time{}
	}
	c := CheckLog(entries, other, tr)
	var until time.Time
	for _, o := range leaks {
		if at, ok := c.RetryAt[o.key]; ok && o.goneAt.IsZero() && at.Add(Period+time.Second).After(until) {
			until = at.Add(Period + time.Second)
		}
	}
	return until
}

// networkLeftovers lists the lab network's objects whose owner containerd
// no longer lists: libcni cache entries and host-local reservations of
// sandboxes that are gone, and netns mounts no listed sandbox names.
func networkLeftovers(ctx context.Context, l *lab.Lab, tr *Truth) []string {
	cni := l.CNI()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := l.Runtime().ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return []string{"cannot list sandboxes: " + err.Error()}
	}
	listed := map[string]bool{}
	netns := map[string]bool{}
	for _, s := range r.Items {
		listed[s.Id] = true
		// A listed sandbox, in any state, owns the netns its metadata names.
		if o := tr.Object(s.Id); o == nil || o.Pod.Network {
			if n, err := lab.SandboxNetwork(cctx, l.Runtime(), s.Id); err == nil && n.NetnsPath != "" {
				netns[filepath.Base(n.NetnsPath)] = true
			}
		}
	}
	var out []string
	results, _ := os.ReadDir(cni.ResultsDir)
	for _, e := range results {
		name := e.Name()
		var id string
		switch {
		case strings.HasPrefix(name, cni.Network+"-"):
			id = strings.TrimPrefix(name, cni.Network+"-")
		case strings.HasPrefix(name, "cni-loopback-"):
			id = strings.TrimPrefix(name, "cni-loopback-")
			if b, err := os.ReadFile(filepath.Join(cni.ResultsDir, name)); err != nil || !strings.Contains(string(b), l.Dir+"/") {
				continue // another lab's
			}
		default:
			continue
		}
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			id = id[:i]
		}
		if !listed[id] {
			out = append(out, "CNI cache entry "+filepath.Join(cni.ResultsDir, name))
		}
	}
	reservations, _ := os.ReadDir(cni.IPAMDir)
	for _, e := range reservations {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(cni.IPAMDir, e.Name()))
		if err != nil {
			continue
		}
		if id := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]); !listed[id] {
			out = append(out, fmt.Sprintf("IP reservation %s (owner %s)", filepath.Join(cni.IPAMDir, e.Name()), short(id)))
		}
	}
	mounts, _ := os.ReadDir(cni.NetnsDir)
	for _, e := range mounts {
		if !netns[e.Name()] {
			out = append(out, "netns "+filepath.Join(cni.NetnsDir, e.Name()))
		}
	}
	return out
}

// evaluate fills the summary from everything the soak saw.
func evaluate(s *Summary, plan Plan, tr *Truth, c *Check, leaks []*leakObj, records []FaultRecord, lastFault time.Time,
	netLeft []string, d *Driver, plugin *PluginProc, samples []Sample) {
	fail := func(format string, args ...any) { s.Failures = append(s.Failures, fmt.Sprintf(format, args...)) }

	// Pods and leaks.
	s.Pods = d.counts
	s.MaxLag = d.maxLag
	made := map[LeakKind]int{}
	for _, p := range tr.Pods() {
		if p.Deleted.IsZero() {
			s.Pods.LiveAtEnd++
		}
		if p.Leak != "" && p.Leak != LeakNone {
			s.Leaks[string(p.Leak)]++
			if !p.LeakMade.IsZero() {
				made[p.Leak]++
			}
		}
	}
	// Every kind is planned (Plan.leakEveryKind). One whose planned pods
	// all ran, yet left no leak, is the stand-in's failure; one whose pods
	// a fault kept from running (a create in a full disk is given up) is
	// said.
	plannedKind := map[int]LeakKind{} // by pod index
	for _, o := range plan.Ops {
		if o.Kind == OpDelete && o.Leak != LeakNone {
			plannedKind[o.Pod] = o.Leak
		}
	}
	for _, k := range LeakKinds {
		if made[k] > 0 {
			continue
		}
		planned, givenUp := 0, 0
		for _, p := range tr.Pods() {
			if plannedKind[p.Index] == k {
				planned++
				if p.Abandoned || p.Deleted.IsZero() {
					givenUp++
				}
			}
		}
		switch {
		case planned > givenUp:
			fail("leaks: no %s leak was made, though %d pod(s) planned with one ran: its reclaim went untested", k, planned-givenUp)
		default:
			s.StandInProblems = append(s.StandInProblems, fmt.Sprintf("no %s leak was made: %d pod(s) planned with one, each given up at its creation (a fault) or never deleted", k, planned))
		}
	}

	// Faults.
	plannedFaults, _ := plan.Counts()
	done := map[FaultKind]int{}
	pauseMin, pauseMax := map[FaultKind]time.Duration{}, map[FaultKind]time.Duration{}
	var restartMax time.Duration
	for _, r := range records {
		if r.Err != nil {
			fail("fault %s at %s: %v", r.Kind, stamp(r.Start), r.Err)
			continue
		}
		done[r.Kind]++
		switch r.Kind {
		case FaultContainerdPause, FaultPluginPause:
			if pauseMin[r.Kind] == 0 || r.Param < pauseMin[r.Kind] {
				pauseMin[r.Kind] = r.Param
			}
			pauseMax[r.Kind] = max(pauseMax[r.Kind], r.Param)
		case FaultContainerdKill:
			restartMax = max(restartMax, r.End.Sub(r.Start)-r.Param)
		}
	}
	for _, k := range FaultKinds {
		fc := FaultCount{Kind: string(k), Planned: plannedFaults[k], Done: done[k]}
		switch k {
		case FaultContainerdKill:
			fc.Detail = fmt.Sprintf("restart took up to %s", restartMax.Round(10*time.Millisecond))
		case FaultContainerdPause, FaultPluginPause:
			fc.Detail = fmt.Sprintf("SIGSTOP %s-%s, NRI request timeout %s", pauseMin[k].Round(100*time.Millisecond), pauseMax[k].Round(100*time.Millisecond), plan.NRITimeout)
		case FaultDiskFull:
			fc.Detail = s.LogFS
		}
		s.Faults = append(s.Faults, fc)
		if fc.Done < fc.Planned {
			fail("faults: %d of %d planned %s injected", fc.Done, fc.Planned, k)
		}
	}
	sortFaultCounts(s.Faults)

	// The plugin's actions.
	s.Actions = c.SortedActions()
	for _, v := range c.FalseEvictions {
		s.FalseEvictions = append(s.FalseEvictions, v.String())
	}
	for _, v := range c.AbortedOnLive {
		s.AbortedOnLive = append(s.AbortedOnLive, v.String())
	}
	for _, v := range c.Unknown {
		s.Unknown = append(s.Unknown, v.String())
	}
	for _, l := range tr.LostLive() {
		s.LostLive = append(s.LostLive, fmt.Sprintf("%s (first seen %s)", l.What, stamp(l.First)))
	}
	s.OrphanReports, s.OrphanReportsOnLive = c.OrphanReports, c.OrphanReportsOnLive
	if s.OrphanReportsOnLive > 0 {
		fail("%d orphaned-live-pod report(s) name a live pod", s.OrphanReportsOnLive)
	}
	s.StandInProblems = tr.Failures()
	if n := len(s.FalseEvictions); n > 0 {
		fail("%d false eviction(s): actions on objects that were live", n)
	}
	// An unknown object is informational, but for a network step or an
	// action kind the checker does not know: those could have hit a live
	// object unseen (a netns removal names its netns only by path).
	for _, u := range c.UnjudgedFailures() {
		fail("%s", u)
	}
	if n := len(s.LostLive); n > 0 {
		fail("%d live object(s) lost", n)
	}
	if n := len(s.StandInProblems); n > 0 {
		fail("the stand-in had %d problem(s) of its own", n)
	}

	// Reclaim.
	starts := plugin.Starts()
	r := &s.Reclaim
	r.LastFault = lastFault
	r.Bound = "leak_grace + 2 periods after max(last fault, leak made), the issue's bound, whatever the object's stage; " +
		"an object whose step failed and was retried: its logged retry_at + period (counted apart)"
	for _, o := range leaks {
		from := maxTime(lastFault, o.pod.LeakMade)
		bound := from.Add(Grace + 2*Period)
		var retryBound time.Time
		if at, ok := c.RetryAt[o.key]; ok {
			retryBound = at.Add(Period + time.Second)
		}
		at, logged := c.Reclaimed[o.key]
		if !logged {
			at = o.goneAt
		}
		if at.IsZero() {
			if o.podDir && !sawTornDown(c, o.pod, starts) {
				f, disturbed := faultDuringTeardown(records, o.pod)
				if !disturbed {
					// No fault kept the plugin from seeing it: the
					// plugin missed a teardown it was there to see.
					r.Objects++
					r.Missing++
					r.Details = append(r.Details, fmt.Sprintf("MISSING %s: not seen torn down (%s-%s) though no fault came within %s of the teardown (runs that logged it Removed: %v)",
						o.what, stamp(o.pod.TeardownFrom), stamp(o.pod.TeardownUntil), faultShadow, c.Removed[o.pod.UID]))
					continue
				}
				r.ByDesign++
				r.Details = append(r.Details, fmt.Sprintf("BY DESIGN %s (torn down %s-%s during fault %s %s-%s; no plugin run that started before it logged it Removed with torn_down=true: runs that did: %v)",
					o.what, stamp(o.pod.TeardownFrom), stamp(o.pod.TeardownUntil), f.Kind, stamp(f.Start), stamp(f.End), c.Removed[o.pod.UID]))
				continue
			}
			r.Objects++
			r.Missing++
			r.Details = append(r.Details, fmt.Sprintf("MISSING %s (%s leak made %s, stage %d, bound %s)", o.what, o.pod.Leak, stamp(o.pod.LeakMade), o.stage, stamp(bound)))
			continue
		}
		r.Objects++
		r.Reclaimed++
		how := "logged"
		if !logged {
			how = "seen gone, no action logged"
		}
		if lat := at.Sub(from); lat > r.Worst {
			r.Worst, r.WorstObject = lat, fmt.Sprintf("%s, %s leak, stage %d, %s", o.what, o.pod.Leak, o.stage, how)
		}
		switch {
		case !at.After(bound):
		case !retryBound.IsZero() && !at.After(retryBound):
			r.AfterRetry++
			r.Details = append(r.Details, fmt.Sprintf("AFTER A RETRY %s (%s leak made %s, stage %d): reclaimed %s (%s), bound %s, its step failed and was retried at %s",
				o.what, o.pod.Leak, stamp(o.pod.LeakMade), o.stage, stamp(at), how, stamp(bound), stamp(retryBound.Add(-Period-time.Second))))
		default:
			r.Late++
			r.Details = append(r.Details, fmt.Sprintf("LATE %s (%s leak made %s, stage %d): reclaimed %s (%s), bound %s",
				o.what, o.pod.Leak, stamp(o.pod.LeakMade), o.stage, stamp(at), how, stamp(bound)))
		}
	}
	if r.WorstObject == "" && r.Reclaimed > 0 {
		r.WorstObject = "every leaked object was gone by the end of the last fault (or by when its leak was made)"
	}
	if r.Missing > 0 || r.Late > 0 {
		fail("reclaim: %d leaked object(s) missing, %d late", r.Missing, r.Late)
	}
	s.Network = netLeft
	if len(netLeft) > 0 {
		fail("%d network object(s) of gone sandboxes left", len(netLeft))
	}

	// The plugin process.
	pl := &s.Plugin
	pl.Runs = len(starts)
	pl.Kills = plugin.Kills()
	unexpected := plugin.Unexpected()
	pl.UnexpectedExits = len(unexpected)
	for _, u := range unexpected {
		fail("%s", u)
	}
	pl.Panics = len(c.Panics)
	for _, p := range c.Panics {
		fail("panic in the plugin's log: %s", p)
	}
	pl.LogLines = c.Entries
	pl.ErrorLines = c.Levels["error"]
	pl.Samples = len(samples)
	judgeSamples(pl, samples)
	if strings.HasPrefix(pl.Flat, "GROWING") {
		fail("plugin %s", pl.Flat)
	}
	if pl.Healthz != 200 {
		fail("/healthz is %d at the end", pl.Healthz)
	}
}

// faultDuringTeardown returns a fault that may have kept the plugin from
// seeing p torn down: one from faultShadow before its sandbox's stop to a
// period and faultShadow after its removal (the pass that logs the pod
// Removed, and writes its torn-down mark, comes after the removal), or as
// near the stop of an earlier sandbox of the pod (a sandbox restart): a
// sandbox whose stop and removal the plugin both missed went by absence,
// which is no evidence of a teardown.
func faultDuringTeardown(records []FaultRecord, p *Pod) (FaultRecord, bool) {
	type window struct{ from, until time.Time }
	until := p.TeardownUntil
	if until.IsZero() {
		until = time.Now()
	}
	windows := []window{{p.TeardownFrom, until}}
	for _, sb := range p.Sandboxes {
		if !sb.Dead.IsZero() {
			windows = append(windows, window{sb.Dead, sb.Dead})
		}
	}
	for _, f := range records {
		end := f.End
		if end.IsZero() {
			end = time.Now()
		}
		for _, w := range windows {
			if !f.Start.After(w.until.Add(Period+faultShadow)) && !end.Before(w.from.Add(-faultShadow)) {
				return f, true
			}
		}
	}
	return FaultRecord{}, false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sawTornDown: whether a plugin run saw the pod torn down (logged it
// Removed) and was running before its teardown began: only then must the
// plugin reclaim the orphaned pod dir. It does not take a pod dir whose pod
// it never saw go for an orphan (a pod kubelet has not started yet looks
// the same); the pass that logs a pod Removed has written its torn-down
// mark to the state file first, so every later run has it too. starts[i]
// is run i+1's start.
func sawTornDown(c *Check, p *Pod, starts []time.Time) bool {
	for _, run := range c.Removed[p.UID] {
		if run >= 1 && run <= len(starts) && starts[run-1].Before(p.TeardownFrom) {
			return true
		}
	}
	return false
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// judgeSamples fills the memory, goroutine, CPU and pass figures. Flatness
// is judged on the plugin run with the most samples (plugin kills are all
// in the first 60% of the fault window, so that is normally the last run):
// the median of the last third of its samples may exceed the median of its
// first third by rssTolFactor × + rssTolAbs (RSS) and goTolFactor × +
// goTolAbs (goroutines).
func judgeSamples(pl *PluginSummary, samples []Sample) {
	pl.ByResult = map[string]int{}
	if len(samples) == 0 {
		pl.Flat = "not judged (no samples)"
		return
	}
	pl.RSSStart, pl.RSSEnd = samples[0].RSS/(1<<20), samples[len(samples)-1].RSS/(1<<20)
	pl.GoStart, pl.GoEnd = samples[0].Goroutines, samples[len(samples)-1].Goroutines
	byRun := map[int][]Sample{}
	var runs []int
	for _, smp := range samples {
		if _, ok := byRun[smp.Run]; !ok {
			runs = append(runs, smp.Run)
		}
		byRun[smp.Run] = append(byRun[smp.Run], smp)
	}
	var cpu, passes, passSum, passCount float64
	best := 0
	for _, run := range runs {
		ss := byRun[run]
		first, last := ss[0], ss[len(ss)-1]
		cpu += last.CPU - first.CPU
		passes += last.TotalPasses() - first.TotalPasses()
		passSum += last.PassSum - first.PassSum
		passCount += last.PassCount - first.PassCount
		for k, v := range last.Passes {
			pl.ByResult[k] += int(v)
		}
		if best == 0 || len(ss) >= len(byRun[best]) {
			best = run
		}
	}
	pl.CPUSeconds = cpu
	pl.Passes = int(passes)
	if passes > 0 {
		pl.CPUPerPass = time.Duration(cpu / passes * float64(time.Second))
	}
	if passCount > 0 {
		pl.MeanPass = time.Duration(passSum / passCount * float64(time.Second))
	}
	ss := byRun[best]
	span := ss[len(ss)-1].At.Sub(ss[0].At).Round(time.Second)
	pl.JudgedRun = fmt.Sprintf("run %d, %d samples over %s", best, len(ss), span)
	if len(ss) < minSamples {
		pl.Flat = fmt.Sprintf("not judged (the longest run has %d samples, fewer than %d)", len(ss), minSamples)
		return
	}
	k := len(ss) / 3
	var rss1, rss2, go1, go2 []float64
	for i, smp := range ss {
		if i < k {
			rss1, go1 = append(rss1, smp.RSS), append(go1, smp.Goroutines)
		}
		if i >= len(ss)-k {
			rss2, go2 = append(rss2, smp.RSS), append(go2, smp.Goroutines)
		}
	}
	pl.RSSFirstThird, pl.RSSLastThird = median(rss1)/(1<<20), median(rss2)/(1<<20)
	pl.GoFirstThird, pl.GoLastThird = median(go1), median(go2)
	var growing []string
	if median(rss2) > median(rss1)*rssTolFactor+rssTolAbs {
		growing = append(growing, fmt.Sprintf("RSS %.1f -> %.1f MiB", pl.RSSFirstThird, pl.RSSLastThird))
	}
	if median(go2) > median(go1)*goTolFactor+goTolAbs {
		growing = append(growing, fmt.Sprintf("goroutines %.0f -> %.0f", pl.GoFirstThird, pl.GoLastThird))
	}
	tol := fmt.Sprintf("tolerance: last third ≤ first third × %.2f + %d MiB (RSS), × %.2f + %d (goroutines)",
		rssTolFactor, rssTolAbs>>20, goTolFactor, goTolAbs)
	if len(growing) > 0 {
		pl.Flat = "GROWING: " + strings.Join(growing, ", ") + " (" + tol + ")"
	} else {
		pl.Flat = "flat (" + tol + ")"
	}
}
