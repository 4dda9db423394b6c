package podstate

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The reference model: the state the package docs promise, kept per object
// and per pod in the plainest form, with every pod's phase and RemovedSince
// derived afresh after every step (not only for the pods a step names).
// The rules, from the docs:
//   - an NRI event moves a record forward only; an NRI removal is evidence of
//     a teardown, also for a record an absence marked Removed, and from then
//     on it is the event's claim;
//   - Synchronize brings back a record an absence marked Removed (a
//     sandbox's, after a stop seen or not), never removes, and advances a
//     container to Running;
//   - a listing advances what it lists; it moves a record back only when the
//     record's state is an event's claim made before the listing started and
//     at least SettleTime ago, or an earlier listing's NotReady it shows
//     Ready (the stop void); it brings back a record Removed without an NRI
//     removal when nothing changed it since the listing started;
//   - a record absent from a listing, not changed since the listing started,
//     is Removed (with evidence only when a stop was seen), but for a sandbox
//     NRI reported by RunPodSandbox less than SettleTime ago;
//   - a pod's phase comes from its records; RemovedSince is when it became
//     Removed, zero otherwise; TornDown needs every sandbox removed with
//     evidence, or rolled back before such a sandbox was first seen; pods
//     Removed for the retention are forgotten, and Removed records after
//     the retention.
type model struct {
	retention time.Duration
	op        int // ordinal of the last step: a record changed at op > a listing's start is newer
	syncs     uint64
	pods      map[string]*mPod
	sandboxes map[string]*mSandbox
	ctrs      map[string]*mContainer
}

type mPod struct {
	id                             PodIdentity
	source                         Source
	firstSeen, lastLife, removedAt time.Time
}

type mSandbox struct {
	id, pod    string
	state      SandboxState
	removal    Removal
	stopSeen   bool
	reportedAt time.Time
	synced     bool
	stored     bool // listed or synchronized once
	session    uint64
	source     Source
	since      time.Time
	stoppedAt  time.Time // when it left Ready; kept once Removed
	firstSeen  time.Time
	createdAt  time.Time
	changed    int  // op of the last change of state (or of the claim)
	claim      bool // state is an event's (or Synchronize's) claim a newer listing may correct
}

type mContainer struct {
	id, sandbox, pod, name string
	state                  ContainerState
	removal                Removal
	source                 Source
	since                  time.Time
	changed                int
	claim                  bool
}

func newModel(retention time.Duration) *model {
	return &model{retention: retention, pods: map[string]*mPod{}, sandboxes: map[string]*mSandbox{}, ctrs: map[string]*mContainer{}}
}

func (m *model) pod(id PodIdentity, src Source, at time.Time) *mPod {
	p, ok := m.pods[id.UID]
	if !ok {
		p = &mPod{id: id, source: src, firstSeen: at}
		m.pods[id.UID] = p
	}
	if p.source == SourceListing && src != SourceListing {
		p.source = src
	}
	if p.id.Namespace == "" {
		p.id.Namespace = id.Namespace
	}
	if p.id.Name == "" {
		p.id.Name = id.Name
	}
	return p
}

func (m *model) sandbox(p *mPod, id string, src Source, at time.Time) *mSandbox {
	if sb, ok := m.sandboxes[id]; ok {
		return sb
	}
	sb := &mSandbox{id: id, pod: p.id.UID, state: SandboxReady, source: src, since: at, firstSeen: at, changed: m.op, claim: src != SourceListing}
	m.sandboxes[id] = sb
	return sb
}

func (m *model) container(p *mPod, sandbox, id, name string, src Source, at time.Time) *mContainer {
	if c, ok := m.ctrs[id]; ok {
		if c.name == "" {
			c.name = name
		}
		return c
	}
	c := &mContainer{id: id, sandbox: sandbox, pod: p.id.UID, name: name, state: ContainerCreated, source: src, since: at, changed: m.op, claim: src != SourceListing}
	m.ctrs[id] = c
	return c
}

func (m *model) setSandbox(sb *mSandbox, to SandboxState, at time.Time, claim bool) {
	switch {
	case to == SandboxReady:
		sb.stoppedAt = time.Time{} // corrected back to Ready: it never stopped
	case to == SandboxNotReady:
		sb.stoppedAt = at
	case sb.stoppedAt.IsZero(): // removed without being seen stopped
		sb.stoppedAt = at
	}
	sb.state, sb.since, sb.changed, sb.claim = to, at, m.op, claim
}

