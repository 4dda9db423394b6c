package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// The dashboard and alerts ship with the project; they must only use
// metrics this package exports, or they silently show nothing.
const (
	dashboardPath = "../packaging/observability/grafana-dashboard.json"
	alertsPath    = "../packaging/observability/alerts.yaml"
)

// metricName matches a metric of this project in a PromQL expression.
var metricName = regexp.MustCompile(`\bnri_housekeeper_[a-zA-Z0-9_:]*`)

// scrapedNames scrapes a live endpoint and returns every series name a
// query can use: histograms add _bucket, _sum and _count.
func scrapedNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, _ := serve(t, ctx, New(BuildInfo{}), (&fakeLoop{}).health(time.Minute))
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape does not parse: %v", err)
	}
	names := map[string]bool{}
	for name, mf := range mfs {
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			names[name+"_sum"] = true
			names[name+"_count"] = true
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names[name+"_bucket"] = true
		}
	}
	return names
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s does not parse: %v", dashboardPath, err)
	}
	return d
}

// dashboardExprs returns every PromQL expression of the dashboard: panel
// targets and template variable queries.
func dashboardExprs(d dashboard) []string {
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case string:
			exprs = append(exprs, q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}
	return exprs
}

func TestDashboardIsImportable(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard lacks title, uid or schemaVersion: %q %q %d", d.Title, d.UID, d.SchemaVersion)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "" || p.Title == "" || p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %d %q lacks type, title or size", p.ID, p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: target without expr, or missing or duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: target does not use the $datasource variable", p.Title)
			}
		}
	}
}

func TestDashboardHasThePanelsOperatorsNeed(t *testing.T) {
	used := map[string]bool{}
	for _, e := range dashboardExprs(loadDashboard(t)) {
		for _, name := range metricName.FindAllString(e, -1) {
			used[name] = true
		}
	}
	for _, want := range []string{
		nameLeakedObjects, nameActions, namePassDuration + "_bucket", namePasses, nameTrackedPods,
		nameNRIConnected, nameBreakerTrips, nameBudgetPaused, nameUntrusted, nameCRIErrors, nameOldestLeak, namePeriod, nameStuckTerminating,
	} {
		if !used[want] {
			t.Errorf("no dashboard panel shows %s", want)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) ruleFile {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true) // a misspelt key would be ignored by Prometheus too late
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s does not parse: %v", alertsPath, err)
	}
	return rf
}

func TestAlertRulesAreCompleteAndDocumented(t *testing.T) {
	rf := loadAlerts(t)
	var alerts []string
	for _, g := range rf.Groups {
		if g.Name == "" {
			t.Error("rule group without a name")
		}
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s has no expr", r.Alert)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity label", r.Alert)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s has no %s annotation", r.Alert, a)
				}
			}
		}
	}
	for _, want := range []string{
		"NriHousekeeperLeaksPersisting", "NriHousekeeperBreakerOpen", "NriHousekeeperSourcesDisagree", "NriHousekeeperStale", "NriHousekeeperNRIDisconnected",
		"NriHousekeeperDegraded", "NriHousekeeperNotActing",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing from %s", want, filepath.Base(alertsPath))
		}
	}
}

func TestDashboardAndAlertsUseOnlyExportedMetrics(t *testing.T) {
	scraped := scrapedNames(t)
	sources := map[string][]string{dashboardPath: dashboardExprs(loadDashboard(t))}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			sources[alertsPath] = append(sources[alertsPath], r.Expr)
		}
	}
	for file, exprs := range sources {
		found := 0
		for _, e := range exprs {
			for _, name := range metricName.FindAllString(e, -1) {
				found++
				if !scraped[name] {
					t.Errorf("%s uses %s, which a scrape does not export", filepath.Base(file), name)
				}
			}
		}
		if found == 0 {
			t.Errorf("%s: no nri_housekeeper_ metric found: extraction broken?", filepath.Base(file))
		}
	}
	// The stale alert also reads the process collector's start time.
	if !scraped["process_start_time_seconds"] {
		t.Error("process_start_time_seconds missing from the scrape (used by NriHousekeeperStale)")
	}
}
