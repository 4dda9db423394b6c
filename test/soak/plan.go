// Package soak is nri-housekeeper's chaos soak: a kubelet stand-in creates
// and deletes pods on the real containerd of the e2e lab (test/e2e/lab) at a
// steady rate and leaks them the ways kubelet does (kubernetes#107730 and
// friends), while faults are injected on a random schedule: containerd
// killed with SIGKILL and restarted, the plugin binary killed with SIGKILL and
// restarted, containerd paused with SIGSTOP for longer than its NRI request
// timeout, the pod log file system filled up, and (beyond the list)
// the plugin paused with SIGSTOP for longer than that timeout. An invariant checker reads
// every action the plugin logged and compares it with the stand-in's ground
// truth: no action may touch an object that was live at the time. At the end
// every leak must have been reclaimed, the plugin's memory and goroutines
// must be flat, nothing may have panicked and /healthz must be green.
//
// The schedule of pods, leaks and faults is a pure function of the seed and
// the duration (Plan), so a failing seed replays the same schedule as far as
// timing allows. See README.md for how to run it and for the summary format.
//
// The soak itself (TestSoak) has the build tag soak and needs root; the rest of
// the package (schedule, ground truth, log checker, summary) is unit-tested
// without a lab.
package soak

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// OpKind is what the kubelet stand-in does at one point of the schedule.
type OpKind string

const (
	OpCreate           OpKind = "create"            // admit a pod (pod dir), run its sandbox and containers
	OpDelete           OpKind = "delete"            // delete a pod: cleanly, or leaking (Op.Leak)
	OpRestartContainer OpKind = "restart-container" // a container of a live pod exits; a new attempt starts
	OpRestartSandbox   OpKind = "restart-sandbox"   // a live pod's sandbox dies; a new sandbox attempt with new containers
)

// LeakKind is how a deleted pod is left behind ("" or LeakNone: a clean delete).
type LeakKind string

const (
	LeakNone LeakKind = "none" // kubelet's clean delete: nothing left
	// Leak107730: the pod dir is removed while its containers are exited
	// and its sandbox NotReady, nothing of them removed: sandbox, containers,
	// pod log dir, container log links and pod cgroup left (kubernetes#107730).
	Leak107730 LeakKind = "107730"
	// LeakLogDir: a clean delete that leaves the pod log dir.
	LeakLogDir LeakKind = "log-dir"
	// LeakLinks: a clean delete that leaves the container log links (dangling).
	LeakLinks LeakKind = "links"
	// LeakCgroup: a clean delete that leaves the pod cgroup, with a process
	// in a container cgroup below it.
	LeakCgroup LeakKind = "cgroup"
	// LeakPodDir: the pod is torn down (sandbox stopped, and removed a few
	// periods later), its pod dir and pod cgroup left: an orphaned pod dir.
	LeakPodDir LeakKind = "pod-dir"
)

// LeakKinds lists the leak kinds, in the order summaries show them.
var LeakKinds = []LeakKind{Leak107730, LeakLogDir, LeakLinks, LeakCgroup, LeakPodDir}

// FaultKind is a fault the injector knows.
type FaultKind string

const (
	FaultContainerdKill  FaultKind = "containerd-kill"  // SIGKILL to containerd, restart after Param
	FaultPluginKill      FaultKind = "plugin-kill"      // SIGKILL to the plugin, restart after Param
	FaultContainerdPause FaultKind = "containerd-pause" // SIGSTOP to containerd for Param (> its NRI request timeout), SIGCONT
	FaultDiskFull        FaultKind = "disk-full"        // the pod log file system full for Param
	// FaultPluginPause: SIGSTOP to the plugin for Param (> the NRI request
	// timeout), SIGCONT. Not in issue #11's list: a containerd pause times
	// out only the NRI calls in flight when it is stopped, which a plugin
	// answering in microseconds almost never has; a plugin that does not
	// answer for longer than the timeout is what makes containerd drop it.
	FaultPluginPause FaultKind = "plugin-pause"
)