func (m *model) setContainer(c *mContainer, to ContainerState, at time.Time, claim bool) {
	c.state, c.since, c.changed, c.claim = to, at, m.op, claim
}

func (m *model) apply(ev Event) {
	m.op++
	switch {
	case ev.Kind < RunPodSandbox || ev.Kind > RemoveContainer, ev.Pod.UID == "", ev.SandboxID == "":
		return
	case ev.Kind >= CreateContainer && ev.ContainerID == "":
		return
	}
	p := m.pod(ev.Pod, SourceEvent, ev.At)
	if (ev.Kind == RunPodSandbox || ev.Kind == StartContainer) && ev.At.After(p.lastLife) {
		p.lastLife = ev.At
	}
	switch ev.Kind {
	case RunPodSandbox:
		sb := m.sandbox(p, ev.SandboxID, SourceEvent, ev.At)
		sb.reportedAt, sb.synced, sb.session = ev.At, false, m.syncs
	case StopPodSandbox:
		sb := m.sandbox(p, ev.SandboxID, SourceEvent, ev.At)
		sb.stopSeen = true
		if sb.state < SandboxNotReady {
			m.setSandbox(sb, SandboxNotReady, ev.At, true)
		}
	case RemovePodSandbox:
		sb := m.sandbox(p, ev.SandboxID, SourceEvent, ev.At)
		if sb.state == SandboxRemoved && (sb.removal == RemovedByRollback || sb.removal == RemovedByEvent) {
			break // a removal said again stays what it was
		}
		// Also for a record an absence marked Removed: from now on its
		// removal is NRI's claim.
		m.setSandbox(sb, SandboxRemoved, ev.At, true)
		sb.removal = RemovedByEvent
		if !m.stored(sb) {
			sb.removal = RemovedByRollback // never in the store: a failed start, stopped or not
			if ev.At.After(p.lastLife) {
				p.lastLife = ev.At // a start, told or not
			}
		}
	default:
		c := m.container(p, ev.SandboxID, ev.ContainerID, ev.ContainerName, SourceEvent, ev.At)
		to := map[EventKind]ContainerState{CreateContainer: ContainerCreated, StartContainer: ContainerRunning,
			StopContainer: ContainerExited, RemoveContainer: ContainerRemoved}[ev.Kind]
		if to == ContainerRemoved {
			if c.state != ContainerRemoved || c.removal != RemovedByEvent {
				m.setContainer(c, ContainerRemoved, ev.At, true)
			}
			c.removal = RemovedByEvent
		} else if to.rank() > c.state.rank() {
			m.setContainer(c, to, ev.At, true)
		}
	}
	m.refresh(ev.At)
}

// stored: listed, synchronized, or a container of its pod made in it (one
// that names another pod is malformed, and proves nothing).
func (m *model) stored(sb *mSandbox) bool {
	if sb.stored {
		return true
	}
	for _, c := range m.ctrs {
		if c.sandbox == sb.id && c.pod == sb.pod {
			sb.stored = true
			return true
		}
	}
	return false
}

func (m *model) synchronize(at time.Time, sbs []SyncedSandbox, cs []SyncedContainer) {
	m.op++
	m.syncs++
	for _, in := range sbs {
		if in.Pod.UID == "" || in.SandboxID == "" {
			continue
		}
		sb := m.sandbox(m.pod(in.Pod, SourceSync, at), in.SandboxID, SourceSync, at)
		sb.reportedAt, sb.synced, sb.session = at, true, m.syncs
		sb.stored = true
		if sb.state == SandboxRemoved && sb.removal != RemovedByEvent {
			to := SandboxReady
			if sb.stopSeen {
				to = SandboxNotReady
			}
			m.setSandbox(sb, to, at, true)
		}
	}
	for _, in := range cs {
		if in.Pod.UID == "" || in.SandboxID == "" || in.ID == "" {
			continue
		}
		p := m.pod(in.Pod, SourceSync, at)
		m.sandbox(p, in.SandboxID, SourceSync, at)
		c := m.container(p, in.SandboxID, in.ID, in.Name, SourceSync, at)
		if c.state == ContainerRemoved && c.removal == RemovedByAbsence {
			m.setContainer(c, in.State, at, true)
		}
		if in.State == ContainerRunning && c.state.rank() < ContainerRunning.rank() {
			m.setContainer(c, ContainerRunning, at, true)
		}
	}
	m.refresh(at)
}

