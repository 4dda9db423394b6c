// Package metrics exposes what nri-housekeeper does as Prometheus metrics,
// and serves /metrics, /healthz and /readyz (DESIGN.md §7).
//
// It imports nothing of this project: callers pass plain values (strings,
// counts, durations), so every other package may use it. Every label takes
// its values from a fixed set (AllowedLabelValues) and anything else is
// recorded as "other", so no label ever carries a pod name, UID or ID.
//
// Metrics (all prefixed nri_housekeeper_, base units):
//
//	tracked_pods{phase,orphan}                    gauge     pods tracked, by phase and whether learned from the runtime, not NRI
//	leaked_objects{kind}                          gauge     leaked objects detected by the last plan
//	oldest_leak_seconds{kind}                     gauge     how long the oldest step of an action kind has been proposed
//	actions_total{kind,rule,result}               counter   housekeeping actions, by outcome
//	pass_duration_seconds                         histogram duration of housekeeping passes
//	passes_total{result}                          counter   housekeeping passes, by result
//	last_successful_pass_timestamp_seconds        gauge     end of the last pass with a fresh listing
//	stuck_terminating_pods                        gauge     pods Terminating for leak_grace or longer
//	period_seconds                                gauge     housekeeping.period (0 until the configuration is known)
//	breaker_trips_total{class}                    counter   passes in which the blast-radius budget refused a class
//	budget_paused{class}                          gauge     1 while the last pass refused the class (it is paused)
//	untrusted_source{source}                      gauge     1 while the last pass distrusted the source (runtime-listing, pod-oracle)
//	degraded{part}                                gauge     1 while a part of housekeeping fails on its own (network, state-file, cgroups)
//	cri_call_duration_seconds{method}             histogram CRI call latency
//	cri_errors_total{method}                      counter   failed CRI calls
//	nri_events_total{event}                       counter   NRI events received
//	nri_connected                                 gauge     1 while registered with the runtime
//	nri_reconnects_total                          counter   NRI reconnections
//	build_info{version,goversion,nri_version}     gauge     always 1
//
// plus the Go runtime (go_*) and process (process_*) collectors.
package metrics

import (
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const namespace = "nri_housekeeper"

// Full metric names, for AllowedLabelValues and the tests.
const (
	nameTrackedPods      = namespace + "_tracked_pods"
	nameLeakedObjects    = namespace + "_leaked_objects"
	nameOldestLeak       = namespace + "_oldest_leak_seconds"
	nameActions          = namespace + "_actions_total"
	namePassDuration     = namespace + "_pass_duration_seconds"
	namePasses           = namespace + "_passes_total"
	nameLastSuccess      = namespace + "_last_successful_pass_timestamp_seconds"
	nameStuckTerminating = namespace + "_stuck_terminating_pods"
	namePeriod           = namespace + "_period_seconds"
	nameBreakerTrips     = namespace + "_breaker_trips_total"
	nameBudgetPaused     = namespace + "_budget_paused"
	nameUntrusted        = namespace + "_untrusted_source"
	nameDegraded         = namespace + "_degraded"
	nameCRIDuration      = namespace + "_cri_call_duration_seconds"
	nameCRIErrors        = namespace + "_cri_errors_total"
	nameNRIEvents        = namespace + "_nri_events_total"
	nameNRIConnected     = namespace + "_nri_connected"
	nameNRIReconnects    = namespace + "_nri_reconnects_total"
	nameBuildInfo        = namespace + "_build_info"
)

// unknown stands for an empty BuildInfo field.
const unknown = "unknown"

// passBuckets span 1 ms (an idle node) to 60 s (far beyond
// housekeeping.slow_pass_warning, 15 s by default, which gets its own bound).
// A function, not a variable: no package-level mutable state.
func passBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60}
}

// criBuckets span 0.5 ms (a local listing of a small node) to 10 s
// (runtime.rpc_timeout by default: a call never takes longer).
func criBuckets() []float64 {
	return []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
}

// BuildInfo is what nri_housekeeper_build_info reports. Empty fields are
// reported as "unknown" (GoVersion: the running runtime's).
type BuildInfo struct {
	Version    string // nri-housekeeper version
	GoVersion  string // Go toolchain, e.g. go1.26.0
	NRIVersion string // github.com/containerd/nri module version
}

