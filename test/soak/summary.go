package soak

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// SummaryFormat names the summary's format; it changes when a line of
// Summary.String changes meaning.
const SummaryFormat = "soak/v1"

// Summary is the result of one soak, printed at its end by String (the
// format README.md documents) and written as JSON (summary.json in the
// soak's work dir). Durations in the JSON are nanoseconds.
type Summary struct {
	Format   string   `json:"format"`
	Verdict  string   `json:"verdict"` // PASS or FAIL
	Failures []string `json:"failures"`

	Seed     uint64        `json:"seed"`
	Schedule string        `json:"schedule"` // Plan.Fingerprint
	Planned  PlanCounts    `json:"planned"`
	Duration time.Duration `json:"duration"` // the chaos phase (DURATION)
	Total    time.Duration `json:"total"`    // lab up to checks done
	Config   string        `json:"config"`
	Build    string        `json:"build"`   // which plugin binary ran
	LogFS    string        `json:"log_fs"`  // the pod log file system the disk-full faults fill
	MaxLag   time.Duration `json:"max_lag"` // how far the stand-in ran behind its schedule, at worst

	Pods   PodCounts      `json:"pods"`
	Leaks  map[string]int `json:"leaks"` // leaks made, by kind
	Faults []FaultCount   `json:"faults"`

	Actions             []ActionCount `json:"actions"`
	FalseEvictions      []string      `json:"false_evictions"`        // must be empty
	LostLive            []string      `json:"lost_live"`              // must be empty
	AbortedOnLive       []string      `json:"aborted_on_live"`        // informational
	Unknown             []string      `json:"unknown_objects"`        // informational, but network steps and unknown kinds: they fail (Failures)
	OrphanReports       int           `json:"orphan_reports"`         // "orphaned live pod" warnings
	OrphanReportsOnLive int           `json:"orphan_reports_on_live"` // ... naming a live pod: must be 0
	StandInProblems     []string      `json:"stand_in_problems"`      // the stand-in's own trouble (not the plugin's)

	Reclaim ReclaimSummary `json:"reclaim"`
	Network []string       `json:"network_leftovers"` // must be empty

	Plugin PluginSummary `json:"plugin"`
}

// PlanCounts is the size of the schedule.
type PlanCounts struct {
	Pods, Ops, Faults int
}

// PodCounts is what the stand-in did.
type PodCounts struct {
	Created      int `json:"created"`       // pods that ran
	CreateFailed int `json:"create_failed"` // creations given up (the pod was cleaned up)
	Deleted      int `json:"deleted"`       // planned deletes done (clean or leaking)
	LiveAtEnd    int `json:"live_at_end"`
	Restarts     int `json:"container_restarts"`
	SbRestarts   int `json:"sandbox_restarts"`
	Skipped      int `json:"skipped_ops"` // ops whose pod was not there (its creation failed)
}

// FaultCount is one fault kind: planned and injected.
type FaultCount struct {
	Kind    string `json:"kind"`
	Planned int    `json:"planned"`
	Done    int    `json:"done"`
	Detail  string `json:"detail,omitempty"`
}

// ActionCount is the number of action lines of one kind, rule and result.
type ActionCount struct {
	Kind   string `json:"kind"`
	Rule   string `json:"rule"`
	Result string `json:"result"`
	N      int    `json:"n"`
}

// ReclaimSummary is how the leaks went.
type ReclaimSummary struct {
	Objects   int `json:"objects"`   // leaked objects the plugin must reclaim
	Reclaimed int `json:"reclaimed"` // gone by the end
	Late      int `json:"late"`      // gone, but after their bound
	// AfterRetry: gone after their bound, but within the plugin's logged
	// retry_at + a period of a step that failed (not late: a failure waits
	// for its backoff).
	AfterRetry int `json:"after_retry"`
	Missing    int `json:"missing"` // still there at the end
	// ByDesign: objects of pod-dir leaks the plugin may not reclaim: no run
	// of it saw the pod torn down (it was down then, or was killed before
	// the pass that would have marked it), and it only removes orphaned pod
	// dirs of pods it saw torn down. Only a teardown a fault came near
	// counts here; one no fault came near is Missing.
	ByDesign  int       `json:"by_design"`
	LastFault time.Time `json:"last_fault"` // the end of the last fault
	// Worst: the longest time from max(last fault, leak made) to an
	// object's reclaim, and which object.
	Worst       time.Duration `json:"worst_after_last_fault"`
	WorstObject string        `json:"worst_object"`
	Bound       string        `json:"bound"`
	Details     []string      `json:"details"` // late and missing objects
}

