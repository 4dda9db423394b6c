package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// The ground truth: every object the kubelet stand-in created, with when it
// was born and when it stopped being live. An object is live from Born until
// Dead (zero: still live):
//
//   - a sandbox: from the RunPodSandbox call until the stand-in first
//     called StopPodSandbox on it (kubelet decided it ends);
//   - a container: from the CreateContainer call until the stand-in first
//     called StopContainer on it, or gave up on starting it;
//   - a pod's own objects (pod dir, pod log dir, pod cgroup): from the
//     pod's admission (its pod dir made) until the stand-in began to delete
//     the pod and had asked every sandbox and container of it to stop;
//   - a container log link: as its container;
//   - the network objects of a sandbox (CNI attachment, IP reservation,
//     netns): until the sandbox was removed (by the stand-in, or by the
//     plugin's logged remove-sandbox). A CNI attachment and an IP
//     reservation name their sandbox (the owner ID); a netns is named by
//     its path, which the stand-in reads from containerd's sandbox
//     metadata (PodSandboxStatus, verbose) once the sandbox is made.
//
// Times are the stand-in's clock when it issued the call; a retried call
// keeps the time of its first attempt.

// ObjKind is a kind of object of the ground truth.
type ObjKind string

const (
	KindSandbox   ObjKind = "sandbox"
	KindContainer ObjKind = "container"
)

// Object is a sandbox or container.
type Object struct {
	ID      string
	Kind    ObjKind
	Pod     *Pod
	Name    string // container name
	Attempt uint32
	Sandbox *Object // a container's sandbox

	Born    time.Time // create call issued
	Started time.Time // container started / sandbox ready (zero: never)
	Dead    time.Time // stop issued (zero: live)
	Removed time.Time // removed by the stand-in (zero: not by it)
	// Adopted: found by listing after a create call failed.
	Adopted bool
	// Netns: a sandbox's network namespace, as containerd's metadata
	// names it ("" for a hostNetwork pod, or not learnt).
	Netns string
}

// Link is a container log link (container_logs_dir/<pod>_<ns>_<ctr>-<id>.log).
type Link struct {
	Path      string
	Container *Object
	Removed   time.Time // by the stand-in
}

// Pod is a pod of the stand-in.
type Pod struct {
	Index    int // in Plan.Pods
	Name     string
	NS, UID  string
	Network  bool
	Anchor   bool
	PodDir   string
	LogDir   string
	Cgroups  []string // the pod cgroup in each hierarchy it exists in
	Admitted time.Time
	// Deleted: the stand-in began to delete the pod (zero: not deleted).
	Deleted time.Time
	// Dead: the pod's own objects stopped being live: deleted and every
	// sandbox and container asked to stop.
	Dead time.Time
	// Abandoned: deleted because its creation failed (not a planned delete).
	Abandoned bool
	Leak      LeakKind
	// LeakMade: when the last step of the leak was done (its objects are
	// left from then on).
	LeakMade time.Time
	// TeardownFrom, TeardownUntil: the sandbox stop and removal of a
	// LeakPodDir pod (the plugin must see it torn down).
	TeardownFrom, TeardownUntil time.Time

	Sandboxes  []*Object
	Containers []*Object
	Links      []*Link
	// LeakProcess is the pid left in a LeakCgroup pod's cgroup.
	LeakProcess int

	attempt    uint32            // next sandbox attempt
	attempts   map[string]uint32 // next container attempt per name
	current    *Object           // the sandbox kubelet uses
	slots      map[string]*Object
	slotNames  []string
	containers int // how many containers the pod has
}

// LiveAt reports whether the pod's own objects were live at t.
func (p *Pod) LiveAt(t time.Time) bool {
	return !t.Before(p.Admitted) && (p.Dead.IsZero() || t.Before(p.Dead))
}

// Truth is the stand-in's record of everything it made; safe for
// concurrent use.
type Truth struct {
	mu        sync.Mutex
	pods      map[string]*Pod // by UID
	podList   []*Pod
	objects   map[string]*Object
	links     map[string]*Link
	byLogDir  map[string]*Pod
	byPodDir  map[string]*Pod
	byNetns   map[string]*Object // sandboxes by their netns' name (the path's last element)
	failures  []string           // the stand-in's own problems (not the plugin's)
	lost      map[string]*Lost
	lostOrder []string
}

// Lost is a live object the stand-in found gone or not running: a live
// workload was hurt (by whoever).
type Lost struct {
	What    string // e.g. "container 0123… (app0) of soak/p-0001: state CONTAINER_EXITED"
	Key     string
	Pod     *Pod
	Seen    int // consecutive probes that saw it
	First   time.Time
	Counted bool // seen on two probes in a row: counts as lost
}

// NewTruth returns an empty ground truth.
func NewTruth() *Truth {
	return &Truth{pods: map[string]*Pod{}, objects: map[string]*Object{}, links: map[string]*Link{},
		byLogDir: map[string]*Pod{}, byPodDir: map[string]*Pod{}, byNetns: map[string]*Object{}, lost: map[string]*Lost{}}
}