// Metrics holds a registry of its own (never the global default one, so
// tests and several instances do not collide) and the collectors. Its
// methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	trackedPods      *prometheus.GaugeVec
	leakedObjects    *prometheus.GaugeVec
	oldestLeak       *prometheus.GaugeVec
	actions          *prometheus.CounterVec
	passDuration     prometheus.Histogram
	passes           *prometheus.CounterVec
	lastSuccess      prometheus.Gauge
	stuckTerminating prometheus.Gauge
	period           prometheus.Gauge
	breakerTrips     *prometheus.CounterVec
	budgetPaused     *prometheus.GaugeVec
	untrusted        *prometheus.GaugeVec
	degraded         *prometheus.GaugeVec
	criDuration      *prometheus.HistogramVec
	criErrors        *prometheus.CounterVec
	nriEvents        map[string]prometheus.Counter // resolved at New: NRI handlers must stay within microseconds
	nriConnected     prometheus.Gauge
	nriReconnects    prometheus.Counter

	// known and the sets below map caller values to label values.
	known       knownValues
	phases      valueSet
	orphan      valueSet
	leakKinds   valueSet
	actionKinds valueSet
	rules       valueSet
	results     valueSet
	passResults valueSet
	criMethods  valueSet
	classes     valueSet
	sources     valueSet
	parts       valueSet

	started time.Time // for /healthz before the first pass
}

// New returns Metrics with every series of a fixed label set present at
// zero, so dashboards and alerts see them before the first event.
func New(build BuildInfo) *Metrics {
	k := known()
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		known:       k,
		phases:      newValueSet(k.phases),
		orphan:      newValueSet(k.orphan),
		leakKinds:   newValueSet(k.leakKinds),
		actionKinds: newValueSet(k.actionKinds),
		rules:       newValueSet(k.rules),
		results:     newValueSet(k.actionResults),
		passResults: newValueSet(k.passResults),
		criMethods:  newValueSet(k.criMethods),
		classes:     newValueSet(k.classes),
		sources:     newValueSet(k.sources),
		parts:       newValueSet(k.parts),
		started:     time.Now(),

		trackedPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameTrackedPods,
			Help: "Pods tracked by nri-housekeeper, by phase (Running, Terminating, Terminated, Removed) and orphan (true when the pod was learned from a runtime listing, not from a RunPodSandbox event: it predates the plugin or its events were missed).",
		}, []string{labelPhase, labelOrphan}),
		leakedObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameLeakedObjects,
			Help: "Leaked objects detected by the last housekeeping plan, by kind of object.",
		}, []string{labelKind}),
		oldestLeak: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameOldestLeak,
			Help: "How long the oldest step of each action kind the last plan proposed (due or not yet) has been proposed, pass after pass, in seconds; 0 when none. Unlike leaked_objects, what kubelet collects itself minutes after it is found never grows old here.",
		}, []string{labelKind}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: nameActions,
			Help: "Housekeeping actions, by kind, rule and result (success, error, would, backoff, skipped, aborted).",
		}, []string{labelKind, labelRule, labelResult}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    namePassDuration,
			Help:    "Duration of housekeeping passes (listing, planning and execution), in seconds.",
			Buckets: passBuckets(),
		}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: namePasses,
			Help: "Housekeeping passes, by result (ok, skipped_not_ready, listing_failed, listing_untrusted).",
		}, []string{labelResult}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: nameLastSuccess,
			Help: "Unix time at which the last housekeeping pass with a fresh CRI listing finished (result ok, skipped_not_ready or listing_untrusted: untrusted_source says when the listing is not trusted); 0 before the first.",
		}),
		stuckTerminating: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: nameStuckTerminating,
			Help: "Pods Terminating for housekeeping.leak_grace or longer.",
		}),
		period: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: namePeriod,
			Help: "housekeeping.period, in seconds, for alerts whose thresholds scale with it (how long without a pass is stale); 0 until the configuration is known.",
		}),
		breakerTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: nameBreakerTrips,
			Help: "Housekeeping passes in which the blast-radius budget refused a class of destructive step (orphan-stop, unknown-stop, cgroup-kill, cgroup-cpu, pod-dir, pod-log-dir, network): orphan stops over the pass's budget, or a class whose hourly budget is spent.",
		}, []string{labelClass}),
		budgetPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameBudgetPaused,
			Help: "1 while the last housekeeping pass refused this class of destructive step (over its per-pass or per-hour budget), else 0.",
		}, []string{labelClass}),
		untrusted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameUntrusted,
			Help: "1 while the last housekeeping pass distrusted a source: runtime-listing (the CRI listing disagrees with NRI: no plan at all) or pod-oracle (kubelet's pod dirs call running pods gone: no pod-gone rule), else 0.",
		}, []string{labelSource}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: nameDegraded,
			Help: "1 while a part of housekeeping fails while the rest goes on, else 0: network (the network side cannot read its sources: network leaks are not looked for), state-file (housekeeping.state_file cannot be written: a restart would forget the pods seen torn down and the budgeted steps of the last hour) or cgroups (the pod cgroups cannot be listed, or cgroups.root is in no cgroup hierarchy while sandboxes are Ready: pod cgroups are not cleaned).",
		}, []string{labelPart}),
		criDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    nameCRIDuration,
			Help:    "Duration of CRI calls, failed or not, by method, in seconds.",
			Buckets: criBuckets(),
		}, []string{labelMethod}),
		criErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: nameCRIErrors,
			Help: "CRI and containerd calls that failed, by method (a NotFound answer is not a failure).",
		}, []string{labelMethod}),
		nriConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: nameNRIConnected,
			Help: "1 while the plugin is registered with the container runtime over NRI, else 0.",
		}),
		nriReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: nameNRIReconnects,
			Help: "Times the plugin reconnected to the container runtime over NRI after a disconnect.",
		}),
	}

	nriEvents := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: nameNRIEvents,
		Help: "NRI events received, by event.",
	}, []string{labelEvent})
	m.nriEvents = make(map[string]prometheus.Counter, len(k.nriEvents)+1)
	for _, e := range withOther(k.nriEvents) {
		m.nriEvents[e] = nriEvents.WithLabelValues(e)
	}

	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: nameBuildInfo,
		Help: "Always 1; labels tell the nri-housekeeper version, Go version and NRI library version.",
		ConstLabels: prometheus.Labels{
			"version":     orUnknown(build.Version),
			"goversion":   orDefault(build.GoVersion, runtime.Version()),
			"nri_version": orUnknown(build.NRIVersion),
		},
	})
	buildInfo.Set(1)

	m.reg.MustRegister(
		m.trackedPods, m.leakedObjects, m.oldestLeak, m.actions, m.passDuration, m.passes, m.lastSuccess,
		m.stuckTerminating, m.period, m.breakerTrips, m.budgetPaused, m.untrusted, m.degraded, m.criDuration, m.criErrors, nriEvents,
		m.nriConnected, m.nriReconnects, buildInfo,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	// Zero-fill: a series that appears only on its first event breaks
	// rate() and alerts on absence; one that vanishes hides a change to 0.
	m.SetTrackedPods(nil)
	m.SetLeaks(nil)
	m.SetOldestLeaks(nil)
	for _, p := range k.actionPairs {
		for _, r := range k.actionResults {
			m.actions.WithLabelValues(p[0], p[1], r)
		}
	}
	for _, r := range k.passResults {
		m.passes.WithLabelValues(r)
	}
	for _, c := range k.classes {
		m.breakerTrips.WithLabelValues(c)
		m.budgetPaused.WithLabelValues(c)
	}
	for _, src := range k.sources {
		m.untrusted.WithLabelValues(src)
	}
	for _, part := range k.parts {
		m.degraded.WithLabelValues(part)
	}
	for _, meth := range k.criMethods {
		m.criDuration.WithLabelValues(meth)
		m.criErrors.WithLabelValues(meth)
	}
	return m
}

