package soak

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The plugin logs with logrus' text format (package logging): millisecond
// timestamps with the zone, msg, level and the structured fields of every
// action (action=, rule=, pod_uid=, sandbox_id=, container_id=, path=,
// took=). An action line is written once the action has run (after its
// wave); the "housekeeping pass" line that follows it in the same plugin
// run has the pass's duration, so an action ran between that pass's start
// and its own line. The checker judges that whole window: an action is a
// false eviction when its object was live at any instant of it.

// logTimeLayout is package logging's TimestampFormat.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Entry is one parsed log line.
type Entry struct {
	Line   int // 1-based line number in the log file
	T      time.Time
	Level  string
	Msg    string
	Fields map[string]string
	Run    int // which plugin run wrote it: the number of "nri-housekeeper starting" lines up to it
	Raw    string
}

// ParseLine parses one logrus text line (key=value, values quoted with Go
// syntax where needed). ok is false when the line is not one (a panic's
// stack trace, say).
func ParseLine(line string) (fields map[string]string, ok bool) {
	fields = map[string]string{}
	s := line
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \"") {
			return nil, false
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, false
			}
			v, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, false
			}
			val, s = v, s[end+1:]
		} else {
			sp := strings.IndexByte(s, ' ')
			if sp < 0 {
				sp = len(s)
			}
			val, s = s[:sp], s[sp:]
		}
		fields[key] = val
	}
	_, hasTime := fields["time"]
	_, hasLevel := fields["level"]
	return fields, hasTime && hasLevel
}

// ParseLog reads the plugin's log. Lines that are not logrus lines are
// returned as other (stack traces, stray output).
func ParseLog(r io.Reader) (entries []Entry, other []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	run, n := 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		f, ok := ParseLine(line)
		if !ok {
			if strings.TrimSpace(line) != "" {
				other = append(other, fmt.Sprintf("%d: %s", n, line))
			}
			continue
		}
		t, err := time.Parse(logTimeLayout, f["time"])
		if err != nil {
			other = append(other, fmt.Sprintf("%d: %s", n, line))
			continue
		}
		e := Entry{Line: n, T: t, Level: f["level"], Msg: f["msg"], Fields: f, Raw: line}
		if e.Msg == "nri-housekeeper starting" {
			run++
		}
		e.Run = run
		delete(f, "time")
		delete(f, "level")
		delete(f, "msg")
		entries = append(entries, e)
	}
	return entries, other, sc.Err()
}

// Result is what an action line says became of the action (the executor's
// results, as its log lines word them).
type Result string

const (
	ResultDone    Result = "success"
	ResultWould   Result = "would"
	ResultFailed  Result = "error"
	ResultAborted Result = "aborted"
	ResultBackoff Result = "backoff"
	ResultSkipped Result = "skipped"
	ResultNotDue  Result = "not-due" // a plan line (debug), not an action
	ResultOther   Result = "other"
)

// Classify returns the result an action line stands for.
func Classify(e Entry) Result {
	m := e.Msg
	switch {
	case strings.HasPrefix(m, "would "):
		return ResultWould
	case strings.HasPrefix(m, "failed to "):
		return ResultFailed
	case strings.HasPrefix(m, "not done: checked again right before it"):
		return ResultAborted
	case strings.HasPrefix(m, "backing off: "):
		return ResultBackoff
	case strings.HasPrefix(m, "skipped: "):
		return ResultSkipped
	case strings.HasPrefix(m, "not due: "):
		return ResultNotDue
	case e.Level == "info":
		return ResultDone
	}
	return ResultOther
}

// Verdict is the checker's judgement of one action line.
type Verdict struct {
	Entry  Entry
	Result Result
	Target string    // the object, as the ground truth names it
	Why    string    // for a violation: when the object was live
	From   time.Time // the window the action ran in
	Until  time.Time
}

func (v Verdict) String() string {
	return fmt.Sprintf("log line %d (%s, run %d): %s %s on %s, ran within [%s, %s]; %s\n    %s",
		v.Entry.Line, stamp(v.Entry.T), v.Entry.Run, v.Result, v.Entry.Fields["action"], v.Target,
		stamp(v.From), stamp(v.Until), v.Why, v.Entry.Raw)
}

// ActionKey counts actions.
type ActionKey struct{ Kind, Rule, Result string }

// Check is what the checker found in the log.
type Check struct {
	Entries        int
	Other          []string // non-logrus lines
	Actions        map[ActionKey]int
	FalseEvictions []Verdict // done, would or failed on a live object
	AbortedOnLive  []Verdict // aborted by the re-check on a live object (the safety net held)
	Unknown        []Verdict // on an object the stand-in never made
	// Unjudged: the unknown actions that fail the run, as the checker
	// cannot tell that they spared every live object: a network step
	// (CNI DEL, IP release, netns removal) whose owner and netns name no
	// sandbox the stand-in made (a remove-netns may name no owner at all:
	// only its path says whose netns it was), and an action of a kind the
	// checker does not know.
	Unjudged []Verdict
	// Reclaimed: when the plugin reclaimed each object (first success).
	Reclaimed map[string]time.Time
	// RetryAt: the last failed attempt's retry_at, per object.
	RetryAt map[string]time.Time
	// Removed: the pods each plugin run logged as Removed and seen torn
	// down (torn_down=true), by UID: the runs.
	Removed map[string][]int
	// OrphanReports: pods reported as orphaned live pods, and whether the
	// pod was live (a wrong report) when it was.
	OrphanReports, OrphanReportsOnLive int
	Levels                             map[string]int
	Panics                             []string
	Runs                               int
	// ErrorMsgs: distinct error-level messages, with counts.
	ErrorMsgs map[string]int
}

