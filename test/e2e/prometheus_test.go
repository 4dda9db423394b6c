//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The alert rules shipped in packaging/observability, as Prometheus loads
// them (a symlink into the Helm chart is followed).
const alertsFile = "packaging/observability/alerts.yaml"

// alertExprs reads alertsFile and returns each alert's expression by name,
// so the test evaluates what ships, not a copy.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	exprs := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				exprs[r.Alert] = r.Expr
			}
		}
	}
	return exprs
}

// prometheusServer is a prometheus process started by the test, and its
// HTTP API.
type prometheusServer struct {
	base string // http://127.0.0.1:port
}

// startPrometheus runs Debian's prometheus scraping target every second and
// evaluating the shipped rules every second, with its TSDB in a temp dir.
// It is stopped at cleanup; its log is shown if the test failed.
func startPrometheus(t *testing.T, target string) *prometheusServer {
	t.Helper()
	exe, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed (run `apt-get install prometheus`, or `make prometheus-tools`): %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	// scrape_timeout must not exceed scrape_interval (its default is 10s).
	text := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: nri-housekeeper
    static_configs:
      - targets: [%q]
`, filepath.Join(repoRoot(t), alertsFile), target)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	logFile := filepath.Join(dir, "prometheus.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe,
		"--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	t.Cleanup(func() {
		// SIGTERM lets it close its TSDB; KILL if it does not within 10 s.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("prometheus log:\n%s", lastLines(string(b), 40))
		}
	})
	p := &prometheusServer{base: "http://" + addr}
	waitFor(t, "prometheus is ready", 30*time.Second, func() bool {
		code, _ := get(p.base + "/-/ready")
		return code == http.StatusOK
	})
	return p
}

// api GETs a /api/v1 path and decodes the data of a successful answer.
func (p *prometheusServer) api(t *testing.T, path string, data any) {
	t.Helper()
	code, body := get(p.base + path)
	var resp struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if code != http.StatusOK || resp.Status != "success" {
		t.Fatalf("GET %s: %d %s: %s", path, code, resp.Status, resp.Error)
	}
	if err := json.Unmarshal(resp.Data, data); err != nil {
		t.Fatalf("GET %s: data: %v", path, err)
	}
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// query evaluates expr now and returns the instant vector.
func (p *prometheusServer) query(t *testing.T, expr string) []sample {
	t.Helper()
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"` // [unix time, "value"]
		} `json:"result"`
	}
	p.api(t, "/api/v1/query?query="+url.QueryEscape(expr), &data)
	if data.ResultType != "vector" {
		t.Fatalf("query %q: result type %q, want vector", expr, data.ResultType)
	}
	var out []sample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %q: value %v: %v", expr, r.Value, err)
		}
		out = append(out, sample{Metric: r.Metric, Value: v})
	}
	return out
}

// ruleState is what /api/v1/rules says of one alerting rule.
type ruleState struct {
	Name      string `json:"name"`
	Health    string `json:"health"` // "ok" once evaluated without error
	State     string `json:"state"`  // inactive, pending, firing
	LastError string `json:"lastError"`
}

func (p *prometheusServer) rules(t *testing.T) map[string]ruleState {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []ruleState `json:"rules"`
		} `json:"groups"`
	}
	p.api(t, "/api/v1/rules?type=alert", &data)
	rules := map[string]ruleState{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			rules[r.Name] = r
		}
	}
	return rules
}

