package podstate

import (
	"testing"
	"time"
)

// FuzzMalformedNRIDataKeepsTheStateConsistent: NRI events, Synchronize
// reports and CRI listings that disagree about identities (a sandbox ID
// under two pod UIDs, a container under another pod's sandbox, one ID both a
// sandbox's and a container's, empty IDs, kinds out of range), in any order
// and at any times, never panic the state, and it stays one a plan can rely
// on: an event Apply refuses changes nothing; every record is in exactly one
// pod, the pod of its UID; a pod with a Ready sandbox is Running; a pod is
// TornDown when, and only when, it is Removed and every sandbox was removed
// with evidence of a teardown, or rolled back before such a sandbox was
// first seen (teardownEvidenced); and
// after a fresh listing every listed object has a record that is not
// Removed (but by an NRI removal younger than SettleTime).
func FuzzMalformedNRIDataKeepsTheStateConsistent(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 0, 0, 3, 4, 1, 1, 1, 1, 5, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 1, 1, 1, 0, 0, 1, 2, 1, 1, 0, 5, 2, 2, 2, 1, 0, 7, 200, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3, 4, 4, 1, 2, 2, 2, 2, 6, 1, 1, 1, 1, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		uids := []string{"", "u1", "u2"}
		sandboxes := []string{"", "x1", "x2", "x3"}
		containers := []string{"", "x2", "c1", "c2"}
		// The states the plugin's syncedState and housekeeping's
		// ToListing give: never Removed.
		synced := []ContainerState{ContainerCreated, ContainerRunning, ContainerExited}
		listed := []ContainerState{ContainerCreated, ContainerRunning, ContainerUnknown, ContainerExited}
		s := New(time.Minute)
		now := t0
		for i := 0; i+6 <= len(data) && i < 6*200; i += 6 {
			b := data[i : i+6]
			now = now.Add(time.Duration(b[5]) * time.Second)
			uid, sid, cid := uids[b[2]%3], sandboxes[b[3]%4], containers[b[4]%4]
			pod := PodIdentity{UID: uid, Namespace: "ns", Name: "pod-" + uid}
			switch b[0] % 8 {
			case 0, 1, 2, 3:
				ev := Event{Kind: EventKind(b[1] % 9), At: now, Pod: pod, SandboxID: sid, ContainerID: cid, ContainerName: "app"}
				before := s.Seq()
				if err := s.Apply(ev); err != nil {
					if ev.validate() == nil || s.Seq() != before {
						t.Fatalf("step %d: Apply(%+v) = %v, and the state changed from seq %d to %d", i/6, ev, err, before, s.Seq())
					}
				} else if ev.validate() != nil {
					t.Fatalf("step %d: Apply(%+v) took an event with %v", i/6, ev, ev.validate())
				}
			case 4:
				s.Synchronize(now,
					[]SyncedSandbox{{Pod: pod, SandboxID: sid}, {Pod: PodIdentity{UID: uids[b[1]%3]}, SandboxID: sandboxes[b[1]%4]}},
					[]SyncedContainer{{Pod: pod, SandboxID: sandboxes[b[1]%4], ID: cid, Name: "app", State: synced[b[1]%3]}})
			case 5:
				l := Listing{StartSeq: s.Seq()}
				if uid != "" && sid != "" {
					l.Sandboxes = append(l.Sandboxes, ListedSandbox{Pod: pod, ID: sid, Ready: b[1]%2 == 0, CreatedAt: now})
				}
				if other := uids[1+b[1]%2]; cid != "" && sandboxes[b[1]%4] != "" {
					l.Containers = append(l.Containers, ListedContainer{Pod: PodIdentity{UID: other, Namespace: "ns", Name: "pod-" + other},
						ID: cid, SandboxID: sandboxes[b[1]%4], Name: "app", State: listed[b[1]%4], CreatedAt: now})
				}
				if b[1]&0x80 != 0 {
					l.Unreadable = append(l.Unreadable, "x3")
				}
				pre := s.View()
				s.Reconcile(l, now)
				v := s.View()
				// A record a young NRI removal keeps Removed, though
				// listed, may go with its pod, Removed for the
				// retention, in the same Reconcile: the next listing
				// that still has it adds it back as an orphan.
				for _, in := range l.Sandboxes {
					sb, ok := findSandbox(v, in.ID)
					if was, had := findSandbox(pre, in.ID); !ok && had && was.State == SandboxRemoved && youngRemoval(was.Removal, was.StateSince, now) {
						continue
					}
					if !ok || sb.State == SandboxRemoved && !youngRemoval(sb.Removal, sb.StateSince, now) {
						t.Fatalf("step %d: sandbox %s listed, its record %+v (found %v)", i/6, in.ID, sb, ok)
					}
				}
				for _, in := range l.Containers {
					c, ok := findContainer(v, in.ID)
					if was, had := findContainer(pre, in.ID); !ok && had && was.State == ContainerRemoved && youngRemoval(was.Removal, was.StateSince, now) {
						continue
					}
					if !ok || c.State == ContainerRemoved && !youngRemoval(c.Removal, c.StateSince, now) {
						t.Fatalf("step %d: container %s listed, its record %+v (found %v)", i/6, in.ID, c, ok)
					}
				}
			case 6:
				s.MarkGone([]string{sid, sandboxes[b[1]%4]}, now)
			case 7:
				s.Forget(now)
			}
			checkConsistent(t, i/6, s.View())
		}
	})
}

