package metrics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gather returns m's families by name.
func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	return byName
}

func TestNewExportsEverySeriesAtZero(t *testing.T) {
	k := known()
	tests := []struct {
		name   string
		series int
	}{
		{nameTrackedPods, len(k.phases) * len(k.orphan)},
		{nameLeakedObjects, len(k.leakKinds)},
		{nameActions, len(k.actionPairs) * len(k.actionResults)},
		{namePassDuration, 1},
		{namePasses, len(k.passResults)},
		{nameLastSuccess, 1},
		{nameStuckTerminating, 1},
		{namePeriod, 1},
		{nameBreakerTrips, len(k.classes)},
		{nameBudgetPaused, len(k.classes)},
		{nameUntrusted, len(k.sources)},
		{nameCRIDuration, len(k.criMethods)},
		{nameCRIErrors, len(k.criMethods)},
		{nameNRIEvents, len(k.nriEvents) + 1}, // + other: resolved up front for the NRI handlers
		{nameNRIConnected, 1},
		{nameNRIReconnects, 1},
		{nameBuildInfo, 1},
	}
	got := gather(t, New(BuildInfo{Version: "v1.2.3"}))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mf, ok := got[tt.name]
			if !ok {
				t.Fatalf("%s is not exported after New", tt.name)
			}
			if mf.GetHelp() == "" {
				t.Errorf("%s has no HELP", tt.name)
			}
			if n := len(mf.GetMetric()); n != tt.series {
				t.Errorf("%s has %d series, want %d", tt.name, n, tt.series)
			}
			for _, s := range mf.GetMetric() {
				v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
				if tt.name == nameBuildInfo {
					v--
				}
				if v != 0 {
					t.Errorf("%s%v = %v after New, want 0", tt.name, s.GetLabel(), v)
				}
			}
		})
	}
	for _, collector := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := got[collector]; !ok {
			t.Errorf("%s missing: Go and process collectors must be registered", collector)
		}
	}
}