// ReclaimKey names a leaked object for Check.Reclaimed.
func ReclaimKey(kind, id string) string { return kind + ":" + id }

// CheckLog judges every action line of the plugin's log against the ground
// truth.
func CheckLog(entries []Entry, other []string, tr *Truth) *Check {
	c := &Check{Entries: len(entries), Other: other, Actions: map[ActionKey]int{}, Reclaimed: map[string]time.Time{},
		RetryAt: map[string]time.Time{}, Removed: map[string][]int{}, Levels: map[string]int{}, ErrorMsgs: map[string]int{}}
	for _, o := range other {
		if strings.Contains(o, "panic") || strings.Contains(o, "fatal error") || strings.HasPrefix(strings.SplitN(o, ": ", 2)[1], "goroutine ") {
			c.Panics = append(c.Panics, o)
		}
	}
	// The end of each pass that logged, for every line before it in the
	// same run: passEnd[i] is the index of the next "housekeeping pass"
	// line, -1 if the run ended first.
	passEnd := make([]int, len(entries))
	next := -1
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Msg == "housekeeping pass" {
			next = i
		}
		passEnd[i] = next
		if e.Msg == "nri-housekeeper starting" {
			next = -1
		}
	}
	// Sandboxes the plugin removed: their network objects are unowned from then on.
	pluginRemoved := map[string]time.Time{}
	for _, e := range entries {
		if e.Fields["action"] == "remove-sandbox" && Classify(e) == ResultDone {
			if _, ok := pluginRemoved[e.Fields["sandbox_id"]]; !ok {
				pluginRemoved[e.Fields["sandbox_id"]] = e.T
			}
		}
	}
	for i, e := range entries {
		c.Levels[e.Level]++
		if e.Run > c.Runs {
			c.Runs = e.Run
		}
		if e.Level == "panic" || e.Level == "fatal" || strings.Contains(e.Msg, "panic") {
			c.Panics = append(c.Panics, e.Raw)
		}
		if e.Level == "error" {
			c.ErrorMsgs[e.Msg]++
		}
		// A pod said Removed without a teardown (its sandbox went from the
		// runtime while NRI's stop and removal were lost, as across a
		// plugin pause) is not marked: its pod dir is left by design. One
		// marked later ("seen torn down after all") is said with
		// torn_down=true too.
		if e.Fields["phase"] == "Removed" && e.Fields["torn_down"] == "true" && e.Fields["pod_uid"] != "" {
			c.Removed[e.Fields["pod_uid"]] = append(c.Removed[e.Fields["pod_uid"]], e.Run)
		}
		if e.Fields["rule"] == "orphans.stop" && e.Fields["action"] == "" {
			c.OrphanReports++
			if p := tr.Pod(e.Fields["pod_uid"]); p != nil && p.LiveAt(e.T) {
				c.OrphanReportsOnLive++
			}
		}
		kind := e.Fields["action"]
		if kind == "" {
			continue
		}
		res := Classify(e)
		if res == ResultNotDue {
			continue
		}
		c.Actions[ActionKey{kind, e.Fields["rule"], string(res)}]++
		if res != ResultDone && res != ResultWould && res != ResultFailed && res != ResultAborted {
			continue
		}
		v := Verdict{Entry: e, Result: res, Until: e.T.Add(time.Millisecond)}
		if j := passEnd[i]; j >= 0 {
			took, _ := time.ParseDuration(entries[j].Fields["took"])
			v.From = entries[j].T.Add(-took - time.Millisecond)
		} else {
			took, _ := time.ParseDuration(e.Fields["took"])
			v.From = e.T.Add(-took - 2*time.Second)
		}
		if v.From.After(v.Until) { // a clock step: judge a window of its own
			v.From = v.Until.Add(-2 * time.Second)
		}
		iv, target, key, known := resolve(tr, e, pluginRemoved)
		v.Target = target
		if !known {
			c.Unknown = append(c.Unknown, v)
			if networkKinds[kind] || !checkedKinds[kind] {
				v.Why = "cannot be judged: " + unjudgedWhy(kind)
				c.Unjudged = append(c.Unjudged, v)
			}
			continue
		}
		if iv.overlaps(v.From, v.Until) {
			to := "still live at the end"
			if !iv.to.IsZero() {
				to = "until " + stamp(iv.to)
			}
			v.Why = fmt.Sprintf("live from %s %s", stamp(iv.from), to)
			if res == ResultAborted {
				c.AbortedOnLive = append(c.AbortedOnLive, v)
			} else {
				c.FalseEvictions = append(c.FalseEvictions, v)
			}
			continue
		}
		if key == "" {
			continue
		}
		switch res {
		case ResultDone:
			if _, ok := c.Reclaimed[key]; !ok {
				c.Reclaimed[key] = e.T
			}
		case ResultFailed:
			if at, err := time.Parse(time.RFC3339, e.Fields["retry_at"]); err == nil {
				c.RetryAt[key] = at
			}
		}
	}
	return c
}