// youngRemoval: an NRI removal less than SettleTime old, which a listing
// that still has the object does not correct yet (containerd may send the
// event before its store shows it).
func youngRemoval(r Removal, since, now time.Time) bool {
	return r == RemovedByEvent && now.Sub(since) < SettleTime
}

func findSandbox(v View, id string) (Sandbox, bool) {
	for _, p := range v.Pods {
		for _, sb := range p.Sandboxes {
			if sb.ID == id {
				return sb, true
			}
		}
	}
	return Sandbox{}, false
}

func findContainer(v View, id string) (Container, bool) {
	for _, p := range v.Pods {
		for _, c := range p.Containers {
			if c.ID == id {
				return c, true
			}
		}
	}
	return Container{}, false
}

func checkConsistent(t *testing.T, step int, v View) {
	t.Helper()
	sandboxes, containers := map[string]string{}, map[string]string{}
	for _, p := range v.Pods {
		if p.UID == "" {
			t.Fatalf("step %d: a pod with no UID: %+v", step, p)
		}
		ready := false
		for _, sb := range p.Sandboxes {
			if other, ok := sandboxes[sb.ID]; ok || sb.ID == "" || sb.PodUID != p.UID {
				t.Fatalf("step %d: sandbox %q of pod %s (record says %s) also in pod %q", step, sb.ID, p.UID, sb.PodUID, other)
			}
			sandboxes[sb.ID] = p.UID
			ready = ready || sb.State == SandboxReady
		}
		for _, c := range p.Containers {
			if other, ok := containers[c.ID]; ok || c.ID == "" || c.PodUID != p.UID {
				t.Fatalf("step %d: container %q of pod %s (record says %s) also in pod %q", step, c.ID, p.UID, c.PodUID, other)
			}
			containers[c.ID] = p.UID
		}
		if ready && p.Phase != PhaseRunning {
			t.Fatalf("step %d: pod %s has a Ready sandbox and is %s", step, p.UID, p.Phase)
		}
		if want := p.Phase == PhaseRemoved && teardownEvidenced(p.Sandboxes); p.TornDown != want {
			t.Fatalf("step %d: pod %s torn down %v, want %v: %+v", step, p.UID, p.TornDown, want, p)
		}
	}
}

// teardownEvidenced is PodView.TornDown's rule, said sandbox by sandbox:
// some sandbox was removed with evidence of a teardown, and every other one
// was too, or is a start rolled back before such a sandbox was first seen
// (an attempt kubelet retried), never one gone by a listing's absence.
func teardownEvidenced(sandboxes []Sandbox) bool {
	for _, sb := range sandboxes {
		if sb.State != SandboxRemoved {
			return false
		}
		if sb.Removal.Evidence() {
			continue
		}
		retried := false
		for _, later := range sandboxes {
			retried = retried || later.Removal.Evidence() && sb.Removal == RemovedByRollback && sb.StateSince.Before(later.FirstSeen)
		}
		if !retried {
			return false
		}
	}
	for _, sb := range sandboxes {
		if sb.Removal.Evidence() {
			return true
		}
	}
	return false
}
