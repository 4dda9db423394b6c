package nodefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-housekeeper/nri-housekeeper/poduid"
)

// FuzzParsePodLogDirName: the parser never panics, agrees with the
// independent grammar, and whatever it accepts is one plain path element
// that rebuilds to exactly the input (so Join(dir, name) is a direct child).
func FuzzParsePodLogDirName(f *testing.F) {
	for _, s := range []string{
		"default_nginx_" + testUUID, testUUID, testMD5UID, "kube-system_etcd-node1.example.com_" + testMD5UID,
		"", ".", "..", "../x", "a_b", "a__" + testUUID, "A_b_" + testUUID, "a_b_c_" + testUUID, "a_b_" + testUUID + "/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := ParsePodLogDirName(name)
		want, ok := wantPodLogDir(name)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("%q: parser %+v, %v; grammar %+v, %v", name, got, err, want, ok)
		}
		if err != nil {
			if got != (PodLogDir{}) {
				t.Fatalf("%q: error %v with a non-zero result %+v", name, err, got)
			}
			return
		}
		if name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			t.Fatalf("accepted %q, which is not a plain path element", name)
		}
		if filepath.Join("/root", name) != "/root/"+name {
			t.Fatalf("accepted %q, which does not join as a direct child", name)
		}
		rebuilt := got.UID
		if got.Namespace != "" || got.PodName != "" {
			rebuilt = got.Namespace + "_" + got.PodName + "_" + got.UID
		}
		if rebuilt != name || got.Name != name || !poduid.Valid(got.UID) {
			t.Fatalf("%q parsed as %+v, which does not rebuild it", name, got)
		}
	})
}

// FuzzParseContainerLogLinkName: as above for link names.
func FuzzParseContainerLogLinkName(f *testing.F) {
	for _, s := range []string{
		"nginx_default_nginx-" + testCID + ".log", "p_n_c-abcdef.log", "p_n_c-abcde.log", ".log", "../x.log",
		"a_b_c_d-abcdef.log", "a_b_c-ABCDEF.log", strings.Repeat("p", 240) + "_n_c-abcdef.log",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := ParseContainerLogLinkName(name)
		want, ok := wantLink(name)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("%q: parser %+v, %v; grammar %+v, %v", name, got, err, want, ok)
		}
		if err != nil {
			return
		}
		if strings.ContainsAny(name, "/\x00") || filepath.Join("/root", name) != "/root/"+name {
			t.Fatalf("accepted %q, which is not a plain path element", name)
		}
		if rebuilt := got.PodName + "_" + got.Namespace + "_" + got.ContainerName + "-" + got.ContainerID + ".log"; rebuilt != name {
			t.Fatalf("%q parsed as %+v, which rebuilds %q", name, got, rebuilt)
		}
	})
}

// FuzzWithin: Within is true exactly when the cleaned path is strictly below
// a cleaned root and is no root itself, checked against filepath.Rel; and a
// path accepted for removal splits into clean components below its root.
func FuzzWithin(f *testing.F) {
	for _, s := range [][3]string{
		{"/var/log/pods", "/var/log/containers", "/var/log/pods/x"},
		{"/var/log/pods", "/var/log/containers", "/var/log/pods"},
		{"/var/log/pods", "/var/log/containers", "/var/log/pods/../containers"},
		{"/var/log/pods", "/var/log/containers", "/var/log/pods-x/y"},
		{"/var/log", "/var/log/pods", "/var/log/pods"},
		{"/a/", "/a/b", "/a/b/../../a/c"},
		{"/a", "/b", "a/b"},
		{"/a", "/b", "/a/./b/"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, root1, root2, path string) {
		r, err := NewRemover(root1, root2)
		if err != nil {
			return
		}
		got := r.Within(path)

		want := false
		if filepath.IsAbs(path) {
			c := filepath.Clean(path)
			isRoot := false
			for _, root := range r.Roots() {
				isRoot = isRoot || c == root
			}
			for _, root := range r.Roots() {
				rel, err := filepath.Rel(root, c)
				if err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !isRoot {
					want = true
				}
			}
		}
		if got != want {
			t.Fatalf("roots %q: Within(%q) = %v, want %v", r.Roots(), path, got, want)
		}

		root, rel, err := r.target(path)
		if err != nil {
			return
		}
		if !got || hasDotDot(path) {
			t.Fatalf("roots %q: %q accepted for removal but Within = %v", r.Roots(), path, got)
		}
		for _, el := range rel {
			if el == "" || el == "." || el == ".." {
				t.Fatalf("roots %q: %q split into %q", r.Roots(), path, rel)
			}
		}
		if root+"/"+strings.Join(rel, "/") != filepath.Clean(path) {
			t.Fatalf("roots %q: %q split into %q below %q", r.Roots(), path, rel, root)
		}
	})
}

