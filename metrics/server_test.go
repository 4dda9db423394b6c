package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// fakeLoop stands in for the housekeeping loop and the readiness gate.
type fakeLoop struct {
	lastPass atomic.Int64 // unix nanoseconds; 0: no pass yet
	notReady atomic.Pointer[string]
}

func (f *fakeLoop) passNow() { f.lastPass.Store(time.Now().UnixNano()) }

func (f *fakeLoop) health(period time.Duration) Health {
	return Health{
		LastPass: func() time.Time {
			if ns := f.lastPass.Load(); ns != 0 {
				return time.Unix(0, ns)
			}
			return time.Time{}
		},
		Period: period,
		Ready: func() error {
			if why := f.notReady.Load(); why != nil {
				return errors.New(*why)
			}
			return nil
		},
	}
}

// serve starts m's endpoint on a free loopback port. It returns the base
// URL and a channel that receives Serve's result once ctx ends.
func serve(t *testing.T, ctx context.Context, m *Metrics, h Health) (string, <-chan error) {
	t.Helper()
	s, err := m.Listen(ctx, "127.0.0.1:0", h)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { _ = s.Close() })
	return "http://" + s.Addr().String(), done
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return do(t, http.MethodGet, url)
}

func do(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, string(body)
}

func TestMetricsEndpointServesParsableTextFormat(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := New(BuildInfo{Version: "v9"})
	m.SetLeaks(map[string]int{"sandbox": 3})
	base, _ := serve(t, ctx, m, (&fakeLoop{}).health(time.Minute))

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	leaks, ok := mfs[nameLeakedObjects]
	if !ok {
		t.Fatalf("%s missing from the scrape", nameLeakedObjects)
	}
	found := false
	for _, s := range leaks.GetMetric() {
		if s.GetLabel()[0].GetValue() == "sandbox" && s.GetGauge().GetValue() == 3 {
			found = true
		}
	}
	if !found {
		t.Errorf("scrape lacks %s{kind=\"sandbox\"} 3", nameLeakedObjects)
	}
}

func TestHealthzFailsAfterThreePeriodsWithoutAPass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const period = 100 * time.Millisecond
	loop := &fakeLoop{}
	// The staleness clock starts at the pass, not when the server is up.
	start := time.Now()
	loop.passNow()
	base, _ := serve(t, ctx, New(BuildInfo{}), loop.health(period))

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("fresh pass: /healthz %d %q, want 200 ok", code, body)
	}
	code, body := waitFor(t, base+"/healthz", http.StatusServiceUnavailable)
	if elapsed := time.Since(start); elapsed < stalePeriods*period {
		t.Errorf("/healthz failed after %s, before %d periods", elapsed, stalePeriods)
	}
	if !strings.Contains(body, "no housekeeping pass finished, and no step of one started") {
		t.Errorf("/healthz %d body %q does not say why", code, body)
	}

	loop.passNow()
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("after a new pass: /healthz %d %q, want 200", code, body)
	}
}

func TestHealthzBeforeTheFirstPassCountsFromStartup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, _ := serve(t, ctx, New(BuildInfo{}), (&fakeLoop{}).health(100*time.Millisecond))
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("just started: /healthz %d %q, want 200", code, body)
	}
	if _, body := waitFor(t, base+"/healthz", http.StatusServiceUnavailable); !strings.Contains(body, "since start-up") {
		t.Errorf("body %q does not say no pass finished since start-up", body)
	}
}

// waitFor polls url until it answers want, or fails the test after 5 s.
func waitFor(t *testing.T, url string, want int) (int, string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get(t, url)
		if code == want {
			return code, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still answers %d %q, want %d", url, code, body, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHealthAliveVerdicts(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		now, last    time.Time
		startupDelay time.Duration
		alive        bool
	}{
		{"pass within 3 periods", started.Add(time.Hour), started.Add(time.Hour - 89*time.Second), 0, true},
		{"pass exactly 3 periods ago", started.Add(time.Hour), started.Add(time.Hour - 90*time.Second), 0, true},
		{"no pass for more than 3 periods", started.Add(time.Hour), started.Add(time.Hour - 91*time.Second), 0, false},
		{"startup delay does not extend a stale loop", started.Add(time.Hour), started.Add(time.Hour - 91*time.Second), time.Hour, false},
		{"no pass yet, young process", started.Add(80 * time.Second), time.Time{}, 0, true},
		{"no pass yet, process older than 3 periods", started.Add(91 * time.Second), time.Time{}, 0, false},
		{"no pass yet, within startup delay plus 3 periods", started.Add(150 * time.Second), time.Time{}, time.Minute, true},
		{"no pass yet, beyond startup delay plus 3 periods", started.Add(151 * time.Second), time.Time{}, time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Health{LastPass: func() time.Time { return tt.last }, Period: 30 * time.Second, StartupDelay: tt.startupDelay}
			err := h.alive(tt.now, started)
			if (err == nil) != tt.alive {
				t.Errorf("alive = %v (err %v), want %v", err == nil, err, tt.alive)
			}
		})
	}
}

