package podcgroups

import (
	"strings"
	"testing"
)

const (
	uidA      = "0f4d3c2b-1a2b-4c3d-8e9f-0123456789ab"
	uidB      = "5b1e8f3a-9c7d-4e2f-a1b3-c4d5e6f7a8b9"
	uidStatic = "d41d8cd98f00b204e9800998ecf8427e" // a static pod: md5 of its manifest
)

// under is a UID as the systemd driver writes it.
func under(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

func TestParseCgroupfsName(t *testing.T) {
	for _, tc := range []struct {
		rule, name, uid string
	}{
		{"api_server_uuid", "pod" + uidA, uidA},
		{"static_pod_md5", "pod" + uidStatic, uidStatic},
		{"bare_prefix_is_not_a_pod", "pod", ""},
		{"uid_must_be_hex", "podXYZ", ""},
		{"uid_must_be_lowercase", "pod" + strings.ToUpper(uidA), ""},
		{"prefix_must_be_lowercase", "Pod" + uidA, ""},
		{"systemd_suffix_is_not_cgroupfs", "pod" + uidA + ".slice", ""},
		{"underscored_uid_is_systemd_form", "pod" + under(uidA), ""},
		{"uid_alone_is_not_a_pod", uidA, ""},
		{"trailing_text", "pod" + uidA + "x", ""},
		{"dash_after_prefix", "pod-" + uidA, ""},
		{"dashes_in_wrong_places", "pod" + uidA[:7] + "-" + uidA[7:35], ""},
		{"uuid_one_short", "pod" + uidA[:35], ""},
		{"md5_one_short", "pod" + uidStatic[:31], ""},
		{"systemd_name", "kubepods-besteffort-pod" + under(uidA) + ".slice", ""},
		{"qos_cgroup", "besteffort", ""},
		{"dot_dot", "..", ""},
		{"dot_dot_in_uid", "pod../" + uidA[3:], ""},
		{"empty", "", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			uid, ok := ParseCgroupfsName(tc.name)
			if ok != (tc.uid != "") || uid != tc.uid {
				t.Fatalf("ParseCgroupfsName(%q) = %q, %v; want %q", tc.name, uid, ok, tc.uid)
			}
		})
	}
}

func TestParseSystemdName(t *testing.T) {
	for _, tc := range []struct {
		rule, root, name, uid, qos string
	}{
		{"guaranteed_directly_under_root", "kubepods", "kubepods-pod" + under(uidA) + ".slice", uidA, QOSGuaranteed},
		{"burstable", "kubepods", "kubepods-burstable-pod" + under(uidA) + ".slice", uidA, QOSBurstable},
		{"besteffort", "kubepods", "kubepods-besteffort-pod" + under(uidA) + ".slice", uidA, QOSBestEffort},
		{"static_pod_md5", "kubepods", "kubepods-besteffort-pod" + uidStatic + ".slice", uidStatic, QOSBestEffort},
		{"root_dashes_are_escaped", "my-pods", "my_pods-burstable-pod" + under(uidA) + ".slice", uidA, QOSBurstable},
		{"nested_root_joined_with_dash", "custom/kubepods", "custom-kubepods-pod" + under(uidA) + ".slice", uidA, QOSGuaranteed},
		{"unescaped_root_dashes", "my-pods", "my-pods-burstable-pod" + under(uidA) + ".slice", "", ""},
		{"uid_dashes_would_nest", "kubepods", "kubepods-besteffort-pod" + uidA + ".slice", "", ""},
		{"mixed_dashes_and_underscores", "kubepods", "kubepods-besteffort-pod" + uidA[:8] + "_" + uidA[9:] + ".slice", "", ""},
		{"unknown_qos", "kubepods", "kubepods-guaranteed-pod" + under(uidA) + ".slice", "", ""},
		{"qos_is_lowercase", "kubepods", "kubepods-BestEffort-pod" + under(uidA) + ".slice", "", ""},
		{"extra_dash_before_pod", "kubepods", "kubepods--pod" + under(uidA) + ".slice", "", ""},
		{"extra_dash_component", "kubepods", "kubepods-besteffort-x-pod" + under(uidA) + ".slice", "", ""},
		{"other_root", "kubepods", "other-besteffort-pod" + under(uidA) + ".slice", "", ""},
		{"needs_slice_suffix", "kubepods", "kubepods-besteffort-pod" + under(uidA), "", ""},
		{"scope_is_a_container", "kubepods", "kubepods-besteffort-pod" + under(uidA) + ".scope", "", ""},
		{"uid_must_be_lowercase", "kubepods", "kubepods-besteffort-pod" + strings.ToUpper(under(uidA)) + ".slice", "", ""},
		{"uid_must_be_hex", "kubepods", "kubepods-besteffort-podXYZ.slice", "", ""},
		{"empty_uid", "kubepods", "kubepods-besteffort-pod.slice", "", ""},
		{"qos_slice_is_not_a_pod", "kubepods", "kubepods-besteffort.slice", "", ""},
		{"root_slice_is_not_a_pod", "kubepods", "kubepods.slice", "", ""},
		{"cgroupfs_name", "kubepods", "pod" + uidA, "", ""},
		{"container_scope", "kubepods", "cri-containerd-" + strings.Repeat("a", 64) + ".scope", "", ""},
		{"dot_dot", "kubepods", "..", "", ""},
		{"root_with_underscore_cannot_be_systemd", "kube_pods", "kube_pods-pod" + under(uidA) + ".slice", "", ""},
		{"root_given_with_slice_suffix", "kubepods.slice", "kubepods.slice-pod" + under(uidA) + ".slice", "", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			uid, qos, ok := ParseSystemdName(tc.root, tc.name)
			if ok != (tc.uid != "") || uid != tc.uid || qos != tc.qos {
				t.Fatalf("ParseSystemdName(%q, %q) = %q, %q, %v; want %q, %q", tc.root, tc.name, uid, qos, ok, tc.uid, tc.qos)
			}
		})
	}
}

