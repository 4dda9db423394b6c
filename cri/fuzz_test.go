package cri

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// FuzzCriNetNSPath: a sandbox record's metadata extension never panics the
// reader; a netns path read from it is absolute and clean, or none (another
// would be compared with the namespaces of the netns dir in another
// spelling), and none is read from an extension of another type or from
// anything but containerd's v1 metadata.
func FuzzCriNetNSPath(f *testing.F) {
	for _, s := range [][2]string{
		{criMetadataType, `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":"/run/containerd/netns/cni-1"}}`},
		{criMetadataType, `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":""}}`},
		{criMetadataType, `{"Version":"v1","Metadata":{"NetNSPath":"/run//netns/./cni-1/"}}`},
		{criMetadataType, `{"Metadata":{"NetNSPath":"cni-1"}}`},
		{criMetadataType, `{"Metadata":null}`},
		{criMetadataType, `null`},
		{criMetadataType, `{`},
		{"example.com/Other", `{}`},
		{"", ""},
	} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, typeURL string, value []byte) {
		got, err := criNetNSPath(typeURL, value)
		if err != nil {
			return
		}
		if got != "" && (!filepath.IsAbs(got) || got != filepath.Clean(got)) {
			// Compared with the namespaces of the netns dir, which are
			// clean: "/run/netns//cni-x" would be another one.
			t.Fatalf("%q %q: netns path %q, not absolute and clean", typeURL, value, got)
		}
		if typeURL != criMetadataType && got != "" {
			t.Fatalf("netns path %q read from an extension of type %q", got, typeURL)
		}
		// A netns path, or none, is read only from what containerd
		// itself reads: its metadata version "v1".
		var v struct{ Version string }
		if typeURL == criMetadataType && (json.Unmarshal(value, &v) != nil || v.Version != "v1") {
			t.Fatalf("netns path %q read from %q, not containerd's v1 metadata", got, value)
		}
	})
}

// FuzzParseNetworkStatus: whatever CRI Status says in "config", the netns
// dir is an absolute path, or the status is an error.
func FuzzParseNetworkStatus(f *testing.F) {
	for _, s := range []string{
		`{"stateDir":"/run/containerd/io.containerd.grpc.v1.cri"}`,
		`{"stateDir":"/run/c/cri","netnsMountsUnderStateDir":true}`,
		`{"stateDir":"cri","netnsMountsUnderStateDir":true}`,
		`{"stateDir":"/","netnsMountsUnderStateDir":true}`,
		`{"netnsMountsUnderStateDir":"yes"}`,
		`[`, `null`, ``,
	} {
		f.Add(s, true)
	}
	f.Add("", false)
	f.Fuzz(func(t *testing.T, config string, has bool) {
		info := map[string]string{"cniconfig": `{"PluginDirs":["/opt/cni/bin"]}`}
		if has {
			info["config"] = config
		}
		s, err := parseNetworkStatus(info)
		if err != nil {
			return
		}
		if !filepath.IsAbs(s.NetnsDir) || s.CNIConfig != info["cniconfig"] {
			t.Fatalf("config %q: %+v", config, s)
		}
	})
}

