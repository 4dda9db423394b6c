package podcgroups

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nri-housekeeper/nri-housekeeper/poduid"
)

// FuzzParsePodCgroupNames: a cgroup's name is a pod cgroup's only when it is
// exactly the name kubelet gives the pod it parses to, for one QoS class
// only; and every name kubelet gives a pod parses back to its UID.
func FuzzParsePodCgroupNames(f *testing.F) {
	for _, s := range [][3]string{
		{"kubepods", "pod" + uidA, uidA},
		{"kubepods", "kubepods-burstable-pod" + under(uidA) + ".slice", uidStatic},
		{"kubepods", "kubepods-pod" + under(uidA) + ".slice", uidA},
		{"custom/kubepods", "custom-kubepods-besteffort-pod" + uidStatic + ".slice", uidB},
		{"my-pods", "my_pods-pod" + under(uidA) + ".slice", uidA},
		{"kubepods", "kubepods-burstable-pod" + uidA + ".slice", "x"},
		{"kubepods", "kubepods-pod-burstable-pod" + under(uidA) + ".slice", ""},
		{"a_b", "pod", ""},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, root, name, uid string) {
		if got, ok := ParseCgroupfsName(name); ok && (!poduid.Valid(got) || name != podPrefix+got) {
			t.Fatalf("ParseCgroupfsName(%q) = %q", name, got)
		}
		got, qos, ok := ParseSystemdName(root, name)
		parents, err := podParents(DriverSystemd, root)
		if ok {
			if err != nil || !poduid.Valid(got) || strings.ContainsAny(name, "/\x00") {
				t.Fatalf("root %q: ParseSystemdName(%q) = %q, %q (podParents: %v)", root, name, got, qos, err)
			}
			for _, p := range parents {
				_, parsed := p.parse(name)
				if parsed != (p.qos == qos) || p.qos == qos && p.podName(got) != name {
					t.Fatalf("root %q: %q parsed as %s pod %s; as %s it parses %v and is named %q", root, name, qos, got, p.qos, parsed, p.podName(got))
				}
			}
		}
		if !poduid.Valid(uid) {
			return
		}
		if got, ok := ParseCgroupfsName(podPrefix + uid); !ok || got != uid {
			t.Fatalf("cgroupfs name of %q parses as %q, %v", uid, got, ok)
		}
		for _, p := range parents {
			n := p.podName(uid)
			if got, q, ok := ParseSystemdName(root, n); !ok || got != uid || q != p.qos {
				t.Fatalf("root %q: %s name %q of %q parses as %q, %q, %v", root, p.qos, n, uid, got, q, ok)
			}
		}
	})
}

// FuzzParsePids: a cgroup.procs file never panics the parser, yields one
// non-negative PID for each line that is not empty, or else an error that
// names the cgroup and the file.
func FuzzParsePids(f *testing.F) {
	for _, s := range []string{"1\n23\n4567\n", "", "\n\n", "1\nx\n", "-1\n", "99999999999999999999\n", "1\r\n", " 1\n", "+1\n", "\r\n1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const dir = "/sys/fs/cgroup/kubepods/pod" + uidA
		pids, err := parsePids(dir, data)
		if err != nil {
			if pids != nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), procsFile) {
				t.Fatalf("%q: %v, with %d PIDs", data, err, len(pids))
			}
			return
		}
		lines := 0
		for _, l := range bytes.Split(data, []byte("\n")) {
			// bufio.ScanLines drops a line's trailing \r.
			if len(bytes.TrimSuffix(l, []byte("\r"))) > 0 {
				lines++
			}
		}
		if len(pids) != lines {
			t.Fatalf("%q: %d PIDs from %d lines", data, len(pids), lines)
		}
		for _, pid := range pids {
			if pid < 0 {
				t.Fatalf("%q: PID %d", data, pid)
			}
		}
	})
}
