package podstate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// realisticID returns a 64-hex-digit ID like containerd's.
func realisticID(kind string, i, j int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s-%d-%d", kind, i, j)))
	return hex.EncodeToString(sum[:])
}

// nodeListing lists n pods with one sandbox and three containers each, with
// real-sized IDs, UIDs and names.
func nodeListing(n int) Listing {
	var l Listing
	for i := range n {
		id := PodIdentity{
			UID:       fmt.Sprintf("%08x-1234-4abc-8def-%012x", i, i),
			Namespace: fmt.Sprintf("team-%03d", i%200),
			Name:      fmt.Sprintf("web-frontend-7d9c8b6f5-%05d", i),
		}
		sid := realisticID("sandbox", i, 0)
		l.Sandboxes = append(l.Sandboxes, ListedSandbox{Pod: id, ID: sid, Ready: true, CreatedAt: t0})
		for j := range 3 {
			l.Containers = append(l.Containers, ListedContainer{
				Pod: id, ID: realisticID("container", i, j), SandboxID: sid,
				Name: fmt.Sprintf("container-%d", j), State: ContainerRunning, CreatedAt: t0,
			})
		}
	}
	return l
}

// BenchmarkMemory10kPods reports the heap held by the state of 10,000 pods
// with 3 containers each (target: <= 50 MiB).
func BenchmarkMemory10kPods(b *testing.B) {
	l := nodeListing(10000)
	var heapMiB float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := New(0)
		s.Reconcile(l, t0)
		runtime.GC()
		runtime.ReadMemStats(&after)
		heapMiB = float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(s)
	}
	// The listing's strings are shared with the records; count them too, as
	// in production the records hold the only reference to them.
	b.ReportMetric(heapMiB, "MiB-records")
	var withStrings runtime.MemStats
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	fresh := nodeListing(10000)
	runtime.GC()
	runtime.ReadMemStats(&withStrings)
	total := heapMiB + float64(withStrings.HeapAlloc-base.HeapAlloc)/(1<<20)
	b.ReportMetric(total, "MiB-total")
	runtime.KeepAlive(fresh)
	if total > 50 {
		b.Fatalf("the state of 10,000 pods holds %.1f MiB, over the 50 MiB target", total)
	}
}

// BenchmarkApply10kPods is one event against a state of 10,000 pods.
func BenchmarkApply10kPods(b *testing.B) {
	s := New(0)
	s.Reconcile(nodeListing(10000), t0)
	id := PodIdentity{UID: "bench", Namespace: "ns", Name: "bench"}
	evs := []Event{
		{Kind: RunPodSandbox, Pod: id, SandboxID: "bench-s"},
		{Kind: StartContainer, Pod: id, SandboxID: "bench-s", ContainerID: "bench-c", ContainerName: "app"},
		{Kind: StopContainer, Pod: id, SandboxID: "bench-s", ContainerID: "bench-c", ContainerName: "app"},
		{Kind: StopPodSandbox, Pod: id, SandboxID: "bench-s"},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ev := evs[i%len(evs)]
		ev.At = t0.Add(time.Duration(i))
		_ = s.Apply(ev)
		i++
	}
}

// BenchmarkReconcile10kPods is one full reconcile of an unchanged node.
func BenchmarkReconcile10kPods(b *testing.B) {
	s := New(0)
	l := nodeListing(10000)
	s.Reconcile(l, t0)
	b.ReportAllocs()
	for b.Loop() {
		l.StartSeq = s.Seq()
		s.Reconcile(l, t0)
	}
}

// BenchmarkView10kPods is one consistent copy of 10,000 pods.
func BenchmarkView10kPods(b *testing.B) {
	s := New(0)
	s.Reconcile(nodeListing(10000), t0)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.View()
	}
}