func (m *model) reconcile(l Listing, startOp int, now time.Time) {
	m.op++
	seen := map[string]bool{}
	for _, id := range l.Unreadable {
		seen[id] = true
	}
	seenC := map[string]bool{}
	for _, id := range l.Unreadable {
		seenC[id] = true
	}
	for _, in := range l.Sandboxes {
		seen[in.ID] = true
		p := m.pod(in.Pod, SourceListing, now)
		want := SandboxReady
		if !in.Ready {
			want = SandboxNotReady
		}
		sb, known := m.sandboxes[in.ID]
		if !known {
			sb = m.sandbox(p, in.ID, SourceListing, now)
			m.setSandbox(sb, want, now, false)
		}
		if sb.createdAt.IsZero() {
			sb.createdAt = in.CreatedAt
		}
		sb.stored = true
		if want == SandboxNotReady {
			sb.stopSeen = true
		}
		corrected := false
		switch {
		case !known:
		case sb.state == SandboxRemoved && sb.removal != RemovedByEvent && sb.changed <= startOp:
			m.setSandbox(sb, want, now, false)
			corrected = true
		case want == sb.state:
			sb.claim = false
		case want > sb.state:
			m.setSandbox(sb, want, now, false)
		case sb.claim && sb.changed <= startOp && now.Sub(sb.since) >= SettleTime:
			m.setSandbox(sb, want, now, false)
			corrected = true
		case !sb.claim && sb.changed <= startOp && want == SandboxReady && sb.state == SandboxNotReady:
			// A listing's NotReady a newer listing says Ready.
			m.setSandbox(sb, want, now, false)
			corrected = true
		}
		// A sandbox a listing shows Ready against an earlier claim was
		// not stopped: its stop is void.
		if corrected && want == SandboxReady {
			sb.stopSeen = false
		}
	}
	for _, in := range l.Containers {
		seenC[in.ID] = true
		c, known := m.ctrs[in.ID]
		if !known {
			c = m.container(m.pod(in.Pod, SourceListing, now), in.SandboxID, in.ID, in.Name, SourceListing, now)
			c.state = in.State
			continue
		}
		switch {
		case c.state == ContainerRemoved && c.removal == RemovedByAbsence && c.changed <= startOp:
			m.setContainer(c, in.State, now, false)
		case in.State == c.state:
			c.claim = false
		case in.State.rank() >= c.state.rank():
			m.setContainer(c, in.State, now, false)
		case c.claim && c.changed <= startOp && now.Sub(c.since) >= SettleTime:
			m.setContainer(c, in.State, now, false)
		}
	}
	for id, sb := range m.sandboxes {
		if seen[id] || sb.state == SandboxRemoved || sb.changed > startOp {
			continue
		}
		if !sb.reportedAt.IsZero() && !sb.synced && sb.state == SandboxReady && !sb.stopSeen && now.Sub(sb.reportedAt) < SettleTime {
			continue
		}
		sb.removal = RemovedByAbsence
		if sb.stopSeen && m.stored(sb) {
			sb.removal = RemovedAfterStop
		}
		m.setSandbox(sb, SandboxRemoved, now, false)
	}
	for id, c := range m.ctrs {
		if seenC[id] || c.state == ContainerRemoved || c.changed > startOp {
			continue
		}
		c.removal = RemovedByAbsence
		m.setContainer(c, ContainerRemoved, now, false)
	}
	m.refresh(now)
	m.forget(now)
}

func (m *model) markGone(ids []string, at time.Time) {
	m.op++
	for _, id := range ids {
		if sb, ok := m.sandboxes[id]; ok && sb.state != SandboxRemoved {
			sb.removal = RemovedByAbsence
			m.setSandbox(sb, SandboxRemoved, at, false)
		}
	}
	m.refresh(at)
}

func (m *model) phase(uid string) Phase {
	left, running := false, false
	for _, sb := range m.sandboxes {
		if sb.pod != uid {
			continue
		}
		if sb.state == SandboxReady {
			return PhaseRunning
		}
		left = left || sb.state != SandboxRemoved
	}
	for _, c := range m.ctrs {
		if c.pod != uid {
			continue
		}
		running = running || c.state == ContainerRunning || c.state == ContainerUnknown
		left = left || c.state != ContainerRemoved
	}
	switch {
	case running:
		return PhaseTerminating
	case left:
		return PhaseTerminated
	}
	return PhaseRemoved
}