// Registry is the registry holding every collector of m.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObservePass records one housekeeping pass that ended at at (zero: now).
// result is PassOK, PassSkippedNotReady (planned, but the readiness gate was
// closed), PassListingUntrusted (the listing disagreed with NRI: no plan) or
// PassListingFailed. A pass with a fresh listing (ok, skipped_not_ready or
// listing_untrusted) sets the last-successful-pass timestamp: the loop is
// alive and sees the runtime, even while it may not act.
func (m *Metrics) ObservePass(result string, duration time.Duration, at time.Time) {
	result = m.passResults.pick(result)
	m.passes.WithLabelValues(result).Inc()
	m.passDuration.Observe(duration.Seconds())
	// A pass with a fresh listing finished, trusted or not: whether it is
	// is untrusted_source's to say, not a stale loop's.
	if result == PassOK || result == PassSkippedNotReady || result == PassListingUntrusted {
		if at.IsZero() {
			at = time.Now()
		}
		m.lastSuccess.Set(float64(at.UnixNano()) / 1e9)
	}
}

// SetTrackedPods replaces the tracked pod counts. counts is keyed by
// {phase, orphan}, orphan being "true" or "false"; a missing known
// combination is 0 (it stays exported), unknown values count as "other".
func (m *Metrics) SetTrackedPods(counts map[[2]string]int) {
	totals := make(map[[2]string]int)
	for key, n := range counts {
		totals[[2]string{m.phases.pick(key[0]), m.orphan.pick(key[1])}] += n
	}
	for _, phase := range withOther(m.known.phases) {
		for _, orphan := range withOther(m.known.orphan) {
			key := [2]string{phase, orphan}
			setOrDrop(m.trackedPods, totals[key], phase != Other && orphan != Other, phase, orphan)
		}
	}
}

// SetLeaks replaces the leaked object counts of the last plan, keyed by
// leak kind; a missing known kind is 0, unknown kinds count as "other".
func (m *Metrics) SetLeaks(byKind map[string]int) {
	totals := make(map[string]int)
	for kind, n := range byKind {
		totals[m.leakKinds.pick(kind)] += n
	}
	for _, kind := range withOther(m.known.leakKinds) {
		setOrDrop(m.leakedObjects, totals[kind], kind != Other, kind)
	}
}