// AddPod records an admitted pod.
func (tr *Truth) AddPod(p *Pod) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.pods[p.UID] = p
	tr.podList = append(tr.podList, p)
	tr.byLogDir[p.LogDir] = p
	tr.byPodDir[p.PodDir] = p
}

// AddObject records a sandbox or container (adopting one already known is a
// no-op that returns the known one).
func (tr *Truth) AddObject(o *Object) *Object {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if known, ok := tr.objects[o.ID]; ok {
		return known
	}
	tr.objects[o.ID] = o
	if o.Kind == KindSandbox {
		o.Pod.Sandboxes = append(o.Pod.Sandboxes, o)
	} else {
		o.Pod.Containers = append(o.Pod.Containers, o)
	}
	return o
}

// SetNetns records the network namespace of sandbox o. Namespaces are
// known by name (cni-<uuid>): containerd's metadata and the plugin may name
// the same mount through different dirs (/var/run/netns, /run/netns).
func (tr *Truth) SetNetns(o *Object, path string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	o.Netns = path
	if name := netnsName(path); name != "" {
		tr.byNetns[name] = o
	}
}

// SandboxByNetns returns the sandbox whose network namespace path names
// (by its last element), or nil.
func (tr *Truth) SandboxByNetns(path string) *Object {
	name := netnsName(path)
	if name == "" {
		return nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.byNetns[name]
}

// netnsName is the name of the netns at path ("" for no path).
func netnsName(path string) string {
	path = strings.TrimRight(path, "/")
	if path == "" {
		return ""
	}
	return path[strings.LastIndexByte(path, '/')+1:]
}

// AddLink records a container log link.
func (tr *Truth) AddLink(l *Link) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.links[l.Path] = l
	l.Container.Pod.Links = append(l.Container.Pod.Links, l)
}

// Update runs f under the truth's lock: every change of a record after it
// was added goes through it.
func (tr *Truth) Update(f func()) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	f()
}

// Fail records a problem of the stand-in itself.
func (tr *Truth) Fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failures = append(tr.failures, fmt.Sprintf(time.Now().Format("15:04:05.000 ")+format, args...))
}

// Failures are the stand-in's own problems.
func (tr *Truth) Failures() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.failures...)
}

// Pods returns every pod, in admission order.
func (tr *Truth) Pods() []*Pod {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*Pod(nil), tr.podList...)
}

// Object returns a sandbox or container by ID.
func (tr *Truth) Object(id string) *Object {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.objects[id]
}

// Pod returns a pod by UID.
func (tr *Truth) Pod(uid string) *Pod {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.pods[uid]
}

// PodByLogDir returns the pod whose log dir is path.
func (tr *Truth) PodByLogDir(path string) *Pod {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.byLogDir[path]
}

// Link returns a link by path.
func (tr *Truth) Link(path string) *Link {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.links[path]
}

// SawLost records that a probe found key (a live object) hurt; the second
// probe in a row that sees it makes it count. A probe that finds it fine
// again calls SawFine.
func (tr *Truth) SawLost(key, what string, p *Pod, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	l := tr.lost[key]
	if l == nil {
		l = &Lost{Key: key, What: what, Pod: p, First: at}
		tr.lost[key] = l
		tr.lostOrder = append(tr.lostOrder, key)
	}
	l.Seen++
	if l.Seen >= 2 {
		l.Counted = true
	}
}

// SawFine clears keys not seen hurt by the last probe (a transient state
// right after a containerd restart, say), unless they already counted.
func (tr *Truth) SawFine(hurt map[string]bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for key, l := range tr.lost {
		if !hurt[key] && !l.Counted {
			delete(tr.lost, key)
		}
	}
}

// LostLive returns the live objects seen hurt on two probes in a row.
func (tr *Truth) LostLive() []*Lost {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []*Lost
	for _, k := range tr.lostOrder {
		if l := tr.lost[k]; l != nil && l.Counted {
			out = append(out, l)
		}
	}
	return out
}

// liveInterval is when an object was live: [from, to), to zero = still.
type liveInterval struct{ from, to time.Time }

func (iv liveInterval) overlaps(start, end time.Time) bool {
	// [from, to) ∩ [start, end] ≠ ∅
	return !end.Before(iv.from) && (iv.to.IsZero() || start.Before(iv.to))
}

func (o *Object) interval() liveInterval { return liveInterval{o.Born, o.Dead} }

func (p *Pod) interval() liveInterval { return liveInterval{p.Admitted, p.Dead} }

// describe names an object for a report.
func (o *Object) describe() string {
	if o == nil {
		return "?"
	}
	name := ""
	if o.Kind == KindContainer {
		name = fmt.Sprintf(" (%s, attempt %d)", o.Name, o.Attempt)
	}
	return fmt.Sprintf("%s %s%s of %s/%s", o.Kind, short(o.ID), name, o.Pod.NS, o.Pod.Name)
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

// sortedKeys returns m's keys sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
