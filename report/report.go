// Package report renders one housekeeping plan for a person (a table) or a
// program (JSON): what was found leaked, what is or would be done and why,
// and why each suspicious object is kept.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
)

// Report is the JSON form; the text form shows the same.
type Report struct {
	// Command is the command that made it: report, or once.
	Command     string    `json:"command"`
	GeneratedAt time.Time `json:"generated_at"`
	Runtime     Runtime   `json:"runtime"`
	Blocked     string    `json:"blocked,omitempty"`
	// Sources says whether the listing and kubelet's pod dirs were
	// trusted this pass, and why not.
	Sources Sources `json:"sources"`
	// Budget lists the budget classes this pass refused (paused).
	Budget []Trip `json:"budget_trips"`
	// Skipped are the pods with a life event after the listing.
	Skipped []Pod          `json:"skipped_pods,omitempty"`
	Leaks   map[string]int `json:"leaks"`
	// LeaksNotLooked says which leaks were not looked for, and why: none
	// while nothing was planned (Blocked by a source not ready), the
	// pod-gone ones while kubelet's pod dirs are not trusted, and those of
	// a part the pass could not read (AddNotLookedFor). Leaks does not
	// count them: "none" would read as a clean node.
	LeaksNotLooked string `json:"leaks_not_looked_for,omitempty"`
	Actions        []Item `json:"actions"`
	Deferred       []Item `json:"deferred"`
	Kept           []Item `json:"kept"`
}

// Sources is the trust of each source the plan rests on.
type Sources struct {
	Listing Trust `json:"runtime_listing"`
	Oracle  Trust `json:"pod_oracle"`
}

// Trust is one source's: checked and trusted, checked and not trusted
// (why), or not checked (why).
type Trust struct {
	Checked bool   `json:"checked"`
	Trusted bool   `json:"trusted"`
	Why     string `json:"why,omitempty"`
}

// listingTrust is the listing's: checked against NRI by the running plugin
// only.
func listingTrust(plan gc.Result) Trust {
	if !plan.ListingChecked {
		return Trust{Why: "no NRI side: only the running plugin compares the listing with what NRI reported"}
	}
	return Trust{Checked: true, Trusted: plan.Untrusted == "", Why: plan.Untrusted}
}

// oracleTrust is the oracle's: not checked when it is not ready, or
// disabled.
func oracleTrust(plan gc.Result) Trust {
	switch {
	case plan.NotReady != "":
		return Trust{Why: plan.NotReady}
	case !plan.OracleChecked:
		return Trust{Why: "pods.source = \"none\": no pod is ever gone"}
	}
	return Trust{Checked: true, Trusted: plan.OracleUntrusted == "", Why: plan.OracleUntrusted}
}

// Runtime summarises the listing the plan was made from.
type Runtime struct {
	Sandboxes       int            `json:"sandboxes"`
	ReadySandboxes  int            `json:"ready_sandboxes"`
	Containers      int            `json:"containers"`
	ContainersState map[string]int `json:"containers_by_state"`
}

// Item is one action or kept object.
type Item struct {
	Action string `json:"action,omitempty"`
	Rule   string `json:"rule,omitempty"`
	Pod    Pod    `json:"pod,omitzero"` // none for a row about no pod (an IP reservation)
	Object string `json:"object"`
	Why    string `json:"why"`
}

