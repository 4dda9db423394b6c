package podstate

import (
	"fmt"
	"sort"
)

// Mismatches lists every way the view disagrees with a listing: a listed
// object without a record or with another state, and a record that is not
// Removed but absent from the listing. An empty result means they match.
func (v View) Mismatches(l Listing) []string {
	sandboxes := make(map[string]Sandbox)
	containers := make(map[string]Container)
	for _, p := range v.Pods {
		for _, sb := range p.Sandboxes {
			sandboxes[sb.ID] = sb
		}
		for _, c := range p.Containers {
			containers[c.ID] = c
		}
	}
	var out []string
	listed := make(map[string]struct{}, len(l.Sandboxes)+len(l.Containers))
	for _, in := range l.Sandboxes {
		listed[in.ID] = struct{}{}
		want := SandboxReady
		if !in.Ready {
			want = SandboxNotReady
		}
		sb, ok := sandboxes[in.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("sandbox %s of pod %s/%s: listed %s, no record", in.ID, in.Pod.Namespace, in.Pod.Name, want))
		case sb.State != want:
			out = append(out, fmt.Sprintf("sandbox %s of pod %s/%s: listed %s, record %s", in.ID, in.Pod.Namespace, in.Pod.Name, want, sb.State))
		}
	}
	for _, in := range l.Containers {
		listed[in.ID] = struct{}{}
		c, ok := containers[in.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("container %s (%s) of pod %s/%s: listed %s, no record", in.ID, in.Name, in.Pod.Namespace, in.Pod.Name, in.State))
		case c.State != in.State:
			out = append(out, fmt.Sprintf("container %s (%s) of pod %s/%s: listed %s, record %s", in.ID, in.Name, in.Pod.Namespace, in.Pod.Name, in.State, c.State))
		}
	}
	for id, sb := range sandboxes {
		if _, ok := listed[id]; !ok && sb.State != SandboxRemoved {
			out = append(out, fmt.Sprintf("sandbox %s of pod %s: record %s, not listed", id, sb.PodUID, sb.State))
		}
	}
	for id, c := range containers {
		if _, ok := listed[id]; !ok && c.State != ContainerRemoved {
			out = append(out, fmt.Sprintf("container %s (%s) of pod %s: record %s, not listed", id, c.Name, c.PodUID, c.State))
		}
	}
	sort.Strings(out)
	return out
}