func TestBuildInfoReportsVersionsAndFillsEmptyOnes(t *testing.T) {
	m := New(BuildInfo{Version: "v0.3.0", GoVersion: "go1.26.0"})
	want := `
# HELP nri_housekeeper_build_info Always 1; labels tell the nri-housekeeper version, Go version and NRI library version.
# TYPE nri_housekeeper_build_info gauge
nri_housekeeper_build_info{goversion="go1.26.0",nri_version="unknown",version="v0.3.0"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), nameBuildInfo); err != nil {
		t.Error(err)
	}
}

func TestObservationsChangeTheirSeries(t *testing.T) {
	at := time.Unix(1_700_000_000, 500_000_000)
	tests := []struct {
		name    string
		observe func(m *Metrics)
		metric  func(m *Metrics) prometheus.Collector
		want    float64
	}{
		{"ok pass counted", func(m *Metrics) { m.ObservePass(PassOK, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.passes.WithLabelValues(PassOK) }, 1},
		{"ok pass sets last success", func(m *Metrics) { m.ObservePass(PassOK, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.lastSuccess }, 1_700_000_000.5},
		{"skipped_not_ready pass sets last success", func(m *Metrics) { m.ObservePass(PassSkippedNotReady, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.lastSuccess }, 1_700_000_000.5},
		{"listing_untrusted pass sets last success: its listing is fresh, untrusted_source says it is not trusted",
			func(m *Metrics) { m.ObservePass(PassListingUntrusted, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.lastSuccess }, 1_700_000_000.5},
		{"listing_failed pass keeps last success", func(m *Metrics) { m.ObservePass(PassListingFailed, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.lastSuccess }, 0},
		{"listing_failed pass counted", func(m *Metrics) { m.ObservePass(PassListingFailed, time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.passes.WithLabelValues(PassListingFailed) }, 1},
		{"unknown pass result is other and keeps last success", func(m *Metrics) { m.ObservePass("bogus", time.Second, at) },
			func(m *Metrics) prometheus.Collector { return m.lastSuccess }, 0},
		{"tracked pods set", func(m *Metrics) {
			m.SetTrackedPods(map[[2]string]int{{"Terminating", "true"}: 3, {"Running", "false"}: 7})
		}, func(m *Metrics) prometheus.Collector { return m.trackedPods.WithLabelValues("Terminating", "true") }, 3},
		{"tracked pods replaced, missing known key is 0", func(m *Metrics) {
			m.SetTrackedPods(map[[2]string]int{{"Terminating", "true"}: 3})
			m.SetTrackedPods(map[[2]string]int{{"Running", "false"}: 1})
		}, func(m *Metrics) prometheus.Collector { return m.trackedPods.WithLabelValues("Terminating", "true") }, 0},
		{"unknown phases summed into other", func(m *Metrics) {
			m.SetTrackedPods(map[[2]string]int{{"Weird", "true"}: 2, {"Odd", "true"}: 5})
		}, func(m *Metrics) prometheus.Collector { return m.trackedPods.WithLabelValues(Other, "true") }, 7},
		{"leaks set", func(m *Metrics) { m.SetLeaks(map[string]int{"sandbox": 4, "pod-log-dir": 2}) },
			func(m *Metrics) prometheus.Collector { return m.leakedObjects.WithLabelValues("sandbox") }, 4},
		{"leaks replaced, missing known kind is 0", func(m *Metrics) {
			m.SetLeaks(map[string]int{"sandbox": 4})
			m.SetLeaks(map[string]int{"container": 1})
		}, func(m *Metrics) prometheus.Collector { return m.leakedObjects.WithLabelValues("sandbox") }, 0},
		{"oldest leak set, in seconds", func(m *Metrics) {
			m.SetOldestLeaks(map[string]time.Duration{"remove-sandbox": 90 * time.Minute, "remove-pod-log-dir": time.Minute})
		}, func(m *Metrics) prometheus.Collector { return m.oldestLeak.WithLabelValues("remove-sandbox") }, 5400},
		{"oldest leak replaced, missing known kind is 0", func(m *Metrics) {
			m.SetOldestLeaks(map[string]time.Duration{"remove-sandbox": time.Hour})
			m.SetOldestLeaks(map[string]time.Duration{"remove-container": time.Minute})
		}, func(m *Metrics) prometheus.Collector { return m.oldestLeak.WithLabelValues("remove-sandbox") }, 0},
		{"oldest leak of unknown kinds: the oldest, as other", func(m *Metrics) {
			m.SetOldestLeaks(map[string]time.Duration{"odd": time.Minute, "weird": 2 * time.Minute})
		}, func(m *Metrics) prometheus.Collector { return m.oldestLeak.WithLabelValues(Other) }, 120},
		{"action counted", func(m *Metrics) {
			m.ObserveAction("remove-sandbox", "sandboxes.pod-gone", "success")
			m.ObserveAction("remove-sandbox", "sandboxes.pod-gone", "success")
		}, func(m *Metrics) prometheus.Collector {
			return m.actions.WithLabelValues("remove-sandbox", "sandboxes.pod-gone", "success")
		}, 2},
		{"unknown action values are other", func(m *Metrics) { m.ObserveAction("format-disk", "chaos", "maybe") },
			func(m *Metrics) prometheus.Collector { return m.actions.WithLabelValues(Other, Other, Other) }, 1},
		{"budget trip counted per class", func(m *Metrics) {
			m.ObserveBudgetTrips([]string{"orphan-stop", "pod-log-dir"})
			m.ObserveBudgetTrips([]string{"orphan-stop"})
		}, func(m *Metrics) prometheus.Collector { return m.breakerTrips.WithLabelValues("orphan-stop") }, 2},
		{"a class is paused while the last pass tripped it", func(m *Metrics) {
			m.ObserveBudgetTrips([]string{"pod-log-dir"})
		}, func(m *Metrics) prometheus.Collector { return m.budgetPaused.WithLabelValues("pod-log-dir") }, 1},
		{"a class is no longer paused after a pass that did not trip it", func(m *Metrics) {
			m.ObserveBudgetTrips([]string{"pod-log-dir"})
			m.ObserveBudgetTrips(nil)
		}, func(m *Metrics) prometheus.Collector { return m.budgetPaused.WithLabelValues("pod-log-dir") }, 0},
		{"an untrusted source is set", func(m *Metrics) { m.SetUntrusted("runtime-listing", true) },
			func(m *Metrics) prometheus.Collector { return m.untrusted.WithLabelValues("runtime-listing") }, 1},
		{"a trusted source is cleared", func(m *Metrics) {
			m.SetUntrusted("pod-oracle", true)
			m.SetUntrusted("pod-oracle", false)
		}, func(m *Metrics) prometheus.Collector { return m.untrusted.WithLabelValues("pod-oracle") }, 0},
		{"a failing part is degraded", func(m *Metrics) { m.SetDegraded("state-file", true) },
			func(m *Metrics) prometheus.Collector { return m.degraded.WithLabelValues("state-file") }, 1},
		{"a part that works again is no longer degraded", func(m *Metrics) {
			m.SetDegraded("network", true)
			m.SetDegraded("network", false)
		}, func(m *Metrics) prometheus.Collector { return m.degraded.WithLabelValues("network") }, 0},
		{"an unknown part is other", func(m *Metrics) { m.SetDegraded("/var/lib/x/state.json", true) },
			func(m *Metrics) prometheus.Collector { return m.degraded.WithLabelValues(Other) }, 1},
		{"period set, in seconds", func(m *Metrics) { m.SetPeriod(90 * time.Second) },
			func(m *Metrics) prometheus.Collector { return m.period }, 90},
		{"stuck terminating set", func(m *Metrics) { m.SetStuckTerminating(5) },
			func(m *Metrics) prometheus.Collector { return m.stuckTerminating }, 5},
		{"CRI error counted", func(m *Metrics) {
			m.ObserveCRICall("RemovePodSandbox", time.Millisecond, errors.New("rpc error"))
			m.ObserveCRICall("RemovePodSandbox", time.Millisecond, nil)
		}, func(m *Metrics) prometheus.Collector { return m.criErrors.WithLabelValues("RemovePodSandbox") }, 1},
		{"NRI event counted", func(m *Metrics) { m.ObserveNRIEvent("StopPodSandbox") },
			func(m *Metrics) prometheus.Collector { return m.nriEventCounter("StopPodSandbox") }, 1},
		{"unknown NRI event is other", func(m *Metrics) { m.ObserveNRIEvent("UpdatePodSandbox") },
			func(m *Metrics) prometheus.Collector { return m.nriEventCounter(Other) }, 1},
		{"NRI connected", func(m *Metrics) { m.SetNRIConnected(true) },
			func(m *Metrics) prometheus.Collector { return m.nriConnected }, 1},
		{"NRI disconnected", func(m *Metrics) { m.SetNRIConnected(true); m.SetNRIConnected(false) },
			func(m *Metrics) prometheus.Collector { return m.nriConnected }, 0},
		{"NRI reconnect counted", func(m *Metrics) { m.ObserveNRIReconnect() },
			func(m *Metrics) prometheus.Collector { return m.nriReconnects }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(BuildInfo{})
			tt.observe(m)
			if got := testutil.ToFloat64(tt.metric(m)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// nriEventCounter is the counter ObserveNRIEvent increments for event.
func (m *Metrics) nriEventCounter(event string) prometheus.Counter { return m.nriEvents[event] }

func TestHistogramsObserveDurationsInSeconds(t *testing.T) {
	m := New(BuildInfo{})
	m.ObservePass(PassOK, 1500*time.Millisecond, time.Time{})
	m.ObserveCRICall("ListContainers", 20*time.Millisecond, nil)
	m.ObserveCRICall("ListContainers", 30*time.Millisecond, errors.New("deadline exceeded"))

	got := gather(t, m)
	pass := got[namePassDuration].GetMetric()[0].GetHistogram()
	if pass.GetSampleCount() != 1 || pass.GetSampleSum() != 1.5 {
		t.Errorf("pass histogram count %d sum %v, want 1 and 1.5", pass.GetSampleCount(), pass.GetSampleSum())
	}
	for _, s := range got[nameCRIDuration].GetMetric() {
		h := s.GetHistogram()
		want := uint64(0)
		if s.GetLabel()[0].GetValue() == "ListContainers" {
			want = 2 // failed calls are timed too
		}
		if h.GetSampleCount() != want {
			t.Errorf("CRI histogram %v count %d, want %d", s.GetLabel(), h.GetSampleCount(), want)
		}
	}
	if ts := testutil.ToFloat64(m.lastSuccess); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("a zero pass time sets last success to now, got %v", ts)
	}
}

func TestOtherSeriesVanishWhenBackToZero(t *testing.T) {
	m := New(BuildInfo{})
	m.SetLeaks(map[string]int{"mystery": 2})
	m.SetTrackedPods(map[[2]string]int{{"Running", "maybe"}: 1})
	m.SetLeaks(nil)
	m.SetTrackedPods(nil)
	got := gather(t, m)
	for _, name := range []string{nameLeakedObjects, nameTrackedPods} {
		for _, s := range got[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == Other {
					t.Errorf("%s%v still exported at 0", name, s.GetLabel())
				}
			}
		}
	}
}

func TestRegistryPassesPromLint(t *testing.T) {
	m := New(BuildInfo{Version: "v1"})
	// Observe something everywhere: lint looks at series, and the zero
	// fill must not be the only thing that passes.
	m.ObservePass(PassOK, time.Second, time.Now())
	m.ObserveAction("remove-container", "containers.pod-gone", "error")
	m.ObserveCRICall("Version", time.Millisecond, errors.New("x"))
	m.ObserveNRIEvent("Synchronize")
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatalf("GatherAndLint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// hostileValues are what must never become label values: pod names, UIDs,
// container and sandbox IDs, paths, and junk.
func hostileValues() []string {
	vals := []string{
		"", " ", "other ", "Running\n", `sandbox"} 1`, "ünïcode", strings.Repeat("x", 4096),
		"kube-system_coredns-5d78c9869d-abcde_3f1c2b4e-9a8d-4c7b-8e6f-1a2b3c4d5e6f",
		"/var/log/pods/default_nginx_uid", "../../etc/passwd",
	}
	for i := range 300 {
		vals = append(vals,
			fmt.Sprintf("nginx-deployment-7d9f8b6c5-%05d", i),
			fmt.Sprintf("%08x-9a8d-4c7b-8e6f-%012x", i, i*7919),
			fmt.Sprintf("%064x", uint64(i)*0x9e3779b97f4a7c15),
		)
	}
	return vals
}

