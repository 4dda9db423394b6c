//go:build e2e

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape parses /metrics; value(name, labels) reads one sample.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, addr string) (scrape, string) {
	t.Helper()
	code, body := get("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families, body
}

// value is the first series of name whose labels match (a counter's or a
// gauge's value, a histogram's count); -1 when there is none.
func (s scrape) value(name string, labels map[string]string) float64 {
	for _, m := range s[name].GetMetric() {
		if !labelsMatch(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// sum adds up every series of name whose labels match (a counter's or a
// gauge's value); -1 when the scrape has no such metric.
func (s scrape) sum(name string, labels map[string]string) float64 {
	f, ok := s[name]
	if !ok {
		return -1
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		if labelsMatch(m, labels) {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// labelsMatch: every label of m that labels names has the value it gives.
func labelsMatch(m *dto.Metric, labels map[string]string) bool {
	for _, l := range m.GetLabel() {
		if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
			return false
		}
	}
	return true
}

// TestMetricsAndHealthOfTheRunningPlugin runs the binary in external mode,
// reclaims the #107730 leak, and checks what a Prometheus scrape and the
// health endpoints say, also across a containerd restart.
func TestMetricsAndHealthOfTheRunningPlugin(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	dir := t.TempDir()
	exe := buildPlugin(t, dir, "nri-housekeeper")
	addr := freePort(t)
	logFile := filepath.Join(dir, "plugin.log")
	conf := writeConfig(t, dir, binaryConfig{Period: "1s", Grace: "2s", MetricsAddr: addr, LogFile: logFile}.text(k))
	runBinary(t, exe, conf, logFile)
	waitFor(t, "/readyz is 200", 10*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
	if code, _ := get("http://" + addr + "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if code, _ := get("http://" + addr + "/debug/pprof/"); code != 404 {
		t.Fatalf("an unexpected handler answers: %d", code)
	}

	leaked := newPod(t, "scraped")
	k.admit(t, leaked)
	sb, ctrs := runPod(t, node, leaked, 2)
	leakLike107730(t, node, k, leaked, sb, ctrs)
	waitGone(t, node, "the leak is reclaimed", 10*time.Second, append([]string{sb}, ctrs...), []string{node.PodLogDir(leaked)})
	// The pass that reclaimed it still counted it as leaked; the next says 0.
	waitFor(t, "the leak gauge drops to 0", 5*time.Second, func() bool {
		s, _ := scrapeMetrics(t, addr)
		return s.value("nri_housekeeper_leaked_objects", map[string]string{"kind": "sandbox"}) == 0
	})
	s, body := scrapeMetrics(t, addr)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nri_housekeeper_actions_total", map[string]string{"kind": "remove-container", "rule": "containers.pod-gone", "result": "success"}, 2},
		{"nri_housekeeper_actions_total", map[string]string{"kind": "remove-sandbox", "rule": "sandboxes.pod-gone", "result": "success"}, 1},
		{"nri_housekeeper_actions_total", map[string]string{"kind": "remove-pod-log-dir", "rule": "logs.pod-log-dir", "result": "success"}, 1},
		{"nri_housekeeper_actions_total", map[string]string{"kind": "remove-sandbox", "rule": "sandboxes.pod-gone", "result": "error"}, 0},
		{"nri_housekeeper_leaked_objects", map[string]string{"kind": "sandbox"}, 0},
		{"nri_housekeeper_nri_connected", nil, 1},
		{"nri_housekeeper_nri_events_total", map[string]string{"event": "RunPodSandbox"}, 1},
		{"nri_housekeeper_nri_events_total", map[string]string{"event": "StopPodSandbox"}, 1},
		{"nri_housekeeper_nri_events_total", map[string]string{"event": "StartContainer"}, 2},
		{"nri_housekeeper_breaker_trips_total", nil, 0},
		{"nri_housekeeper_tracked_pods", map[string]string{"phase": "Running", "orphan": "false"}, 0},
		// Its state file (beside the log) is written, the lab's network read.
		{"nri_housekeeper_degraded", map[string]string{"part": "state-file"}, 0},
		{"nri_housekeeper_degraded", map[string]string{"part": "network"}, 0},
	} {
		if got := s.value(tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	for _, positive := range []struct {
		name   string
		labels map[string]string
	}{
		{"nri_housekeeper_passes_total", map[string]string{"result": "ok"}},
		{"nri_housekeeper_pass_duration_seconds", nil},
		{"nri_housekeeper_cri_call_duration_seconds", map[string]string{"method": "ListPodSandbox"}},
		{"nri_housekeeper_cri_call_duration_seconds", map[string]string{"method": "RemovePodSandbox"}},
		{"nri_housekeeper_last_successful_pass_timestamp_seconds", nil},
		{"nri_housekeeper_build_info", nil},
	} {
		if got := s.value(positive.name, positive.labels); got <= 0 {
			t.Errorf("%s%v = %v, want > 0", positive.name, positive.labels, got)
		}
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// containerd goes away: not ready, still alive; back: ready again.
	if err := node.KillContainerd(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz turns 503", 10*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 503 })
	code, why := get("http://" + addr + "/readyz")
	t.Logf("/readyz while containerd is down: %d %s", code, why)
	time.Sleep(3 * time.Second)
	if code, body := get("http://" + addr + "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s while the loop runs (passes fail, but finish)", code, body)
	}
	s, _ = scrapeMetrics(t, addr)
	if s.value("nri_housekeeper_nri_connected", nil) != 0 || s.value("nri_housekeeper_passes_total", map[string]string{"result": "listing_failed"}) < 1 {
		t.Fatal("metrics do not show the outage (nri_connected 0, listing_failed passes)")
	}
	if _, err := node.RestartContainerd(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/readyz is 200 again", 10*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
	s, _ = scrapeMetrics(t, addr)
	if s.value("nri_housekeeper_nri_reconnects_total", nil) < 1 || s.value("nri_housekeeper_nri_connected", nil) != 1 {
		t.Fatal("metrics do not show the reconnect")
	}
}