// FaultKinds lists the fault kinds, in the order summaries show them.
var FaultKinds = []FaultKind{FaultContainerdKill, FaultPluginKill, FaultContainerdPause, FaultDiskFull, FaultPluginPause}

// faultsPer30m is how many faults of each kind a 30-minute soak plans
// (scaled linearly with the duration, at least minFaults): issue #11 asks
// for at least 20 containerd and 10 plugin kills in 30 minutes.
var faultsPer30m = map[FaultKind]int{
	FaultContainerdKill:  24,
	FaultPluginKill:      12,
	FaultContainerdPause: 12,
	FaultDiskFull:        8,
	FaultPluginPause:     8,
}

var minFaults = map[FaultKind]int{
	FaultContainerdKill:  2,
	FaultPluginKill:      1,
	FaultContainerdPause: 1,
	FaultDiskFull:        1,
	FaultPluginPause:     1,
}

// Op is one step of the kubelet stand-in.
type Op struct {
	At   time.Duration // since the soak started
	Kind OpKind
	Pod  int // the pod's index in Plan.Pods

	Leak LeakKind // OpDelete
	Slot int      // OpRestartContainer: which of the pod's containers
}

// PlannedPod is a pod of the schedule.
type PlannedPod struct {
	Name, Namespace, UID string
	Containers           int  // 1 or 2
	Network              bool // its own netns on the lab's CNI network (else hostNetwork)
	Anchor               bool // lives from the start to the end
}

// Fault is one planned fault.
type Fault struct {
	At    time.Duration // since the soak started
	Kind  FaultKind
	Param time.Duration // down time (kills), pause length, or how long the disk stays full
}

// Plan is the whole schedule of a soak.
type Plan struct {
	Seed     uint64
	Duration time.Duration
	// NRITimeout is containerd's NRI plugin request timeout; pauses are
	// longer than it.
	NRITimeout time.Duration
	Pods       []PlannedPod
	Ops        []Op    // in time order
	Faults     []Fault // in time order
	// FaultsFrom, FaultsUntil bound the fault window; plugin kills all
	// fall before PluginKillsUntil, so that the plugin's last incarnation
	// runs long enough to judge its memory and goroutines.
	FaultsFrom, FaultsUntil, PluginKillsUntil time.Duration
}

// Schedule knobs.
const (
	anchors       = 3                       // pods that live the whole soak
	minChurn      = 4                       // churn pods kept at least
	maxChurn      = 12                      // ... and at most
	opGapMin      = 1500 * time.Millisecond // between two stand-in steps
	opGapSpread   = 2 * time.Second
	faultWarmup   = 15 * time.Second // no fault before
	faultCooldown = 10 * time.Second // nor in the last seconds of the duration
)

// NewPlan draws the schedule of a soak of duration d from seed. Pods and
// faults come from separate streams of the seed: the same seed gives the
// same pods, leaks and faults whatever the duration's effect on the other.
func NewPlan(seed uint64, d, nriTimeout time.Duration) Plan {
	p := Plan{Seed: seed, Duration: d, NRITimeout: nriTimeout}
	podRNG := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	faultRNG := rand.New(rand.NewPCG(seed, 0xbf58476d1ce4e5b9))
	p.planPods(podRNG)
	p.planFaults(faultRNG)
	p.leakEveryKind(podRNG)
	return p
}