// PluginSummary is the plugin process over the soak.
type PluginSummary struct {
	Runs            int     `json:"runs"`
	Kills           int     `json:"kills"`
	UnexpectedExits int     `json:"unexpected_exits"`
	Panics          int     `json:"panics"`
	LogLines        int     `json:"log_lines"`
	ErrorLines      int     `json:"error_lines"`
	Samples         int     `json:"samples"`
	RSSStart        float64 `json:"rss_start_mib"`
	RSSEnd          float64 `json:"rss_end_mib"`
	RSSFirstThird   float64 `json:"rss_first_third_mib"` // medians over the judged run
	RSSLastThird    float64 `json:"rss_last_third_mib"`
	GoStart         float64 `json:"goroutines_start"`
	GoEnd           float64 `json:"goroutines_end"`
	GoFirstThird    float64 `json:"goroutines_first_third"`
	GoLastThird     float64 `json:"goroutines_last_third"`
	// Flat: "flat", "GROWING" or "not judged (...)"; JudgedRun: which
	// plugin run, and over how long.
	Flat       string         `json:"flat"`
	JudgedRun  string         `json:"judged_run"`
	CPUSeconds float64        `json:"cpu_seconds"`
	Passes     int            `json:"passes"`
	CPUPerPass time.Duration  `json:"cpu_per_pass"`
	MeanPass   time.Duration  `json:"mean_pass"`
	ByResult   map[string]int `json:"passes_by_result"`
	Healthz    int            `json:"healthz"` // status of /healthz at the end
}

// JSON is the summary as indented JSON.
func (s Summary) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return b
}