// refresh keeps every pod's RemovedSince true to its phase after a step.
func (m *model) refresh(at time.Time) {
	for uid, p := range m.pods {
		if m.phase(uid) != PhaseRemoved {
			p.removedAt = time.Time{}
		} else if p.removedAt.IsZero() {
			p.removedAt = at
		}
	}
}

func (m *model) forget(now time.Time) {
	for uid, p := range m.pods {
		if p.removedAt.IsZero() || now.Sub(p.removedAt) < m.retention {
			continue
		}
		for id, sb := range m.sandboxes {
			if sb.pod == uid {
				delete(m.sandboxes, id)
			}
		}
		for id, c := range m.ctrs {
			if c.pod == uid {
				delete(m.ctrs, id)
			}
		}
		delete(m.pods, uid)
	}
	for id, sb := range m.sandboxes {
		if sb.state == SandboxRemoved && now.Sub(sb.since) >= m.retention {
			delete(m.sandboxes, id)
		}
	}
	for id, c := range m.ctrs {
		if c.state == ContainerRemoved && now.Sub(c.since) >= m.retention {
			if sb := m.sandboxes[c.sandbox]; sb != nil && sb.pod == c.pod {
				sb.stored = true
			}
			delete(m.ctrs, id)
		}
	}
}

// diff lists how the state's view (and NRISandboxes) disagree with the
// model on what the housekeeping loop reads.
func (m *model) diff(v View, nri []NRISandbox) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	got := map[string]PodView{}
	for _, p := range v.Pods {
		got[p.UID] = p
	}
	for uid := range got {
		if _, ok := m.pods[uid]; !ok {
			bad("pod %s: in the state, not in the model", uid)
		}
	}
	for uid, mp := range m.pods {
		p, ok := got[uid]
		if !ok {
			bad("pod %s: in the model (phase %s), not in the state", uid, m.phase(uid))
			continue
		}
		// Torn down: every sandbox removed with evidence, but for a
		// rollback removed before the last such sandbox was first seen.
		var lastEvidenced time.Time
		for _, sb := range m.sandboxes {
			if sb.pod == uid && sb.removal.Evidence() && sb.firstSeen.After(lastEvidenced) {
				lastEvidenced = sb.firstSeen
			}
		}
		torn := m.phase(uid) == PhaseRemoved && !lastEvidenced.IsZero()
		for _, sb := range m.sandboxes {
			if sb.pod == uid && !sb.removal.Evidence() && (sb.removal != RemovedByRollback || !sb.since.Before(lastEvidenced)) {
				torn = false
			}
		}
		if p.Phase != m.phase(uid) || p.TornDown != torn || !p.RemovedSince.Equal(mp.removedAt) || !p.LastLifeEvent.Equal(mp.lastLife) ||
			p.Orphan != (mp.source == SourceListing) || !p.FirstSeen.Equal(mp.firstSeen) || p.Namespace != mp.id.Namespace || p.Name != mp.id.Name {
			bad("pod %s: state phase %s torndown %v removed %v life %v orphan %v first %v; model phase %s torndown %v removed %v life %v orphan %v first %v",
				uid, p.Phase, p.TornDown, tod(p.RemovedSince), tod(p.LastLifeEvent), p.Orphan, tod(p.FirstSeen),
				m.phase(uid), torn, tod(mp.removedAt), tod(mp.lastLife), mp.source == SourceListing, tod(mp.firstSeen))
		}
		ids := map[string]bool{}
		for _, sb := range p.Sandboxes {
			ids[sb.ID] = true
			ms, ok := m.sandboxes[sb.ID]
			if !ok || ms.pod != uid {
				bad("sandbox %s in pod %s: not so in the model", sb.ID, uid)
				continue
			}
			if sb.State != ms.state || sb.State == SandboxRemoved && sb.Removal != ms.removal || sb.StopSeen != ms.stopSeen ||
				!sb.ReportedAt.Equal(ms.reportedAt) || sb.Synced != ms.synced || sb.Session != ms.session || sb.Source != ms.source ||
				!sb.StateSince.Equal(ms.since) || !sb.StoppedAt.Equal(ms.stoppedAt) || !sb.CreatedAt.Equal(ms.createdAt) {
				bad("sandbox %s: state %s (%s) since %v stopped at %v stop %v reported %v synced %v session %d source %s; model %s (%s) since %v stopped at %v stop %v reported %v synced %v session %d source %s",
					sb.ID, sb.State, sb.Removal, tod(sb.StateSince), tod(sb.StoppedAt), sb.StopSeen, tod(sb.ReportedAt), sb.Synced, sb.Session, sb.Source,
					ms.state, ms.removal, tod(ms.since), tod(ms.stoppedAt), ms.stopSeen, tod(ms.reportedAt), ms.synced, ms.session, ms.source)
			}
		}
		for _, c := range p.Containers {
			ids[c.ID] = true
			mc, ok := m.ctrs[c.ID]
			if !ok || mc.pod != uid {
				bad("container %s in pod %s: not so in the model", c.ID, uid)
				continue
			}
			if c.State != mc.state || c.State == ContainerRemoved && c.Removal != mc.removal || c.Source != mc.source ||
				!c.StateSince.Equal(mc.since) || c.SandboxID != mc.sandbox {
				bad("container %s: state %s (%s) since %v source %s; model %s (%s) since %v source %s",
					c.ID, c.State, c.Removal, tod(c.StateSince), c.Source, mc.state, mc.removal, tod(mc.since), mc.source)
			}
		}
		for id, sb := range m.sandboxes {
			if sb.pod == uid && !ids[id] {
				bad("sandbox %s in pod %s: in the model (%s), not in the state", id, uid, sb.state)
			}
		}
		for id, c := range m.ctrs {
			if c.pod == uid && !ids[id] {
				bad("container %s in pod %s: in the model (%s), not in the state", id, uid, c.state)
			}
		}
	}
	var want []NRISandbox
	for _, sb := range m.sandboxes {
		if !sb.reportedAt.IsZero() && sb.state != SandboxRemoved {
			want = append(want, NRISandbox{ID: sb.id, PodUID: sb.pod, ReportedAt: sb.reportedAt, Synced: sb.synced, Session: sb.session,
				Live: sb.state == SandboxReady && !sb.stopSeen})
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].ID < want[j].ID })
	if fmt.Sprint(want) != fmt.Sprint(nri) {
		bad("NRISandboxes: state %+v, model %+v", nri, want)
	}
	sort.Strings(out)
	return out
}

