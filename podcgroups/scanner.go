package podcgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// FullScanEvery is how often a loop's Scanner reads the pod parents of
// every hierarchy. What it finds between full scans is in Scanner's
// comment: at worst, a pod cgroup kubelet did not make is found this much
// later, and nothing is acted on before leak_grace anyway.
const FullScanEvery = 5 * time.Minute

// Scanner is Discover pass after pass, for a loop (not safe for concurrent
// use).
//
// A full scan reads the pod parents of every hierarchy, as Discover does:
// kubelet's GetAllPodsFromCgroups counts a pod cgroup left in a single
// hierarchy. Between full scans, on a node with more than one hierarchy
// (cgroup v1), a scan reads the parents of one hierarchy, the primary: the
// one where the last full scan found the most pod cgroups. kubelet makes a
// pod's cgroup in every hierarchy, and a busy v1 node has ten of them, so
// this is most of what a pass spends on cgroups. A pod that matters is then
// looked up by name in every parent of every hierarchy, in a full scan's
// order, so it is found exactly as a full scan finds it (its class, every
// path, processes, CPU, skips): a pod to be inspected, a stray (the last
// full or partial scan found it outside the primary or in two classes),
// and a pod found in the primary by the last scan and not now (a partial
// removal leaves a stray).
//
// What a partial scan misses until the next full scan: a pod cgroup made
// since the last full scan outside the primary and never in it (not
// kubelet's doing); names that are not pod cgroups outside the primary,
// which it reports as the last full scan found them; and the class of a
// pod not inspected that a full scan would have found first in another
// hierarchy. None is ever acted on: only pods looked up are.
type Scanner struct {
	opts      Options
	fullEvery time.Duration

	// From the last full scan (fullAt zero: none that counts).
	fullAt      time.Time
	hierarchies []Hierarchy
	driver      Driver
	primary     Hierarchy
	elsewhere   []Skipped // its skips outside the primary, but for pods in two classes
	// From the last scan: the pods found outside the primary or in two
	// classes, and the pods found in the primary.
	strays    map[string]bool
	inPrimary map[string]string // pod UID to its first class there
}

// NewScanner returns a Scanner that reads every hierarchy at its first
// scan and then at least every fullEvery.
func NewScanner(opts Options, fullEvery time.Duration) *Scanner {
	return &Scanner{opts: opts, fullEvery: fullEvery}
}

// Discover lists the pod cgroups as Discover does, reading every hierarchy
// when a full scan is due (see Scanner). now is the pass's clock.
func (sc *Scanner) Discover(ctx context.Context, now time.Time, inspect func(uid string) bool) Listing {
	t, failed := layout(ctx, sc.opts)
	if failed != nil {
		return *failed
	}
	if sc.fullDue(t, now) {
		return sc.full(ctx, t, now, inspect)
	}
	return sc.partial(ctx, t, inspect)
}

// Primary is the hierarchy scans between full scans read ("" until a full
// scan found a pod cgroup on a node with more than one hierarchy).
func (sc *Scanner) Primary() string {
	if sc.fullAt.IsZero() {
		return ""
	}
	return sc.primary.Path
}

// fullDue: no full scan yet, or it is fullEvery old (or in the future: the
// clock was set back), or the node has one hierarchy (it is the primary),
// or the hierarchies or the driver changed since.
func (sc *Scanner) fullDue(t tree, now time.Time) bool {
	return sc.fullAt.IsZero() || now.Sub(sc.fullAt) >= sc.fullEvery || now.Before(sc.fullAt) ||
		len(t.hierarchies) < 2 || t.driver != sc.driver || !slices.Equal(t.hierarchies, sc.hierarchies)
}

// full scans every hierarchy and picks the primary. A node with no pod
// cgroup gives no primary to pick: the next scan is full again.
func (sc *Scanner) full(ctx context.Context, t tree, now time.Time, inspect func(uid string) bool) Listing {
	*sc = Scanner{opts: sc.opts, fullEvery: sc.fullEvery}
	s := newScan(t, inspect)
	classes := make([]map[string]string, len(t.hierarchies)) // per hierarchy: pod UID to its first class there
	for i, h := range t.hierarchies {
		classes[i] = map[string]string{}
		visit := func(ctx context.Context, h Hierarchy, p podParent, uid, path string) error {
			if _, ok := classes[i][uid]; !ok {
				classes[i][uid] = p.qos
			}
			return s.pod(ctx, h, p.qos, uid, path)
		}
		for _, p := range t.parents {
			if err := s.parent(ctx, h, p, visit); err != nil {
				return t.failed(err)
			}
		}
	}
	l := s.listing()
	if len(l.Pods) == 0 {
		return l
	}
	primary := 0
	for i := range classes {
		if len(classes[i]) > len(classes[primary]) {
			primary = i
		}
	}
	sc.fullAt, sc.hierarchies, sc.driver, sc.primary = now, t.hierarchies, t.driver, t.hierarchies[primary]
	sc.strays = s.strays(l, classes[primary], nil)
	sc.inPrimary = classes[primary]
	for _, sk := range l.Skipped {
		if _, ok := s.twoClass[sk.Path]; !ok && !strings.HasPrefix(sk.Path, sc.primary.Path+"/") {
			sc.elsewhere = append(sc.elsewhere, sk)
		}
	}
	return l
}