func uuid(r *rand.Rand) string {
	var b [16]byte
	for i := range 2 {
		v := r.Uint64()
		for j := range 8 {
			b[8*i+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func (p *Plan) newPod(r *rand.Rand, anchor bool) int {
	pod := PlannedPod{Namespace: "soak", UID: uuid(r), Containers: 1 + r.IntN(2), Network: r.IntN(3) == 0, Anchor: anchor}
	if anchor {
		pod.Name = fmt.Sprintf("anchor-%d", len(p.Pods))
	} else {
		pod.Name = fmt.Sprintf("p-%04d", len(p.Pods))
	}
	p.Pods = append(p.Pods, pod)
	return len(p.Pods) - 1
}

// weighted picks an index by weight.
func weighted(r *rand.Rand, weights ...int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := r.IntN(total)
	for i, w := range weights {
		if n < w {
			return i
		}
		n -= w
	}
	return len(weights) - 1
}

func (p *Plan) planPods(r *rand.Rand) {
	var live []int // every pod alive in the plan, creation order
	var churn []int
	at := time.Duration(0)
	for range anchors {
		i := p.newPod(r, true)
		p.Ops = append(p.Ops, Op{At: at, Kind: OpCreate, Pod: i})
		live = append(live, i)
		at += 500 * time.Millisecond
	}
	leakWeights := []int{40, 30, 7, 8, 8, 7} // none, 107730, log-dir, links, cgroup, pod-dir
	leaks := append([]LeakKind{LeakNone}, LeakKinds...)
	for at = 3 * time.Second; at < p.Duration-2*time.Second; at += opGapMin + time.Duration(r.Int64N(int64(opGapSpread))) {
		kind := OpKind("")
		switch {
		case len(churn) < minChurn:
			kind = OpCreate
		case len(churn) > maxChurn:
			kind = OpDelete
		default:
			kind = []OpKind{OpCreate, OpDelete, OpRestartContainer, OpRestartSandbox}[weighted(r, 40, 40, 13, 7)]
		}
		switch kind {
		case OpCreate:
			i := p.newPod(r, false)
			live, churn = append(live, i), append(churn, i)
			p.Ops = append(p.Ops, Op{At: at, Kind: OpCreate, Pod: i})
		case OpDelete:
			k := r.IntN(len(churn))
			i := churn[k]
			churn = append(churn[:k], churn[k+1:]...)
			for j, v := range live {
				if v == i {
					live = append(live[:j], live[j+1:]...)
					break
				}
			}
			p.Ops = append(p.Ops, Op{At: at, Kind: OpDelete, Pod: i, Leak: leaks[weighted(r, leakWeights...)]})
		case OpRestartContainer:
			i := live[r.IntN(len(live))]
			p.Ops = append(p.Ops, Op{At: at, Kind: OpRestartContainer, Pod: i, Slot: r.IntN(p.Pods[i].Containers)})
		case OpRestartSandbox:
			p.Ops = append(p.Ops, Op{At: at, Kind: OpRestartSandbox, Pod: live[r.IntN(len(live))]})
		}
	}
}

// minLeaksPerKind is how many pods each leak kind leaks at least: drawn by
// weight alone, a 2-minute soak left a kind out in a quarter to a third of
// its seeds, and "every leak is reclaimed" said nothing of that kind.
const minLeaksPerKind = 2

// faultShadow is how long before a fault and after its end a pod's create
// or delete may fail or be judged by design because of it (a create in a
// full disk is given up; a teardown the plugin, killed, never saw).
const faultShadow = 10 * time.Second

// leakEveryKind makes deletes leak the kinds drawn fewer than
// minLeaksPerKind times: clean deletes, or those of a kind drawn more often
// than that, picked at random, among the pods created and deleted away from
// every fault (faultShadow) while there are any, so that a fault is less
// likely to keep them from being made. It runs after the faults are
// planned, from the pods' stream. A plan too short for it keeps what it
// drew.
func (p *Plan) leakEveryKind(r *rand.Rand) {
	created := map[int]time.Duration{}
	count := map[LeakKind]int{}
	for _, o := range p.Ops {
		switch o.Kind {
		case OpCreate:
			created[o.Pod] = o.At
		case OpDelete:
			count[o.Leak]++
		}
	}
	nearFault := func(at time.Duration) bool {
		for _, f := range p.Faults {
			if at > f.At-faultShadow && at < f.At+f.Param+faultShadow {
				return true
			}
		}
		return false
	}
	for _, k := range LeakKinds {
		for count[k] < minLeaksPerKind {
			var spare, clear []int // indexes in p.Ops of deletes that may change kind; of those away from faults
			for i, o := range p.Ops {
				if o.Kind == OpDelete && o.Leak != k && (o.Leak == LeakNone || count[o.Leak] > minLeaksPerKind) {
					spare = append(spare, i)
					if !nearFault(created[o.Pod]) && !nearFault(o.At) {
						clear = append(clear, i)
					}
				}
			}
			if len(clear) > 0 {
				spare = clear
			}
			if len(spare) == 0 {
				break
			}
			i := spare[r.IntN(len(spare))]
			count[p.Ops[i].Leak]--
			p.Ops[i].Leak = k
			count[k]++
		}
	}
}

func (p *Plan) planFaults(r *rand.Rand) {
	p.FaultsFrom = min(faultWarmup, p.Duration/4)
	p.FaultsUntil = max(p.FaultsFrom+time.Second, p.Duration-faultCooldown)
	window := p.FaultsUntil - p.FaultsFrom
	p.PluginKillsUntil = p.FaultsFrom + window*6/10
	for _, kind := range FaultKinds {
		n := max(minFaults[kind], (faultsPer30m[kind]*int(p.Duration/time.Second)+1799)/1800)
		until := p.FaultsUntil
		if kind == FaultPluginKill {
			until = p.PluginKillsUntil
		}
		for range n {
			f := Fault{Kind: kind, At: p.FaultsFrom + time.Duration(r.Int64N(int64(until-p.FaultsFrom)))}
			switch kind {
			case FaultContainerdKill, FaultPluginKill:
				f.Param = time.Duration(r.Int64N(int64(2 * time.Second))) // down before the restart
			case FaultContainerdPause:
				// Longer than the NRI request timeout: containerd's
				// in-flight NRI calls time out when it resumes.
				f.Param = p.NRITimeout + time.Second + time.Duration(r.Int64N(int64(5*time.Second)))
			case FaultDiskFull:
				f.Param = 8*time.Second + time.Duration(r.Int64N(int64(17*time.Second)))
			case FaultPluginPause:
				f.Param = p.NRITimeout + time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
			}
			p.Faults = append(p.Faults, f)
		}
	}
	// Stable order: by time, then kind.
	sortFaults(p.Faults)
}

func sortFaults(fs []Fault) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && (fs[j].At < fs[j-1].At || fs[j].At == fs[j-1].At && fs[j].Kind < fs[j-1].Kind); j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// String is the schedule, one line per step.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d duration %s nri-timeout %s faults %s..%s plugin-kills-until %s\n",
		p.Seed, p.Duration, p.NRITimeout, p.FaultsFrom, p.FaultsUntil, p.PluginKillsUntil)
	for i, pod := range p.Pods {
		fmt.Fprintf(&b, "pod %d %s/%s %s containers=%d network=%v anchor=%v\n", i, pod.Namespace, pod.Name, pod.UID, pod.Containers, pod.Network, pod.Anchor)
	}
	for _, o := range p.Ops {
		fmt.Fprintf(&b, "op %9s %-17s pod %d", o.At.Round(time.Millisecond), o.Kind, o.Pod)
		switch o.Kind {
		case OpDelete:
			fmt.Fprintf(&b, " leak=%s", o.Leak)
		case OpRestartContainer:
			fmt.Fprintf(&b, " slot=%d", o.Slot)
		}
		b.WriteByte('\n')
	}
	for _, f := range p.Faults {
		fmt.Fprintf(&b, "fault %9s %-16s %s\n", f.At.Round(time.Millisecond), f.Kind, f.Param.Round(time.Millisecond))
	}
	return b.String()
}

// Fingerprint identifies the schedule: two runs with the same fingerprint
// had the same pods, leaks and faults at the same planned times.
func (p Plan) Fingerprint() string {
	sum := sha256.Sum256([]byte(p.String()))
	return hex.EncodeToString(sum[:6])
}

// Counts returns how many faults of each kind and how many deletes of each
// leak kind the plan has.
func (p Plan) Counts() (faults map[FaultKind]int, leaks map[LeakKind]int) {
	faults, leaks = map[FaultKind]int{}, map[LeakKind]int{}
	for _, f := range p.Faults {
		faults[f.Kind]++
	}
	for _, o := range p.Ops {
		if o.Kind == OpDelete {
			leaks[o.Leak]++
		}
	}
	return faults, leaks
}