func TestEveryLabelValueStaysInItsAllowedSet(t *testing.T) {
	m := New(BuildInfo{})
	for _, v := range hostileValues() {
		m.ObservePass(v, time.Millisecond, time.Now())
		m.SetTrackedPods(map[[2]string]int{{v, v}: 1, {v, "true"}: 1, {"Running", v}: 1})
		m.SetLeaks(map[string]int{v: 1})
		m.ObserveAction(v, v, v)
		m.ObserveAction(v, "orphans.stop", "success")
		m.ObserveAction("stop-sandbox", v, "success")
		m.ObserveAction("stop-sandbox", "orphans.stop", v)
		m.ObserveCRICall(v, time.Millisecond, errors.New(v))
		m.ObserveNRIEvent(v)
	}

	allowed := AllowedLabelValues()
	for name, mf := range gather(t, m) {
		if !strings.HasPrefix(name, namespace+"_") || name == nameBuildInfo {
			continue
		}
		labels := allowed[name]
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				values, declared := labels[l.GetName()]
				if !declared {
					t.Errorf("%s has undeclared label %q", name, l.GetName())
					continue
				}
				if v := l.GetValue(); v != Other && !slices.Contains(values, v) {
					t.Errorf("%s{%s=%q}: value outside the allowed set", name, l.GetName(), v)
				}
			}
		}
		// Bound: the product of each label's domain (allowed + other).
		limit := 1
		for _, values := range labels {
			limit *= len(values) + 1
		}
		if n := len(mf.GetMetric()); n > limit {
			t.Errorf("%s has %d series, more than its bound %d", name, n, limit)
		}
	}
}