// partial reads the primary's parents and looks up the pods that matter
// by name (see Scanner).
func (sc *Scanner) partial(ctx context.Context, t tree, inspect func(uid string) bool) Listing {
	s := newScan(t, inspect)
	lookUp := make(map[string]bool, len(sc.strays))
	for uid := range sc.strays {
		lookUp[uid] = true
	}
	inPrimary := make(map[string]string, len(sc.inPrimary))
	visit := func(ctx context.Context, h Hierarchy, p podParent, uid, path string) error {
		if _, ok := inPrimary[uid]; !ok {
			inPrimary[uid] = p.qos
		}
		if lookUp[uid] || s.inspects(uid) {
			lookUp[uid] = true // every path of it, not only this one
			return nil
		}
		return s.pod(ctx, h, p.qos, uid, path)
	}
	for _, p := range t.parents {
		if err := s.parent(ctx, sc.primary, p, visit); err != nil {
			return t.failed(err)
		}
	}
	for uid := range sc.inPrimary {
		if _, ok := inPrimary[uid]; !ok {
			lookUp[uid] = true // gone from the primary: maybe not from the rest
		}
	}
	uids := make([]string, 0, len(lookUp))
	for uid := range lookUp {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		if err := s.lookUp(ctx, uid); err != nil {
			return t.failed(err)
		}
	}
	s.skipped = append(s.skipped, sc.elsewhere...)
	l := s.listing()
	sc.strays = s.strays(l, inPrimary, lookUp)
	sc.inPrimary = inPrimary
	if len(sc.strays) > len(sc.inPrimary) {
		// Most pods are elsewhere now (the primary's root went, say):
		// looking each up every pass costs more than a full scan.
		sc.fullAt = time.Time{}
	}
	return l
}

// strays are the pods of l (only those in among, unless nil) not found in
// the primary under their class, or found in two classes.
func (s *scan) strays(l Listing, inPrimary map[string]string, among map[string]bool) map[string]bool {
	strays := map[string]bool{}
	for uid, pod := range l.Pods {
		if among == nil || among[uid] {
			if inPrimary[uid] != pod.QOS {
				strays[uid] = true
			}
		}
	}
	for _, uid := range s.twoClass {
		if among == nil || among[uid] {
			strays[uid] = true
		}
	}
	return strays
}

// Find looks pod uid's cgroup up by name in every hierarchy and inspects
// it, as a full scan finds it; found is false when it has none. It reads
// nothing of other pods: for a check right before a step.
func Find(ctx context.Context, opts Options, uid string) (pod PodCgroup, found bool, err error) {
	t, failed := layout(ctx, opts)
	if failed != nil {
		return PodCgroup{}, false, failed.Err
	}
	s := newScan(t, nil)
	if err := s.lookUp(ctx, uid); err != nil {
		return PodCgroup{}, false, err
	}
	pod, found = s.listing().Pods[uid]
	return pod, found, nil
}

func (s *scan) inspects(uid string) bool { return s.inspect == nil || s.inspect(uid) }

// lookUp finds pod uid by name in every parent of every hierarchy, in the
// order a full scan reads them, and so as a full scan finds it.
func (s *scan) lookUp(ctx context.Context, uid string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, h := range s.tree.hierarchies {
		for _, p := range s.tree.parents {
			path := filepath.Join(h.Path, p.rel) + "/" + p.podName(uid)
			fi, err := os.Lstat(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case err != nil:
				return fmt.Errorf("cgroup %s cannot be read: %w", path, err)
			case !fi.IsDir():
				continue // a symlink: a full scan reports it, and it is never a pod
			}
			if err := s.pod(ctx, h, p.qos, uid, path); err != nil {
				return err
			}
		}
	}
	return nil
}