func joinCounts(m map[string]int, order []string) string {
	var parts []string
	seen := map[string]bool{}
	for _, k := range order {
		seen[k] = true
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	for _, k := range sortedKeys(m) {
		if !seen[k] && m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func listLines(b *strings.Builder, items []string, max int) {
	for i, it := range items {
		if i == max {
			fmt.Fprintf(b, "    ... %d more (summary.json has them all)\n", len(items)-max)
			break
		}
		fmt.Fprintf(b, "    %s\n", strings.ReplaceAll(it, "\n", "\n    "))
	}
}

// String renders the summary (format SummaryFormat, see README.md): a
// header, then one "name  value" line per item in a fixed order, with
// indented detail lines under some of them.
func (s Summary) String() string {
	var b strings.Builder
	line := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-19s %s\n", name, fmt.Sprintf(format, args...))
	}
	fmt.Fprintf(&b, "=== nri-housekeeper chaos soak: summary (%s) ===\n", s.Format)
	line("verdict", "%s", s.Verdict)
	line("seed", "%d (replay: make soak DURATION=%s SEED=%d)", s.Seed, s.Duration, s.Seed)
	line("schedule", "%s (%d pods, %d stand-in steps, %d faults planned)", s.Schedule, s.Planned.Pods, s.Planned.Ops, s.Planned.Faults)
	line("duration", "chaos %s, total %s", s.Duration, s.Total.Round(time.Second))
	line("config", "%s", s.Config)
	line("plugin build", "%s", s.Build)
	line("pod log fs", "%s", s.LogFS)
	p := s.Pods
	line("pods", "created %d (creation given up %d), deleted %d, live at end %d, container restarts %d, sandbox restarts %d, skipped steps %d",
		p.Created, p.CreateFailed, p.Deleted, p.LiveAtEnd, p.Restarts, p.SbRestarts, p.Skipped)
	line("stand-in lag", "at most %s behind its schedule", s.MaxLag.Round(10*time.Millisecond))
	leakOrder := make([]string, len(LeakKinds))
	for i, k := range LeakKinds {
		leakOrder[i] = string(k)
	}
	line("leaks made", "%d: %s", sum(s.Leaks), joinCounts(s.Leaks, leakOrder))
	var fparts []string
	planned, done := 0, 0
	for _, f := range s.Faults {
		planned, done = planned+f.Planned, done+f.Done
		part := fmt.Sprintf("%s %d/%d", f.Kind, f.Done, f.Planned)
		if f.Detail != "" {
			part += " (" + f.Detail + ")"
		}
		fparts = append(fparts, part)
	}
	line("faults", "%d of %d planned injected: %s", done, planned, strings.Join(fparts, ", "))
	byResult := map[string]int{}
	total := 0
	for _, a := range s.Actions {
		byResult[a.Result] += a.N
		total += a.N
	}
	line("actions", "%d logged: %s", total, joinCounts(byResult, []string{"success", "error", "aborted", "would"}))
	if len(s.Actions) > 0 {
		fmt.Fprintf(&b, "    %-22s %-34s %-8s %6s\n", "KIND", "RULE", "RESULT", "N")
		for _, a := range s.Actions {
			fmt.Fprintf(&b, "    %-22s %-34s %-8s %6d\n", a.Kind, a.Rule, a.Result, a.N)
		}
	}
	line("false evictions", "%d", len(s.FalseEvictions))
	listLines(&b, s.FalseEvictions, 10)
	line("lost live objects", "%d", len(s.LostLive))
	listLines(&b, s.LostLive, 10)
	line("aborted on live", "%d (steps the re-check right before them stopped)", len(s.AbortedOnLive))
	listLines(&b, s.AbortedOnLive, 5)
	line("unknown objects", "%d (actions on objects the stand-in never recorded)", len(s.Unknown))
	listLines(&b, s.Unknown, 5)
	line("orphan reports", "%d, %d of them on live pods (with orphans.action = \"stop\" these would be evictions)", s.OrphanReports, s.OrphanReportsOnLive)
	r := s.Reclaim
	line("reclaim", "%d leaked objects: %d reclaimed (%d after their bound, %d after a failed step's retry), %d missing, %d left by design (pod-dir leaks the plugin did not see torn down)",
		r.Objects, r.Reclaimed, r.Late, r.AfterRetry, r.Missing, r.ByDesign)
	if !r.LastFault.IsZero() {
		line("worst reclaim", "%s after max(end of the last fault %s, leak made): %s; bound: %s", r.Worst.Round(10*time.Millisecond), stamp(r.LastFault), r.WorstObject, r.Bound)
	}
	listLines(&b, r.Details, 10)
	line("network leftovers", "%d", len(s.Network))
	listLines(&b, s.Network, 10)
	pl := s.Plugin
	line("plugin runs", "%d (%d kills, %d unexpected exits), panics %d, log lines %d (error %d)",
		pl.Runs, pl.Kills, pl.UnexpectedExits, pl.Panics, pl.LogLines, pl.ErrorLines)
	line("plugin RSS", "start %.1f MiB, end %.1f MiB; judged run: %.1f -> %.1f MiB (medians of its first and last thirds)",
		pl.RSSStart, pl.RSSEnd, pl.RSSFirstThird, pl.RSSLastThird)
	line("goroutines", "start %.0f, end %.0f; judged run: %.0f -> %.0f", pl.GoStart, pl.GoEnd, pl.GoFirstThird, pl.GoLastThird)
	line("flat", "%s; %s; %d samples every 10s", pl.Flat, pl.JudgedRun, pl.Samples)
	line("CPU per pass", "%s (%.2f CPU-s over %d passes; mean pass %s)", pl.CPUPerPass.Round(10*time.Microsecond), pl.CPUSeconds, pl.Passes, pl.MeanPass.Round(10*time.Microsecond))
	line("passes", "%s", joinCounts(pl.ByResult, []string{"ok", "listing_failed", "listing_untrusted", "skipped_not_ready"}))
	line("/healthz", "%d", pl.Healthz)
	if len(s.StandInProblems) > 0 {
		line("stand-in problems", "%d", len(s.StandInProblems))
		listLines(&b, s.StandInProblems, 10)
	}
	if len(s.Failures) == 0 {
		line("failures", "none")
	} else {
		line("failures", "%d", len(s.Failures))
		listLines(&b, s.Failures, 50)
	}
	return b.String()
}

// sortFaultCounts orders fault counts as FaultKinds.
func sortFaultCounts(fc []FaultCount) {
	rank := map[string]int{}
	for i, k := range FaultKinds {
		rank[string(k)] = i
	}
	sort.SliceStable(fc, func(i, j int) bool { return rank[fc[i].Kind] < rank[fc[j].Kind] })
}