func TestAllowedLabelValuesAreCleanAndCopied(t *testing.T) {
	allowed := AllowedLabelValues()
	for name, labels := range allowed {
		for label, values := range labels {
			seen := map[string]bool{}
			for _, v := range values {
				if v == "" || v == Other || seen[v] {
					t.Errorf("%s{%s}: bad or duplicate value %q", name, label, v)
				}
				seen[v] = true
			}
		}
	}
	allowed[nameLeakedObjects][labelKind][0] = "mutated"
	if AllowedLabelValues()[nameLeakedObjects][labelKind][0] == "mutated" {
		t.Error("AllowedLabelValues shares its slices with callers")
	}
	for _, p := range known().actionPairs {
		if !slices.Contains(known().actionKinds, p[0]) || !slices.Contains(known().rules, p[1]) {
			t.Errorf("action pair %v names an unknown kind or rule", p)
		}
	}
}

// NRI handlers run while containerd holds its NRI lock (DESIGN.md §5:
// ≤ 20 µs per event): counting an event must not allocate.
func TestObserveNRIEventDoesNotAllocate(t *testing.T) {
	m := New(BuildInfo{})
	for _, event := range []string{"StopPodSandbox", "not-an-event"} {
		if n := testing.AllocsPerRun(100, func() { m.ObserveNRIEvent(event) }); n != 0 {
			t.Errorf("ObserveNRIEvent(%q) allocates %v times", event, n)
		}
	}
}

func TestInstancesDoNotShareState(t *testing.T) {
	a, b := New(BuildInfo{}), New(BuildInfo{})
	a.ObserveBudgetTrips([]string{"orphan-stop"})
	if got := testutil.ToFloat64(b.breakerTrips.WithLabelValues("orphan-stop")); got != 0 {
		t.Errorf("second instance sees %v breaker trips", got)
	}
}

// TestANotFoundAnswerIsNotACRIError: the checks right before a step ask for
// objects expected to be gone (PodSandboxStatus, the stores' Get), and a
// removal of what is gone is done: cri_errors_total counts failures only.
func TestANotFoundAnswerIsNotACRIError(t *testing.T) {
	m := New(BuildInfo{})
	m.ObserveCRICall("PodSandboxStatus", time.Millisecond, status.Error(codes.NotFound, "no such sandbox"))
	m.ObserveCRICall("PodSandboxStatus", time.Millisecond, status.Error(codes.Unavailable, "connection refused"))
	if got := testutil.ToFloat64(m.criErrors.WithLabelValues("PodSandboxStatus")); got != 1 {
		t.Fatalf("cri_errors_total{method=PodSandboxStatus} = %v after a NotFound and an Unavailable, want 1", got)
	}
}