// FuzzLogLinkTargetsStayInsideThePodLogsDir: a link's target, joined to the
// container logs dir when relative, is never said outside when it is
// strictly below the pod logs dir, checked against filepath.Rel; every other
// target is skipped as outside, whatever it contains, or (a '..' after a
// name, which the kernel may resolve elsewhere than the cleaned path) not
// examined at all.
func FuzzLogLinkTargetsStayInsideThePodLogsDir(f *testing.F) {
	base := f.TempDir()
	dir, pods := filepath.Join(base, "containers"), filepath.Join(base, "pods")
	for _, d := range []string{dir, pods} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	targets, err := openLogTargets(pods)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(targets.close)
	for _, s := range []string{
		"", ".", "..", "x", "../pods", "../pods/", "../pods/x", "../pods/./x/../y", "../pods/x/../../containers/y",
		"../pods-x/y", "/", pods, pods + "/x", pods + "/../pods/x", pods + "//x", "/proc/self/root" + pods + "/x",
		"../../../../../../../../../..", "../pods/x\x00y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		abs := target
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(dir, abs)
		}
		rel, err := filepath.Rel(pods, abs)
		inside := err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")

		_, reason := targets.examine(dir, target)
		outside := strings.Contains(reason, "points outside logs.pod_logs_dir")
		climbs := strings.Contains(reason, "has a '..' after a name")
		if climbs && !strings.Contains("/"+target+"/", "/../") {
			t.Fatalf("target %q has no '..': examine says %q", target, reason)
		}
		if (inside && outside) || (!inside && !outside && !climbs) {
			t.Fatalf("target %q (%q relative to the pod logs dir): examine says %q", target, rel, reason)
		}
	})
}

// kernelEscape escapes a path as the kernel writes it into the mount table
// (fs/proc_namespace.c, mangle_path and seq_path_root with " \t\n\\"): those
// four bytes become \ooo, every other byte is written as it is.
func kernelEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			b.WriteString("\\" + string('0'+c>>6) + string('0'+c>>3&7) + string('0'+c&7))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParseMountInfoLine: a mount table line never panics the parser, and
// the mount IDs, root, mount point and file system type of a line as the
// kernel writes it (fields separated by one space, paths escaped) come back
// exactly, whatever bytes its root and mount point hold (a path is any bytes
// but NUL). A mount point misread is a mount below a pod dir that the
// removal does not see; a root or type misread pins a namespace mount
// (podnet) to the wrong thing.
func FuzzParseMountInfoLine(f *testing.F) {
	for _, s := range [][4]string{
		{"/", "/var/lib/kubelet/pods/" + testUUID + "/volumes/kubernetes.io~empty-dir/cache", "ext4", ""},
		{"/data/a b", "/var/lib/kubelet/pods/x\ty", "ext4", ""},
		{`/a\b`, `/c\040d`, "ext4", ""},
		{"net:[4026532177]", "/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a30", "nsfs", ""},
		// Paths with white space the kernel does not escape.
		{"/data/my\u00a0dir", "/var/lib/kubelet/pods/" + testUUID + "/volumes/kubernetes.io~empty-dir/cache", "ext4", ""},
		{"/", "/var/lib/kubelet/pods/" + testUUID + "/volumes/a\rb", "ext4", ""},
		{"/a\rb", "/run/netns/c\u00a0d", "xfs", ""},
		{"net:[1]", "/run/netns/a\v-\vnsfs", "tmpfs", ""},
		{"/x\vy", "/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a30\fq\f-\fnsfs", "tmpfs", ""},
		{"", "", "", "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"},
		{"", "", "", "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 -"},
		{"", "", "", "36 35 98:0 /mnt1 /mnt2 rw,noatime - tmpfs  rw"},
		{"", "", "", "1 2 3 4 5 6 - "},
		{"", "", "", "36 35 98:0 /mnt1"},
		{"", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, root, point, fstype, line string) {
		// Any line: an error, or every part it names.
		if m, err := ParseMountInfoLine(line); err == nil && (m.ID == "" || m.Parent == "" || m.MountPoint == "" || m.FSType == "") {
			t.Fatalf("%q parsed with an empty part: %+v", line, m)
		}
		// A line the kernel could write.
		if root == "" || point == "" || fstype == "" || strings.ContainsRune(root+point+fstype, 0) || strings.ContainsAny(fstype, " \t\n\\") {
			return
		}
		if got := UnescapeMountPath(kernelEscape(point)); got != point {
			t.Fatalf("%q escaped as %q unescapes to %q", point, kernelEscape(point), got)
		}
		line = "36 25 0:4 " + kernelEscape(root) + " " + kernelEscape(point) + " rw,nosuid shared:5 - " + fstype + " /dev/sda1 rw"
		m, err := ParseMountInfoLine(line)
		want := MountInfo{ID: "36", Parent: "25", Root: root, MountPoint: point, Optional: "shared:5", FSType: fstype}
		if err != nil || m != want {
			t.Fatalf("%q parsed as %+v, %v; want %+v", line, m, err, want)
		}
		// Read from a file, as from the mount table: the same line, and
		// only it (an escaped newline does not split it).
		file := filepath.Join(t.TempDir(), "mountinfo")
		if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var read []MountInfo
		if err := ReadMountInfo(file, func(m MountInfo) bool { read = append(read, m); return true }); err != nil || len(read) != 1 || read[0] != want {
			t.Fatalf("%q read from a file as %+v, %v; want %+v", line, read, err, want)
		}
	})
}