// FuzzConvert: CRI listings of any shape are never a panic; every entry is
// either converted or set apart as malformed with a reason, and a converted
// entry has what the planner relies on: an ID listed once, a creation time,
// and for a container its sandbox's ID and the grace period kubelet would
// stop it with (the pod's deletion grace period, else its termination grace
// period; unreadable, naming the annotation, when not 0 to 2^32 seconds).
func FuzzConvert(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Each entry takes 4 bytes: which ID (from a few, so that some
		// repeat), whether it has metadata, its creation time's sign and
		// its state (out of range too) with, for a container, its grace
		// annotations.
		ids := []string{"", "a", "b", "c"}
		graces := []map[string]string{
			nil,
			{annotationDeletionGrace: "30"},
			{annotationTerminationGrace: "0", annotationPreStop: "{}"},
			{annotationTerminationGrace: "-1"},
			{annotationDeletionGrace: "abc", annotationTerminationGrace: "30"},
			{annotationDeletionGrace: "5", annotationTerminationGrace: "x"},
			{annotationTerminationGrace: "4294967296"},
			{annotationTerminationGrace: "4294967297", annotationPreStop: ""},
			{annotationDeletionGrace: "99999999999999999999"},
			{annotationTerminationGrace: " 30"},
		}
		next := func(i int) byte {
			if i < len(data) {
				return data[i]
			}
			return 0
		}
		var pods []*runtimeapi.PodSandbox
		var ctrs []*runtimeapi.Container
		for i := 0; i+4 <= len(data) && len(pods)+len(ctrs) < 64; i += 4 {
			id, meta, created, state := ids[next(i)%4], next(i+1)%2 == 1, int64(int8(next(i+2))), int32(next(i+3)%6)
			labels := map[string]string{podstate.LabelPodUID: id}
			if next(i)&0x80 == 0 {
				p := &runtimeapi.PodSandbox{Id: id, CreatedAt: created, State: runtimeapi.PodSandboxState(state), Labels: labels}
				if meta {
					p.Metadata = &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: id}
				}
				if next(i)&0x40 != 0 {
					p = nil
				}
				pods = append(pods, p)
				continue
			}
			c := &runtimeapi.Container{Id: id, PodSandboxId: ids[next(i+1)%4], CreatedAt: created, State: runtimeapi.ContainerState(state), Labels: labels,
				Annotations: graces[int(next(i+3)/6)%len(graces)]}
			if meta {
				c.Metadata = &runtimeapi.ContainerMetadata{Name: "c"}
			}
			if next(i)&0x40 != 0 {
				c = nil
			}
			ctrs = append(ctrs, c)
		}
		sandboxes, containers, bad := convert(pods, ctrs)
		if len(sandboxes)+len(containers)+len(bad) != len(pods)+len(ctrs) {
			t.Fatalf("%d pods and %d containers gave %d sandboxes, %d containers, %d malformed", len(pods), len(ctrs), len(sandboxes), len(containers), len(bad))
		}
		seen := map[string]bool{}
		for _, s := range sandboxes {
			if s.ID == "" || seen[s.ID] || s.CreatedAt.UnixNano() <= 0 {
				t.Fatalf("sandbox %+v", s)
			}
			seen[s.ID] = true
		}
		seen = map[string]bool{}
		annotations := map[string]map[string]string{}
		for _, c := range ctrs {
			if c != nil {
				annotations[c.Id] = c.Annotations
			}
		}
		for _, c := range containers {
			if c.ID == "" || c.SandboxID == "" || seen[c.ID] || c.CreatedAt.UnixNano() <= 0 {
				t.Fatalf("container %+v", c)
			}
			seen[c.ID] = true
			if want := wantKill(annotations[c.ID]); c.Kill.Grace != want.Grace || c.Kill.PreStop != want.PreStop ||
				(c.Kill.Unreadable == "") != (want.Unreadable == "") || !strings.Contains(c.Kill.Unreadable, want.Unreadable) {
				t.Fatalf("container %s with annotations %q: kill %+v, want %+v", c.ID, annotations[c.ID], c.Kill, want)
			}
		}
		for _, m := range bad {
			if m.Reason == "" || m.Kind != "sandbox" && m.Kind != "container" {
				t.Fatalf("malformed %+v", m)
			}
		}
	})
}

// wantKill is kubelet's reading of a container's grace annotations: the
// deletion grace period when it is there, else the termination grace
// period; a value that is not a number of seconds from 0 to 2^32 makes it
// unreadable (Unreadable here is the annotation's name, which the reason
// must name).
func wantKill(annotations map[string]string) KillSpec {
	_, preStop := annotations[annotationPreStop]
	k := KillSpec{PreStop: preStop}
	key := annotationDeletionGrace
	if _, ok := annotations[key]; !ok {
		key = annotationTerminationGrace
	}
	v, ok := annotations[key]
	if !ok {
		return k
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 || secs > 1<<32 {
		k.Unreadable = key
		return k
	}
	k.Grace = time.Duration(secs) * time.Second
	return k
}
