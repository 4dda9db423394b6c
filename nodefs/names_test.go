package nodefs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

const (
	testUUID   = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
	testMD5UID = "d41d8cd98f00b204e9800998ecf8427e"                                 // a static pod's UID: md5 hex, no dashes
	testCID    = "4c01db0b339c3c1a1d5bd8d3b7e0a7f2a0b3c4d5e6f708192a3b4c5d6e7f8091" // 64 hex
)

// podLogDirRE is the pod log dir grammar written independently of the
// parser, as a differential check (lengths are checked separately).
var podLogDirRE = regexp.MustCompile(`^(?:([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)_([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)_)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)

// linkRE is the container log link grammar, written independently.
var linkRE = regexp.MustCompile(`^([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)_([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)_([a-z0-9](?:[-a-z0-9]*[a-z0-9])?)-([0-9a-f]{6,64})\.log$`)

func wantPodLogDir(name string) (PodLogDir, bool) {
	m := podLogDirRE.FindStringSubmatch(name)
	if m == nil || len(m[1]) > 63 || len(m[2]) > 253 {
		return PodLogDir{}, false
	}
	return PodLogDir{Name: name, Namespace: m[1], PodName: m[2], UID: m[3]}, true
}

func wantLink(name string) (ContainerLogLink, bool) {
	m := linkRE.FindStringSubmatch(name)
	if m == nil || len(name) > 255 || len(m[1]) > 253 || len(m[2]) > 63 || len(m[3]) > 63 {
		return ContainerLogLink{}, false
	}
	return ContainerLogLink{Name: name, PodName: m[1], Namespace: m[2], ContainerName: m[3], ContainerID: m[4], Truncated: len(name) == 255}, true
}

func TestParsePodLogDirName(t *testing.T) {
	tests := []struct {
		rule string
		name string
		want PodLogDir // zero: must not parse
	}{
		{"current format with an API server UUID", "default_nginx-7d9f8b6c5-x2x4z_" + testUUID,
			PodLogDir{Namespace: "default", PodName: "nginx-7d9f8b6c5-x2x4z", UID: testUUID}},
		{"static pod: md5 UID without dashes, dotted node name in pod name", "kube-system_kube-apiserver-node1.example.com_" + testMD5UID,
			PodLogDir{Namespace: "kube-system", PodName: "kube-apiserver-node1.example.com", UID: testMD5UID}},
		{"legacy <uid> name", testUUID, PodLogDir{UID: testUUID}},
		{"legacy static pod <uid> name", testMD5UID, PodLogDir{UID: testMD5UID}},
		{"longest namespace (63) and pod name (253)", strings.Repeat("n", 63) + "_" + strings.Repeat("p", 253) + "_" + testUUID,
			PodLogDir{Namespace: strings.Repeat("n", 63), PodName: strings.Repeat("p", 253), UID: testUUID}},
		{"single-character names", "a_b_" + testUUID, PodLogDir{Namespace: "a", PodName: "b", UID: testUUID}},

		{"empty name", "", PodLogDir{}},
		{"dot", ".", PodLogDir{}},
		{"dot dot", "..", PodLogDir{}},
		{"parent escape", "../x", PodLogDir{}},
		{"path separator", "default_nginx_" + testUUID + "/x", PodLogDir{}},
		{"parent escape in namespace", "..__" + testUUID, PodLogDir{}},
		{"two parts", "a_b", PodLogDir{}},
		{"two parts with uid", "default_" + testUUID, PodLogDir{}},
		{"extra underscore", "default_my_pod_" + testUUID, PodLogDir{}},
		{"empty namespace", "_nginx_" + testUUID, PodLogDir{}},
		{"empty pod name", "default__" + testUUID, PodLogDir{}},
		{"empty uid", "default_nginx_", PodLogDir{}},
		{"uppercase namespace", "Default_nginx_" + testUUID, PodLogDir{}},
		{"uppercase pod name", "default_Nginx_" + testUUID, PodLogDir{}},
		{"uppercase uid", "default_nginx_" + strings.ToUpper(testUUID), PodLogDir{}},
		{"namespace too long (64)", strings.Repeat("n", 64) + "_nginx_" + testUUID, PodLogDir{}},
		{"pod name too long (254)", "default_" + strings.Repeat("p", 254) + "_" + testUUID, PodLogDir{}},
		{"namespace with a dot (a label, not a subdomain)", "kube.system_nginx_" + testUUID, PodLogDir{}},
		{"namespace starting with a dash", "-ns_nginx_" + testUUID, PodLogDir{}},
		{"pod name ending with a dash", "default_nginx-_" + testUUID, PodLogDir{}},
		{"pod name with an empty label", "default_a..b_" + testUUID, PodLogDir{}},
		{"pod name starting with a dot", "default_.hidden_" + testUUID, PodLogDir{}},
		{"pod name with a space", "default_my pod_" + testUUID, PodLogDir{}},
		{"uid too short", "default_nginx_1234", PodLogDir{}},
		{"uid of 31 hex", "default_nginx_" + testMD5UID[:31], PodLogDir{}},
		{"uid of 33 hex", "default_nginx_" + testMD5UID + "0", PodLogDir{}},
		{"uid with misplaced dashes", "default_nginx_0a1b2c3d4-e5f-6789-abcd-ef0123456789", PodLogDir{}},
		{"uid with non-hex", "default_nginx_0a1b2c3d-4e5f-6789-abcd-ef012345678g", PodLogDir{}},
		{"legacy name that is not a uid", "lost+found", PodLogDir{}},
		{"legacy name that is a short hex", "deadbeef", PodLogDir{}},
		{"trailing newline", "default_nginx_" + testUUID + "\n", PodLogDir{}},
		{"NUL byte", "default_nginx_" + testUUID[:35] + "\x00", PodLogDir{}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got, err := ParsePodLogDirName(tt.name)
			if tt.want.UID == "" {
				if err == nil {
					t.Fatalf("ParsePodLogDirName(%q) = %+v, want an error", tt.name, got)
				}
				if err.Error() == "" {
					t.Fatal("error without a reason")
				}
			} else {
				tt.want.Name = tt.name
				if err != nil || got != tt.want {
					t.Fatalf("ParsePodLogDirName(%q) = %+v, %v; want %+v", tt.name, got, err, tt.want)
				}
			}
			if w, ok := wantPodLogDir(tt.name); ok != (err == nil) || (ok && w != got) {
				t.Fatalf("parser and independent grammar disagree on %q: parser %+v, %v; grammar %+v, %v", tt.name, got, err, w, ok)
			}
		})
	}
}

func TestParseContainerLogLinkName(t *testing.T) {
	tests := []struct {
		rule string
		name string
		want ContainerLogLink // zero: must not parse
	}{
		{"kubelet's format", "nginx-7d9f8b6c5-x2x4z_default_nginx-" + testCID + ".log",
			ContainerLogLink{PodName: "nginx-7d9f8b6c5-x2x4z", Namespace: "default", ContainerName: "nginx", ContainerID: testCID}},
		{"container ID after the last dash, container name with dashes", "web_prod_side-car-proxy-" + testCID + ".log",
			ContainerLogLink{PodName: "web", Namespace: "prod", ContainerName: "side-car-proxy", ContainerID: testCID}},
		{"dotted pod name", "etcd-node1.example.com_kube-system_etcd-" + testCID + ".log",
			ContainerLogLink{PodName: "etcd-node1.example.com", Namespace: "kube-system", ContainerName: "etcd", ContainerID: testCID}},
		{"shortest container ID kubelet accepts (6)", "p_n_c-abcdef.log",
			ContainerLogLink{PodName: "p", Namespace: "n", ContainerName: "c", ContainerID: "abcdef"}},

		{"empty", "", ContainerLogLink{}},
		{"only the suffix", ".log", ContainerLogLink{}},
		{".log missing", "nginx_default_nginx-" + testCID, ContainerLogLink{}},
		{"other suffix", "nginx_default_nginx-" + testCID + ".log.1", ContainerLogLink{}},
		{"parent escape", "../x.log", ContainerLogLink{}},
		{"parent escape in pod name", "../x_default_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"path separator", "a/b_default_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"container ID too short (5)", "nginx_default_nginx-abcde.log", ContainerLogLink{}},
		{"container ID too long (65)", "nginx_default_nginx-" + testCID + "0.log", ContainerLogLink{}},
		{"container ID not hex", "nginx_default_nginx-zzzzzzzz.log", ContainerLogLink{}},
		{"container ID uppercase", "nginx_default_nginx-" + strings.ToUpper(testCID) + ".log", ContainerLogLink{}},
		{"empty container ID", "nginx_default_nginx-.log", ContainerLogLink{}},
		{"no dash before the container ID", "nginx_default_" + testCID + ".log", ContainerLogLink{}},
		{"empty container name", "nginx_default_-" + testCID + ".log", ContainerLogLink{}},
		{"empty pod name", "_default_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"empty namespace", "nginx__nginx-" + testCID + ".log", ContainerLogLink{}},
		{"two parts", "nginx_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"extra underscore", "my_pod_default_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"uppercase pod name", "Nginx_default_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"namespace with a dot", "nginx_kube.system_nginx-" + testCID + ".log", ContainerLogLink{}},
		{"container name with a dot", "nginx_default_ng.inx-" + testCID + ".log", ContainerLogLink{}},
		{"container name ending with a dash", "nginx_default_nginx--" + testCID + ".log", ContainerLogLink{}},
		{"container name too long (64)", "nginx_default_" + strings.Repeat("c", 64) + "-" + testCID + ".log", ContainerLogLink{}},
		{"longer than 255 bytes", strings.Repeat("p", 253) + "_default_nginx-" + testCID + ".log", ContainerLogLink{}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got, err := ParseContainerLogLinkName(tt.name)
			if tt.want.ContainerID == "" {
				if err == nil {
					t.Fatalf("ParseContainerLogLinkName(%q) = %+v, want an error", tt.name, got)
				}
			} else {
				tt.want.Name = tt.name
				if err != nil || got != tt.want {
					t.Fatalf("ParseContainerLogLinkName(%q) = %+v, %v; want %+v", tt.name, got, err, tt.want)
				}
			}
			if w, ok := wantLink(tt.name); ok != (err == nil) || (ok && w != got) {
				t.Fatalf("parser and independent grammar disagree on %q: parser %+v, %v; grammar %+v, %v", tt.name, got, err, w, ok)
			}
		})
	}
}

// kubeletLogSymlinkName is kubelet's logSymlink (legacy.go) name rule:
// "<pod>_<ns>_<container>-<id>", cut to 251 bytes, plus ".log".
func kubeletLogSymlinkName(pod, ns, container, id string) string {
	s := fmt.Sprintf("%s_%s_%s-%s", pod, ns, container, id)
	if len(s) > 255-len(".log") {
		s = s[:255-len(".log")]
	}
	return s + ".log"
}

// TestParseContainerLogLinkNameTruncatedByKubelet: a name kubelet cut at 255
// bytes parses whenever at least 6 ID digits survive, reports Truncated, and
// its ContainerID is a prefix of the real ID.
func TestParseContainerLogLinkNameTruncatedByKubelet(t *testing.T) {
	for podLen := 1; podLen <= 253; podLen += 3 {
		pod := strings.Repeat("p", podLen)
		name := kubeletLogSymlinkName(pod, "default", "app", testCID)
		got, err := ParseContainerLogLinkName(name)
		kept := 255 - len(".log") - len(pod+"_default_app-")
		switch {
		case kept >= len(testCID): // not cut
			if err != nil || got.ContainerID != testCID || got.Truncated != (len(name) == 255) {
				t.Fatalf("pod name of %d: got %+v, %v", podLen, got, err)
			}
		case kept >= 6:
			if err != nil || !got.Truncated || got.ContainerID != testCID[:kept] || got.PodName != pod {
				t.Fatalf("pod name of %d: got %+v, %v; want ID %q, truncated", podLen, got, err, testCID[:kept])
			}
		default: // too little of the ID left: kubelet could not use it either
			if err == nil {
				t.Fatalf("pod name of %d: %q parsed as %+v with fewer than 6 ID digits left", podLen, name, got)
			}
		}
	}
}