// Pod names a pod: its UID, and its namespace and name when known.
type Pod struct {
	UID       string `json:"uid,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

func pod(p gc.PodRef) Pod { return Pod{UID: p.UID, Namespace: p.Namespace, Name: p.Name} }

func pods(ps []gc.PodRef) []Pod {
	var out []Pod
	for _, p := range ps {
		out = append(out, pod(p))
	}
	return out
}

// Trip is a budget class the pass refused (see gc.Trip).
type Trip struct {
	Class          string `json:"class"`
	Due            int    `json:"due"`
	Allowed        int    `json:"allowed"`
	PerPass        int    `json:"per_pass"`
	HourSpent      int    `json:"hour_spent"`
	MaxPerHour     int    `json:"max_per_hour"`
	ReadySandboxes int    `json:"ready_sandboxes"`
	Refused        int    `json:"refused"`
	AffectedPods   []Pod  `json:"affected_pods"`
	Message        string `json:"message"`
}

func trips(ts []gc.Trip) []Trip {
	var out []Trip
	for _, t := range ts {
		out = append(out, Trip{Class: t.Class, Due: t.Due, Allowed: t.Allowed, PerPass: t.PerPass, HourSpent: t.HourSpent,
			MaxPerHour: t.MaxPerHour, ReadySandboxes: t.ReadySandbox, Refused: t.Refused, AffectedPods: pods(t.AffectedPods), Message: t.Message})
	}
	return out
}

// AddNotLookedFor adds to LeaksNotLooked the leaks the pass could not look
// for while the rest went on (housekeeping.PassResult.NotLookedFor).
func (r *Report) AddNotLookedFor(parts []string) {
	if len(parts) == 0 || strings.HasPrefix(r.LeaksNotLooked, "every kind") {
		return
	}
	all := parts
	if r.LeaksNotLooked != "" {
		all = append([]string{r.LeaksNotLooked}, parts...)
	}
	r.LeaksNotLooked = strings.Join(all, "; ")
}

// Build turns a plan into a Report.
func Build(now time.Time, snap cri.Snapshot, plan gc.Result, blocked string) Report {
	r := Report{GeneratedAt: now, Blocked: blocked, Leaks: plan.Leaks, Budget: trips(plan.Trips), Skipped: pods(plan.Skipped),
		Sources: Sources{Listing: listingTrust(plan), Oracle: oracleTrust(plan)},
		Runtime: Runtime{Sandboxes: len(snap.Sandboxes), Containers: len(snap.Containers), ContainersState: map[string]int{}},
		Actions: []Item{}, Deferred: []Item{}, Kept: []Item{}}
	if r.Budget == nil {
		r.Budget = []Trip{}
	}
	if plan.NotReady != "" && blocked == "" {
		r.Blocked = plan.NotReady
	}
	switch {
	case plan.NotReady != "":
		r.LeaksNotLooked = "every kind: nothing was planned (" + plan.NotReady + ")"
	case plan.Untrusted != "":
		r.LeaksNotLooked = "every kind: the runtime listing is not trusted (" + plan.Untrusted + ")"
	case plan.OracleUntrusted != "":
		r.LeaksNotLooked = "those of gone pods: kubelet's pod dirs are not trusted (" + plan.OracleUntrusted + ")"
	}
	for _, s := range snap.Sandboxes {
		if s.Ready {
			r.Runtime.ReadySandboxes++
		}
	}
	for _, c := range snap.Containers {
		r.Runtime.ContainersState[string(c.State)]++
	}
	for _, a := range plan.Actions {
		r.Actions = append(r.Actions, Item{Action: string(a.Kind), Rule: a.Rule, Pod: pod(a.Pod), Object: object(a), Why: a.Reason})
	}
	for _, d := range plan.Deferred {
		r.Deferred = append(r.Deferred, Item{Action: string(d.Kind), Rule: d.Rule, Pod: pod(d.Pod), Object: object(d.Action), Why: d.Reason + "; not yet: " + d.Why()})
	}
	for _, k := range plan.Kept {
		r.Kept = append(r.Kept, Item{Pod: pod(k.Pod), Object: k.Object, Why: k.Reason})
	}
	return r
}

func object(a gc.Action) string {
	switch a.Kind {
	case gc.RemoveSandbox, gc.StopSandbox:
		return "sandbox " + a.SandboxID
	case gc.RemovePodLogDir, gc.RemoveContainerLogLink:
		return a.Path
	case gc.RemovePodCgroup, gc.ReducePodCgroupCPU:
		return "pod cgroup " + a.Path
	case gc.RemovePodDir:
		return "pod dir " + a.Path
	case gc.RemoveCNIAttachment:
		if a.Attachment != nil {
			return fmt.Sprintf("cni attachment %s of %s on network %s", a.Attachment.IfName, a.Attachment.ContainerID, a.Attachment.Network)
		}
	case gc.ReleaseIPReservation:
		if a.Reservation != nil {
			return fmt.Sprintf("ip reservation %s on network %s (owner %s)", a.Reservation.IP, a.Reservation.Network, a.Reservation.Owner)
		}
	case gc.RemoveNetns:
		return "network namespace " + a.Path
	}
	return fmt.Sprintf("container %s (%s)", a.ContainerID, a.ContainerName)
}

// JSON writes the report as indented JSON.
func JSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Text writes the report as tables.
func Text(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("nri-housekeeper %s, %s\n", cmp.Or(r.Command, "report"), r.GeneratedAt.Format(time.RFC3339))
	var states []string
	for st, n := range r.Runtime.ContainersState {
		states = append(states, fmt.Sprintf("%d %s", n, strings.ToLower(st)))
	}
	sort.Strings(states)
	byState := ""
	if len(states) > 0 {
		byState = " (" + strings.Join(states, ", ") + ")"
	}
	p("runtime: %d sandboxes (%d ready), %d containers%s\n", r.Runtime.Sandboxes, r.Runtime.ReadySandboxes,
		r.Runtime.Containers, byState)
	if r.Blocked != "" {
		p("NOT ACTING: %s\n", cell(r.Blocked))
	}
	p("sources: runtime listing %s; kubelet pod dirs %s\n", cell(trustWords(r.Sources.Listing)), cell(trustWords(r.Sources.Oracle)))
	switch leaks := (gc.Result{Leaks: r.Leaks}).LeakSummary(); {
	case strings.HasPrefix(r.LeaksNotLooked, "every kind"):
		p("leaks detected: UNKNOWN: not looked for: %s\n", cell(r.LeaksNotLooked))
	case r.LeaksNotLooked != "":
		p("leaks detected: %s; NOT LOOKED FOR: %s\n", leaks, cell(r.LeaksNotLooked))
	default:
		p("leaks detected: %s\n", leaks)
	}
	for _, t := range r.Budget {
		p("BUDGET: %s PAUSED: %s\n", t.Class, cell(t.Message))
	}
	for _, pod := range r.Skipped {
		p("SKIPPED: pod %s: a life event arrived after the listing\n", cell(fmt.Sprintf("%s/%s (%s)", pod.Namespace, pod.Name, pod.UID)))
	}
	section(tw, "due now", r.Actions, true)
	section(tw, "not due yet", r.Deferred, true)
	section(tw, "kept", r.Kept, false)
	return tw.Flush()
}

func trustWords(t Trust) string {
	switch {
	case !t.Checked:
		return "not checked (" + t.Why + ")"
	case t.Trusted:
		return "trusted"
	}
	return "NOT TRUSTED (" + t.Why + ")"
}

func section(tw *tabwriter.Writer, title string, items []Item, withAction bool) {
	fmt.Fprintf(tw, "\n%s (%d)\n", strings.ToUpper(title), len(items))
	if len(items) == 0 {
		return
	}
	if withAction {
		fmt.Fprintf(tw, "ACTION\tRULE\tPOD\tOBJECT\tWHY\n")
	} else {
		fmt.Fprintf(tw, "POD\tOBJECT\tWHY\n")
	}
	for _, it := range items {
		pod := "-"
		switch {
		case it.Pod.Name != "":
			pod = it.Pod.Namespace + "/" + it.Pod.Name
		case it.Pod.UID != "":
			// A pod known by UID alone (its cgroup or dir, nothing else).
			pod = "uid " + it.Pod.UID
		}
		pod, object, why := cell(pod), cell(shorten(it.Object)), cell(it.Why)
		if withAction {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(it.Action), cell(it.Rule), pod, object, why)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", pod, object, why)
		}
	}
}

// cell escapes what would break a table row out of a node-derived name (a
// file name in a workload's volume, a pod name): a tab, a newline or
// another control character is written as Go would quote it, so no name
// can forge a line of the report.
func cell(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shorten cuts the 64-hex-digit IDs in an object name to 13 characters for
// tables. Only IDs: a path of 64 characters (/var/log/pods/default_nginx_
// and a UID is one) is shown whole.
func shorten(s string) string {
	fields := strings.Split(s, " ")
	for i, f := range fields {
		if isID(f) {
			fields[i] = f[:13]
		}
	}
	return strings.Join(fields, " ")
}

// isID reports whether f is a container or sandbox ID: 64 lowercase hex
// digits.
func isID(f string) bool {
	if len(f) != 64 {
		return false
	}
	for _, c := range []byte(f) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
