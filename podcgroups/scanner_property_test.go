package podcgroups

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestScansBetweenFullScansFindWhatAFullScanFinds: on random trees (see
// randomTree), a Scanner's scan between full scans gives exactly what
// Discover gives while the tree is unchanged; after random changes (pods
// removed from some hierarchies, the primary among them, or from all; new
// pods; junk), it finds every pod Discover finds that is in the primary or
// was found before, invents none, gives each the class Discover gives, and
// finds every pod it is to look into exactly as Discover finds it: every
// path, process and CPU setting. The plan acts only on pods looked into.
// A full scan when due gives exactly what Discover gives again.
func TestScansBetweenFullScansFindWhatAFullScanFinds(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(120) {
		rng := rand.New(rand.NewPCG(seed, 11))
		mp, uids := randomTree(t, rng, seed)
		opts := Options{Mountpoint: mp, Root: "kubepods"}
		chosen := map[string]bool{}
		inspect := func(uid string) bool { return chosen[uid] }
		for _, uid := range uids {
			chosen[uid] = rng.IntN(2) == 0
		}
		now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
		sc := NewScanner(opts, FullScanEvery)
		first := sc.Discover(ctx, now, inspect)
		if want := Discover(ctx, opts, inspect); !reflect.DeepEqual(first, want) {
			t.Fatalf("seed %d: the first scan is not a full one:\n%+v\nDiscover:\n%+v", seed, first, want)
		}
		if sc.Primary() == "" {
			if len(first.Pods) > 0 {
				t.Fatalf("seed %d: %d pods found and no primary picked", seed, len(first.Pods))
			}
			continue
		}

		now = now.Add(time.Minute)
		if got, want := sc.Discover(ctx, now, inspect), Discover(ctx, opts, inspect); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: unchanged tree, primary %s:\n%+v\nDiscover:\n%+v", seed, sc.Primary(), got, want)
		}

		primary := sc.Primary()
		before := Discover(ctx, opts, inspect)
		driver := before.Driver
		changes := changeTree(t, rng, mp, driver, seed, uids, chosen)
		now = now.Add(time.Minute)
		got, want := sc.Discover(ctx, now, inspect), Discover(ctx, opts, inspect)
		if !got.Ready || !want.Ready {
			t.Fatalf("seed %d: not ready: %v / %v", seed, got.Err, want.Err)
		}
		for uid, w := range want.Pods {
			g, found := got.Pods[uid]
			_, before := before.Pods[uid]
			switch {
			case !found && (before || inPrimary(t, primary, driver, uid)):
				t.Fatalf("seed %d (%s): pod %s not found, Discover finds %+v", seed, changes, uid, w)
			case found && chosen[uid] && !reflect.DeepEqual(g, w):
				t.Fatalf("seed %d (%s): pod %s looked into is\n%+v\nDiscover:\n%+v", seed, changes, uid, g, w)
			case found && g.QOS != w.QOS && before:
				// A new pod not looked into has the class of the primary,
				// which may not be a full scan's first (a pod in two
				// classes is not kubelet's doing).
				t.Fatalf("seed %d (%s): pod %s found as %s, Discover: %s", seed, changes, uid, g.QOS, w.QOS)
			}
		}
		for uid, g := range got.Pods {
			if _, ok := want.Pods[uid]; !ok {
				t.Fatalf("seed %d (%s): pod %s found (%+v), Discover finds none", seed, changes, uid, g)
			}
		}

		now = now.Add(FullScanEvery)
		if got, want := sc.Discover(ctx, now, inspect), Discover(ctx, opts, inspect); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d (%s): a full scan was due:\n%+v\nDiscover:\n%+v", seed, changes, got, want)
		}
	}
}

// changeTree changes a random tree as a node does and a bit more: a pod
// removed from some hierarchies or all, new pods (some looked into), junk
// made. It says what it did.
func changeTree(t *testing.T, rng *rand.Rand, mp string, driver Driver, seed uint64, uids []string, chosen map[string]bool) string {
	t.Helper()
	var did []string
	for range 1 + rng.IntN(4) {
		switch rng.IntN(4) {
		case 0, 1:
			uid := uids[rng.IntN(len(uids))]
			for _, h := range treeHierarchies {
				if rng.IntN(2) == 0 {
					continue
				}
				for _, q := range treeClasses {
					rel, err := podRel(driver, "kubepods", q, uid)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.RemoveAll(filepath.Join(mp, h, rel)); err != nil {
						t.Fatal(err)
					}
				}
				did = append(did, fmt.Sprintf("%s removed from %s", uid, h))
			}
		case 2:
			uid := fmt.Sprintf("%08x-1111-4000-8000-%012x", seed, rng.IntN(1000))
			chosen[uid] = rng.IntN(2) == 0
			randomPod(t, rng, mp, driver, uid)
			did = append(did, "new pod "+uid)
		case 3:
			h := treeHierarchies[rng.IntN(len(treeHierarchies))]
			rel, err := podRel(driver, "kubepods", treeClasses[rng.IntN(3)], uids[0])
			if err != nil {
				t.Fatal(err)
			}
			_ = os.MkdirAll(filepath.Join(mp, h, filepath.Dir(rel), "junk"), 0o755)
			did = append(did, "junk in "+h)
		}
	}
	return fmt.Sprint(did)
}

// inPrimary: pod uid has a cgroup in hierarchy h, in any class.
func inPrimary(t *testing.T, h string, driver Driver, uid string) bool {
	t.Helper()
	for _, q := range treeClasses {
		rel, err := podRel(driver, "kubepods", q, uid)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(filepath.Join(h, rel)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}