// TestPrometheusEvaluatesTheAlertRulesOnThePlugin runs the plugin binary in
// dry_run against the lab with a #107730 leak it detects and never
// reclaims, and a real Prometheus that scrapes it with the shipped rules
// loaded: the rules evaluate without error, the leak alert's expression
// (at a threshold of 1 s rather than its hour) sees the leak's step
// waiting, and the stale alert's expression stays empty while passes run.
func TestPrometheusEvaluatesTheAlertRulesOnThePlugin(t *testing.T) {
	cleanupPods(t, node)
	k := newKubelet(t, node)
	dir := t.TempDir()
	exe := buildPlugin(t, dir, "nri-housekeeper")
	addr, logFile := freePort(t), filepath.Join(dir, "plugin.log")
	conf := writeConfig(t, dir, binaryConfig{Top: "dry_run = true", Period: "1s", Grace: "2s", MetricsAddr: addr, LogFile: logFile}.text(k))
	runBinary(t, exe, conf, logFile)
	waitFor(t, "/readyz is 200", 10*time.Second, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })

	exprs := alertExprs(t)
	for _, name := range []string{"NriHousekeeperLeaksPersisting", "NriHousekeeperStale"} {
		if exprs[name] == "" {
			t.Fatalf("%s has no alert %s", alertsFile, name)
		}
	}
	prom := startPrometheus(t, addr)

	// Every rule of the file loaded and evaluated without error.
	var rules map[string]ruleState
	waitFor(t, "every alert rule is evaluated with health ok", 30*time.Second, func() bool {
		rules = prom.rules(t)
		for name := range exprs {
			if rules[name].Health != "ok" {
				return false
			}
		}
		return true
	})
	if len(rules) != len(exprs) {
		t.Errorf("prometheus loaded %d alert rules, %s has %d", len(rules), alertsFile, len(exprs))
	}

	// The leak: held by dry_run, so it stays.
	p := newPod(t, "dry-run-leak")
	k.admit(t, p)
	sb, ctrs := runPod(t, node, p, 1)
	leakLike107730(t, node, k, p, sb, ctrs)

	// The rule waits for a step proposed, pass after pass, for an hour; the
	// same expression with a threshold of 1 s sees the dry run's sandbox
	// removal waiting, in the series the plugin exports.
	leakExpr := exprs["NriHousekeeperLeaksPersisting"]
	soonExpr := strings.Replace(leakExpr, "> 3600", "> 1", 1)
	if soonExpr == leakExpr {
		t.Fatalf("the leak alert's expression %q has no \"> 3600\" to lower", leakExpr)
	}
	var leaks []sample
	took := waitFor(t, "the leak alert's expression, at 1 s, sees the sandbox removal waiting", 30*time.Second, func() bool {
		leaks = prom.query(t, soonExpr)
		for _, s := range leaks {
			if s.Metric["kind"] == "remove-sandbox" && s.Value > 1 {
				return true
			}
		}
		return false
	})
	t.Logf("%s: %v after the leak (%d series)", soonExpr, took.Round(time.Millisecond), len(leaks))
	// Prometheus's numbers are the plugin's: each waiting step's age, as
	// the plugin exported it at the last scrape (ages only grow while
	// dry_run holds the leak).
	s, _ := scrapeMetrics(t, addr)
	for _, l := range leaks {
		now := s.value("nri_housekeeper_oldest_leak_seconds", map[string]string{"kind": l.Metric["kind"]})
		if l.Value > now || l.Value < now-10 {
			t.Errorf("prometheus: %s waiting %vs, the plugin exports %vs a moment later", l.Metric["kind"], l.Value, now)
		}
		if l.Metric["job"] != "nri-housekeeper" || l.Metric["instance"] != addr {
			t.Errorf("leak series without the target's labels: %v", l.Metric)
		}
	}
	if st := prom.rules(t)["NriHousekeeperLeaksPersisting"]; st.State != "inactive" || st.Health != "ok" {
		t.Errorf("the leak rule is %s (%s) with steps waiting seconds, not an hour", st.State, st.Health)
	}

	// While passes run, the stale expression is empty: none of its parts
	// holds, and absent() is empty since the timestamp is scraped. Watched
	// for a few evaluations, and the timestamp must move meanwhile.
	staleExpr := exprs["NriHousekeeperStale"]
	const tsQuery = "nri_housekeeper_last_successful_pass_timestamp_seconds"
	before := prom.query(t, tsQuery)
	if len(before) != 1 || before[0].Value <= 0 {
		t.Fatalf("%s = %v, want one series > 0", tsQuery, before)
	}
	for range 5 {
		if got := prom.query(t, staleExpr); len(got) != 0 {
			t.Fatalf("the stale alert's expression is %v while passes run", got)
		}
		time.Sleep(time.Second)
	}
	after := prom.query(t, tsQuery)
	if len(after) != 1 || after[0].Value <= before[0].Value {
		t.Fatalf("%s went from %v to %v: no pass in 5 s", tsQuery, before, after)
	}
	if st := prom.rules(t)["NriHousekeeperStale"].State; st != "inactive" {
		t.Errorf("NriHousekeeperStale is %s while passes run", st)
	}

	// dry_run held the leak through all this.
	for _, id := range append([]string{sb}, ctrs...) {
		if !runtimeHas(t, node, id) {
			t.Fatalf("dry_run reclaimed %s", id)
		}
	}
}