// SetOldestLeaks replaces, by action kind (a gc kind such as
// "remove-sandbox"), how long the oldest step the last plan proposed has
// been proposed; a kind not given is 0.
func (m *Metrics) SetOldestLeaks(byKind map[string]time.Duration) {
	oldest := make(map[string]time.Duration)
	for kind, d := range byKind {
		k := m.actionKinds.pick(kind)
		oldest[k] = max(oldest[k], d)
	}
	for _, kind := range withOther(m.known.actionKinds) {
		if d := oldest[kind]; d > 0 || kind != Other {
			m.oldestLeak.WithLabelValues(kind).Set(d.Seconds())
		} else {
			m.oldestLeak.DeleteLabelValues(kind)
		}
	}
}

// setOrDrop sets a gauge series, or deletes it when it is an "other" series
// at 0: known series always exist, "other" ones only while non-zero.
func setOrDrop(vec *prometheus.GaugeVec, n int, known bool, labels ...string) {
	if n == 0 && !known {
		vec.DeleteLabelValues(labels...)
		return
	}
	vec.WithLabelValues(labels...).Set(float64(n))
}

// ObserveAction counts one executed (or, dry run, would-be) action: kind is a
// gc kind such as "remove-sandbox", rule a gc rule, result an executor
// result (success, error, would, backoff, skipped).
func (m *Metrics) ObserveAction(kind, rule, result string) {
	m.actions.WithLabelValues(m.actionKinds.pick(kind), m.rules.pick(rule), m.results.pick(result)).Inc()
}

// ObserveBudgetTrips counts one trip of each class the budget refused this
// pass, and sets budget_paused to 1 for those classes and 0 for the others.
func (m *Metrics) ObserveBudgetTrips(tripped []string) {
	paused := make(map[string]bool, len(tripped))
	for _, c := range tripped {
		c = m.classes.pick(c)
		m.breakerTrips.WithLabelValues(c).Inc()
		paused[c] = true
	}
	for _, c := range withOther(m.known.classes) {
		v := 0.0
		if paused[c] {
			v = 1
		}
		setOrDrop(m.budgetPaused, int(v), c != Other, c)
	}
}

// SetUntrusted says whether the last pass distrusted a source
// ("runtime-listing", "pod-oracle").
func (m *Metrics) SetUntrusted(source string, untrusted bool) {
	v := 0.0
	if untrusted {
		v = 1
	}
	m.untrusted.WithLabelValues(m.sources.pick(source)).Set(v)
}

// SetDegraded says whether a part of housekeeping ("network",
// "state-file") is failing while the rest goes on.
func (m *Metrics) SetDegraded(part string, degraded bool) {
	v := 0.0
	if degraded {
		v = 1
	}
	m.degraded.WithLabelValues(m.parts.pick(part)).Set(v)
}

// SetStuckTerminating sets the number of pods Terminating for leak_grace
// or longer.
func (m *Metrics) SetStuckTerminating(n int) { m.stuckTerminating.Set(float64(n)) }

// SetPeriod records housekeeping.period.
func (m *Metrics) SetPeriod(d time.Duration) { m.period.Set(d.Seconds()) }

// ObserveCRICall records one CRI call of method (e.g. "RemovePodSandbox")
// that took d and returned err.
func (m *Metrics) ObserveCRICall(method string, d time.Duration, err error) {
	method = m.criMethods.pick(method)
	m.criDuration.WithLabelValues(method).Observe(d.Seconds())
	// NotFound is an answer, not a failure: the checks right before a step
	// ask for objects that are expected to be gone, and removals of what
	// is already gone are done.
	if err != nil && status.Code(err) != codes.NotFound {
		m.criErrors.WithLabelValues(method).Inc()
	}
}

// ObserveNRIEvent counts one NRI event (e.g. "StopPodSandbox"). It does no
// allocation and takes no lock of its own: NRI handlers call it while
// containerd holds its NRI lock.
func (m *Metrics) ObserveNRIEvent(event string) {
	c, ok := m.nriEvents[event]
	if !ok {
		c = m.nriEvents[Other]
	}
	c.Inc()
}

// SetNRIConnected records whether the plugin is registered with the runtime.
func (m *Metrics) SetNRIConnected(connected bool) {
	v := 0.0
	if connected {
		v = 1
	}
	m.nriConnected.Set(v)
}

// ObserveNRIReconnect counts one reconnection after a disconnect.
func (m *Metrics) ObserveNRIReconnect() { m.nriReconnects.Inc() }

func orUnknown(s string) string { return orDefault(s, unknown) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