// checkedKinds are the action kinds resolve knows (gc.Kinds); networkKinds
// those of the network side.
var (
	checkedKinds = map[string]bool{"stop-container": true, "remove-container": true, "stop-sandbox": true, "remove-sandbox": true,
		"remove-pod-log-dir": true, "remove-log-link": true, "remove-pod-cgroup": true, "reduce-pod-cgroup-cpu": true, "remove-pod-dir": true,
		"remove-cni-attachment": true, "release-ip": true, "remove-netns": true}
	networkKinds = map[string]bool{"remove-cni-attachment": true, "release-ip": true, "remove-netns": true}
)

func unjudgedWhy(kind string) string {
	if !checkedKinds[kind] {
		return "an action kind the checker does not know"
	}
	return "a network step whose owner (container_id) and netns (path) name no sandbox the stand-in made"
}

// UnjudgedFailures are the run's failures for c.Unjudged, one a line.
func (c *Check) UnjudgedFailures() []string {
	var out []string
	for _, v := range c.Unjudged {
		out = append(out, "unjudged action: "+v.String())
	}
	return out
}

// resolve finds the object of an action line in the ground truth: when it
// was live, how to name it, and its reclaim key ("" for actions that
// reclaim nothing, like a CPU reduction).
func resolve(tr *Truth, e Entry, pluginRemoved map[string]time.Time) (iv liveInterval, target, key string, known bool) {
	f := e.Fields
	switch kind := f["action"]; kind {
	case "stop-container", "remove-container":
		o := tr.Object(f["container_id"])
		if o == nil || o.Kind != KindContainer {
			return iv, "container " + short(f["container_id"]), "", false
		}
		return o.interval(), o.describe(), ReclaimKey("container", o.ID), true
	case "stop-sandbox", "remove-sandbox":
		o := tr.Object(f["sandbox_id"])
		if o == nil || o.Kind != KindSandbox {
			return iv, "sandbox " + short(f["sandbox_id"]), "", false
		}
		return o.interval(), o.describe(), ReclaimKey("sandbox", o.ID), true
	case "remove-pod-log-dir":
		p := tr.PodByLogDir(f["path"])
		if p == nil {
			return iv, "pod log dir " + f["path"], "", false
		}
		return p.interval(), "pod log dir of " + p.NS + "/" + p.Name, ReclaimKey("logdir", p.LogDir), true
	case "remove-log-link":
		l := tr.Link(f["path"])
		if l == nil {
			return iv, "log link " + f["path"], "", false
		}
		return l.Container.interval(), "log link of " + l.Container.describe(), ReclaimKey("link", l.Path), true
	case "remove-pod-cgroup", "reduce-pod-cgroup-cpu", "remove-pod-dir":
		p := tr.Pod(f["pod_uid"])
		if p == nil {
			return iv, kind + " of pod " + f["pod_uid"], "", false
		}
		what, rk := "pod cgroup", ReclaimKey("cgroup", p.UID)
		switch kind {
		case "reduce-pod-cgroup-cpu":
			rk = ""
		case "remove-pod-dir":
			what, rk = "pod dir", ReclaimKey("poddir", p.UID)
		}
		return p.interval(), what + " of " + p.NS + "/" + p.Name, rk, true
	case "remove-cni-attachment", "release-ip", "remove-netns":
		// A network object is its sandbox's: the owner a CNI attachment or
		// a reservation names (a container's is its sandbox's network), or
		// for a netns, the sandbox whose netns it is, whatever owner the
		// line names (the owner of an attachment that ran in it, or none).
		o := tr.Object(f["container_id"])
		if o != nil && o.Kind == KindContainer {
			o = o.Sandbox
		}
		if kind == "remove-netns" {
			if ns := tr.SandboxByNetns(f["path"]); ns != nil {
				o = ns
			}
		}
		if o == nil || o.Kind != KindSandbox {
			return iv, kind + " owned by " + cmpOr(short(f["container_id"]), "nobody") + " (" + f["path"] + ")", "", false
		}
		iv = liveInterval{from: o.Born, to: o.Removed}
		if at, ok := pluginRemoved[o.ID]; ok && (iv.to.IsZero() || at.Before(iv.to)) {
			iv.to = at
		}
		return iv, "network object " + f["path"] + " of " + o.describe() + " (owned until the sandbox was removed)", "", true
	}
	return iv, "unknown action " + f["action"], "", false
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// SortedActions returns the action counts in a stable order.
func (c *Check) SortedActions() []ActionCount {
	var out []ActionCount
	for k, n := range c.Actions {
		out = append(out, ActionCount{Kind: k.Kind, Rule: k.Rule, Result: k.Result, N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Result < b.Result
	})
	return out
}