// TestHealthzWithAHugePeriod: config check accepts any period of at least
// a second, such as "1000000h" (a loop that passes on events only). Three
// such periods overflowed time.Duration into a negative limit: /healthz
// failed a moment after every pass, and the DaemonSet's liveness probe
// restarted a healthy plugin every minute and a half, for ever.
func TestHealthzWithAHugePeriod(t *testing.T) {
	started := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                 string
		period, startupDelay time.Duration
		last                 time.Time
	}{
		{"a pass a second ago", 1000000 * time.Hour, 0, started.Add(time.Minute)},
		{"no pass yet, the longest startup delay", 30 * time.Second, 1<<63 - 1, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Health{LastPass: func() time.Time { return tc.last }, Period: tc.period, StartupDelay: tc.startupDelay}
			if err := h.alive(started.Add(time.Minute+time.Second), started); err != nil {
				t.Errorf("period %v, startup_delay %v: /healthz fails: %v", tc.period, tc.startupDelay, err)
			}
		})
	}
}

func TestReadyzReportsWhyNotReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loop := &fakeLoop{}
	why := "NRI not connected"
	loop.notReady.Store(&why)
	base, _ := serve(t, ctx, New(BuildInfo{}), loop.health(time.Minute))

	code, body := get(t, base+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, why) {
		t.Errorf("not ready: /readyz %d %q, want 503 with %q", code, body, why)
	}
	loop.notReady.Store(nil)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("ready: /readyz %d %q, want 200 ok", code, body)
	}
}

func TestOnlyTheThreeEndpointsAreServed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, _ := serve(t, ctx, New(BuildInfo{}), (&fakeLoop{}).health(time.Minute))
	tests := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/metrics/", http.StatusNotFound},
		{http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{http.MethodGet, "/healthz/x", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodHead, "/healthz", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			if code, _ := do(t, tt.method, base+tt.path); code != tt.want {
				t.Errorf("%s %s: %d, want %d", tt.method, tt.path, code, tt.want)
			}
		})
	}
}

func TestServeStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := serve(t, ctx, New(BuildInfo{}), (&fakeLoop{}).health(time.Minute))
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d before cancel", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := (&http.Client{Timeout: time.Second}).Get(base + "/readyz"); err == nil {
		t.Error("still serving after Serve returned")
	}
}

func TestListenNamesABusyAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	_, err = New(BuildInfo{}).Listen(context.Background(), addr, (&fakeLoop{}).health(time.Minute))
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "metrics.address") {
		t.Errorf("Listen on a busy address: %v, want an error naming metrics.address and %s", err, addr)
	}
	if err := New(BuildInfo{}).Serve(context.Background(), addr, (&fakeLoop{}).health(time.Minute)); err == nil {
		t.Error("Serve on a busy address returned nil")
	}
}

func TestListenRejectsBadArguments(t *testing.T) {
	good := (&fakeLoop{}).health(time.Minute)
	noReady, noPeriod, noLastPass := good, good, good
	noReady.Ready = nil
	noPeriod.Period = 0
	noLastPass.LastPass = nil
	tests := []struct {
		name string
		addr string
		h    Health
	}{
		{"empty address", "", good},
		{"no Ready", "127.0.0.1:0", noReady},
		{"no Period", "127.0.0.1:0", noPeriod},
		{"no LastPass", "127.0.0.1:0", noLastPass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(BuildInfo{}).Listen(context.Background(), tt.addr, tt.h)
			if err == nil {
				s.Close()
				t.Error("Listen succeeded")
			}
		})
	}
}

func TestServeWithEmptyAddressIsDisabled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := New(BuildInfo{}).Serve(ctx, "", Health{}); err != nil {
		t.Errorf("Serve(\"\") = %v, want nil at once", err)
	}
}

func TestCloseReleasesAnUnservedAddress(t *testing.T) {
	s, err := New(BuildInfo{}).Listen(context.Background(), "127.0.0.1:0", (&fakeLoop{}).health(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("address not released: %v", err)
	}
	ln.Close()
	if err := s.Serve(context.Background()); err != nil {
		t.Errorf("Serve after Close: %v, want nil", err)
	}
}

func TestServerHasTimeouts(t *testing.T) {
	s, err := New(BuildInfo{}).Listen(context.Background(), "127.0.0.1:0", (&fakeLoop{}).health(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": s.srv.ReadHeaderTimeout,
		"ReadTimeout":       s.srv.ReadTimeout,
		"WriteTimeout":      s.srv.WriteTimeout,
		"IdleTimeout":       s.srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s not set", name)
		}
	}
}

// TestHealthzAllowsForTheLongestStep: a pass waiting on an orphan stop with
// a long orphans.stop_timeout starts no step and finishes nothing for that
// long, and is not stuck: a liveness probe must not kill it half way.
func TestHealthzAllowsForTheLongestStep(t *testing.T) {
	started := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	last := started.Add(time.Minute)
	h := Health{LastPass: func() time.Time { return last }, Period: 30 * time.Second, LongestStep: 5*time.Minute + 10*time.Second}
	if err := h.alive(last.Add(90*time.Second+5*time.Minute), started); err != nil {
		t.Errorf("3 periods and a 5m10s step after the last step started: %v, want alive", err)
	}
	if err := h.alive(last.Add(90*time.Second+5*time.Minute+11*time.Second), started); err == nil || !strings.Contains(err.Error(), "the longest step") {
		t.Errorf("past 3 periods and the longest step: %v, want an error saying both", err)
	}
}