// TestPodRel: the one relative path Destroy and ReduceCPU accept, for both
// drivers, every QoS class and root shape.
func TestPodRel(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		driver Driver
		root   string
		qos    string
		uid    string
		want   string // "" = error
	}{
		{"cgroupfs_guaranteed_at_root", DriverCgroupfs, "kubepods", QOSGuaranteed, uidA, "kubepods/pod" + uidA},
		{"cgroupfs_burstable", DriverCgroupfs, "kubepods", QOSBurstable, uidA, "kubepods/burstable/pod" + uidA},
		{"cgroupfs_besteffort", DriverCgroupfs, "kubepods", QOSBestEffort, uidA, "kubepods/besteffort/pod" + uidA},
		{"cgroupfs_nested_root", DriverCgroupfs, "custom/kubepods", QOSBestEffort, uidA, "custom/kubepods/besteffort/pod" + uidA},
		{"systemd_guaranteed_at_root", DriverSystemd, "kubepods", QOSGuaranteed, uidA, "kubepods.slice/kubepods-pod" + under(uidA) + ".slice"},
		{"systemd_burstable", DriverSystemd, "kubepods", QOSBurstable, uidA, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under(uidA) + ".slice"},
		{"systemd_besteffort_static", DriverSystemd, "kubepods", QOSBestEffort, uidStatic, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidStatic + ".slice"},
		{"systemd_nested_root_expands", DriverSystemd, "custom/kubepods", QOSBurstable, uidA, "custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod" + under(uidA) + ".slice"},
		{"systemd_root_dashes_escaped", DriverSystemd, "my-pods", QOSGuaranteed, uidA, "my_pods.slice/my_pods-pod" + under(uidA) + ".slice"},
		{"bad_uid", DriverCgroupfs, "kubepods", QOSBestEffort, "x", ""},
		{"uppercase_uid", DriverCgroupfs, "kubepods", QOSBestEffort, strings.ToUpper(uidA), ""},
		{"bad_qos", DriverCgroupfs, "kubepods", "Guaranteed", uidA, ""},
		{"empty_qos", DriverCgroupfs, "kubepods", "", uidA, ""},
		{"bad_driver", "auto", "kubepods", QOSBestEffort, uidA, ""},
		{"empty_root", DriverCgroupfs, "", QOSBestEffort, uidA, ""},
		{"absolute_root", DriverCgroupfs, "/kubepods", QOSBestEffort, uidA, ""},
		{"dot_dot_root", DriverCgroupfs, "../kubepods", QOSBestEffort, uidA, ""},
		{"empty_root_element", DriverCgroupfs, "a//kubepods", QOSBestEffort, uidA, ""},
		{"trailing_slash_root", DriverCgroupfs, "kubepods/", QOSBestEffort, uidA, ""},
		{"systemd_root_with_underscore", DriverSystemd, "kube_pods", QOSBestEffort, uidA, ""},
		{"systemd_root_with_slice_suffix", DriverSystemd, "kubepods.slice", QOSBestEffort, uidA, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			got, err := podRel(tc.driver, tc.root, tc.qos, tc.uid)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("podRel = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("podRel = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestPodNamesRoundTrip: every name a parent gives a pod parses back to that
// pod, at that parent only.
func TestPodNamesRoundTrip(t *testing.T) {
	for _, driver := range []Driver{DriverCgroupfs, DriverSystemd} {
		parents, err := podParents(driver, "kubepods")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parents {
			for _, uid := range []string{uidA, uidStatic} {
				name := p.podName(uid)
				if got, ok := p.parse(name); !ok || got != uid {
					t.Errorf("%s %s: %q parses as %q, %v", driver, p.qos, name, got, ok)
				}
				if driver == DriverSystemd {
					if got, qos, ok := ParseSystemdName("kubepods", name); !ok || got != uid || qos != p.qos {
						t.Errorf("ParseSystemdName(%q) = %q, %q, %v", name, got, qos, ok)
					}
					for _, other := range parents {
						if other.qos != p.qos {
							if _, ok := other.parse(name); ok {
								t.Errorf("%q also parses as a %s pod", name, other.qos)
							}
						}
					}
				}
			}
		}
	}
}
