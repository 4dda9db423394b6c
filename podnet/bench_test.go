package podnet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkList is one List on a node with count attachments of one
// network, each with its host-local reservation, and four real namespace
// mounts (two with a thread in them): what a pass reads for pod networking.
// The cache entries are libcni's own (one ADD through the fake plugins,
// copied per sandbox). The namespace part costs one stat per thread on the
// node whatever the number of mounts, so a handful of mounts is enough; the
// threads metric says how many threads this node had.
//
// List reads every file; BenchmarkLister is the same listing by a Lister.
func BenchmarkList(b *testing.B) {
	benchmarkListing(b, func() lister { return List })
}

// BenchmarkLister is BenchmarkList's listing by a Lister: "cold" is a new
// Lister's first listing (every file read, and remembered), as the first
// pass after a start; "warm" is the listing of one Lister kept across
// iterations, on a node where nothing changed since its last listing, as
// every later pass of a steady node (a readdir and an lstat per file).
func BenchmarkLister(b *testing.B) {
	b.Run("cold", func(b *testing.B) {
		benchmarkListing(b, func() lister {
			return func(ctx context.Context, cfg Config, cacheDir, netnsDir string) (Listing, error) {
				var l Lister
				return l.List(ctx, cfg, cacheDir, netnsDir)
			}
		})
	})
	b.Run("warm", func(b *testing.B) {
		benchmarkListing(b, func() lister { return new(Lister).List })
	})
}

// lister is List, or a Lister's List.
type lister func(ctx context.Context, cfg Config, cacheDir, netnsDir string) (Listing, error)

// benchmarkListing runs a listing of BenchmarkList's node at each size, by
// a lister newLister makes for the size; one listing before the timer starts
// primes a Lister.
func benchmarkListing(b *testing.B, newLister func() lister) {
	for _, count := range []int{250, 1000} {
		b.Run(fmt.Sprintf("attachments=%d", count), func(b *testing.B) {
			n := newNode(b)
			cfg := n.config(b, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			writeAttachments(b, n, cfg, count)
			for i := range 4 {
				newNetns(b, netnsPath(n.netnsDir, i), i%2 == 0)
			}
			ctx := context.Background()
			threads := countThreads(b)
			list := newLister()
			check := func(l Listing, err error) {
				if err != nil {
					b.Fatal(err)
				}
				if len(l.Attachments) != count || len(l.Reservations) != count || len(l.NetnsPaths) != 4 || len(l.Unreadable) != 0 {
					b.Fatalf("listed %d attachments, %d reservations, %d netns, %d unreadable", len(l.Attachments), len(l.Reservations), len(l.NetnsPaths), len(l.Unreadable))
				}
			}
			check(list(ctx, cfg, n.cacheDir, n.netnsDir))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				check(list(ctx, cfg, n.cacheDir, n.netnsDir))
			}
			b.ReportMetric(float64(threads), "threads")
		})
	}
}

// writeAttachments makes count sandboxes on network "pods": a libcni cache
// entry and a host-local reservation each.
func writeAttachments(b *testing.B, n node, cfg Config, count int) {
	template := containerID(0)
	n.add(b, cfg, "pods", template, netnsPath("/var/run/netns", 0))
	results := filepath.Join(n.cacheDir, "results")
	data, err := os.ReadFile(filepath.Join(results, "pods-"+template+"-eth0"))
	if err != nil {
		b.Fatal(err)
	}
	var entry map[string]any
	if err := json.Unmarshal(data, &entry); err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(n.dataDir, "pods")
	for i := range count {
		id := containerID(i)
		entry["containerId"] = id
		entry["netns"] = netnsPath("/var/run/netns", i)
		entry["cniArgs"] = podArgs(id)
		data, err := json.Marshal(entry)
		if err != nil {
			b.Fatal(err)
		}
		writeFile(b, filepath.Join(results, "pods-"+id+"-eth0"), string(data))
		writeFile(b, filepath.Join(dir, fmt.Sprintf("10.22.%d.%d", i/250, i%250+2)), id+"\r\neth0")
	}
}

func countThreads(b *testing.B) int {
	tasks, err := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	if err != nil {
		b.Fatal(err)
	}
	return len(tasks)
}

// BenchmarkNetnsInUse is the /proc scan InspectNetns and RemoveNetns make: one stat
// per thread on the node. ns/thread scales it to a busier node.
func BenchmarkNetnsInUse(b *testing.B) {
	ctx := context.Background()
	threads := countThreads(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := netnsInUse(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(threads), "ns/thread")
}