// tod prints a time as its offset from t0, "-" for zero.
func tod(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).String()
}

// modelHistory drives one random history through the state and the model
// and returns the steps so far and the first disagreement, if any.
func modelHistory(seed int64, steps int) (log []string, diff []string) {
	rng := rand.New(rand.NewSource(seed))
	const retention = time.Minute
	s, m := New(retention), newModel(retention)
	now := t0
	// Every sandbox and container has its own pod (and sandbox): the
	// runtime's; now and then an input names another (malformed data).
	sandboxPod := map[string]string{"x1": "u1", "x2": "u1", "x3": "u2", "x4": "u3"}
	ctrSandbox := map[string]string{"c1": "x1", "c2": "x2", "c3": "x3", "c4": "x4"}
	sandboxIDs, ctrIDs, uids := []string{"x1", "x2", "x3", "x4"}, []string{"c1", "c2", "c3", "c4"}, []string{"u1", "u2", "u3"}
	podOf := func(uid string) PodIdentity {
		if rng.Intn(20) == 0 {
			uid = uids[rng.Intn(len(uids))]
		}
		return ident(uid)
	}
	sandboxOf := func(c string) string {
		if rng.Intn(20) == 0 {
			return sandboxIDs[rng.Intn(len(sandboxIDs))]
		}
		return ctrSandbox[c]
	}
	type start struct {
		seq uint64
		op  int
	}
	starts := []start{{s.Seq(), m.op}}
	for step := 0; step < steps; step++ {
		now = now.Add([]time.Duration{0, time.Second, 3 * time.Second, 6 * time.Second, 20 * time.Second, 70 * time.Second}[rng.Intn(6)])
		switch op := rng.Intn(20); {
		case op < 11:
			kind := EventKind(1 + rng.Intn(7))
			sid, cid := sandboxIDs[rng.Intn(4)], ""
			if kind.IsContainerEvent() {
				cid = ctrIDs[rng.Intn(4)]
				sid = sandboxOf(cid)
			}
			ev := Event{Kind: kind, At: now, Pod: podOf(sandboxPod[sid]), SandboxID: sid, ContainerID: cid, ContainerName: "app"}
			log = append(log, fmt.Sprintf("%v: %s pod %s sandbox %s container %s", tod(now), kind, ev.Pod.UID, sid, cid))
			_ = s.Apply(ev)
			m.apply(ev)
		case op < 13:
			var sbs []SyncedSandbox
			var cs []SyncedContainer
			for _, id := range sandboxIDs {
				if rng.Intn(2) == 0 {
					sbs = append(sbs, SyncedSandbox{Pod: podOf(sandboxPod[id]), SandboxID: id})
				}
			}
			for _, id := range ctrIDs {
				if rng.Intn(2) == 0 {
					sid := sandboxOf(id)
					cs = append(cs, SyncedContainer{Pod: podOf(sandboxPod[sid]), SandboxID: sid, ID: id, Name: "app",
						State: []ContainerState{ContainerCreated, ContainerRunning}[rng.Intn(2)]})
				}
			}
			log = append(log, fmt.Sprintf("%v: Synchronize %+v %+v", tod(now), sbs, cs))
			s.Synchronize(now, sbs, cs)
			m.synchronize(now, sbs, cs)
		case op < 14:
			starts = append(starts, start{s.Seq(), m.op})
		case op < 18:
			// A listing started now, or at an earlier start (stale).
			st := start{s.Seq(), m.op}
			if rng.Intn(3) == 0 {
				st = starts[rng.Intn(len(starts))]
			}
			l := Listing{StartSeq: st.seq}
			for _, id := range sandboxIDs {
				if rng.Intn(3) != 0 {
					l.Sandboxes = append(l.Sandboxes, ListedSandbox{Pod: podOf(sandboxPod[id]), ID: id, Ready: rng.Intn(2) == 0, CreatedAt: now})
				}
			}
			for _, id := range ctrIDs {
				if rng.Intn(3) != 0 {
					sid := sandboxOf(id)
					l.Containers = append(l.Containers, ListedContainer{Pod: podOf(sandboxPod[sid]), ID: id, SandboxID: sid, Name: "app",
						State: []ContainerState{ContainerCreated, ContainerRunning, ContainerUnknown, ContainerExited}[rng.Intn(4)], CreatedAt: now})
				}
			}
			if rng.Intn(8) == 0 {
				l.Unreadable = append(l.Unreadable, append(sandboxIDs, ctrIDs...)[rng.Intn(8)])
			}
			log = append(log, fmt.Sprintf("%v: Reconcile (start op %d of %d) %+v", tod(now), st.op, m.op, l))
			s.Reconcile(l, now)
			m.reconcile(l, st.op, now)
		case op < 19:
			ids := []string{sandboxIDs[rng.Intn(4)]}
			log = append(log, fmt.Sprintf("%v: MarkGone %v", tod(now), ids))
			s.MarkGone(ids, now)
			m.markGone(ids, now)
		default:
			log = append(log, fmt.Sprintf("%v: Forget", tod(now)))
			s.Forget(now)
			m.forget(now)
		}
		if d := m.diff(s.View(), s.NRISandboxes()); len(d) > 0 {
			return log, d
		}
	}
	return log, nil
}

// TestStateMatchesTheModel drives random histories of events, Synchronize
// reports, fresh and stale listings, MarkGone and Forget through the state
// and the reference model above, and compares after every step what the
// housekeeping loop reads: each pod's phase, TornDown, RemovedSince,
// LastLifeEvent, its sandboxes and containers (state, removal evidence,
// StopSeen, NRI report) and NRISandboxes.
func TestStateMatchesTheModel(t *testing.T) {
	// About a second (several under -race); PODSTATE_MODEL_SEEDS=60000
	// runs a longer campaign (about a minute).
	seeds := int64(1000)
	if testing.Short() {
		seeds = 200
	}
	if n, err := strconv.Atoi(os.Getenv("PODSTATE_MODEL_SEEDS")); err == nil {
		seeds = int64(n)
	}
	for seed := int64(1); seed <= seeds; seed++ {
		if log, d := modelHistory(seed, 80); d != nil {
			if len(log) > 25 {
				log = log[len(log)-25:]
			}
			t.Fatalf("seed %d: after\n  %s\nthe state and the model disagree:\n  %s", seed, strings.Join(log, "\n  "), strings.Join(d, "\n  "))
		}
	}
}
