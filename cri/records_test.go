package cri

import (
	"strings"
	"testing"
)

func TestTheNetnsPathIsReadFromCRIsSandboxMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, typeURL, value string
		want, wantErr        string
	}{
		{name: "a pod network sandbox", typeURL: criMetadataType,
			value: `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":"/run/containerd/netns/cni-1"}}`, want: "/run/containerd/netns/cni-1"},
		{name: "a host network sandbox", typeURL: criMetadataType, value: `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":""}}`},
		{name: "not a CRI sandbox: no extension"},
		{name: "another type under the key", typeURL: "example.com/Other", value: `{}`, wantErr: "has type"},
		{name: "not JSON", typeURL: criMetadataType, value: `{`, wantErr: "unexpected end"},
		{name: "a relative netns path", typeURL: criMetadataType, value: `{"Metadata":{"NetNSPath":"cni-1"}}`, wantErr: "not absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := criNetNSPath(tc.typeURL, []byte(tc.value))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestTheNetnsDirFollowsContainerdsConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    map[string]string
		want    string
		wantErr string
	}{
		{name: "default: /var/run/netns", info: map[string]string{"config": `{"stateDir":"/run/containerd/io.containerd.grpc.v1.cri"}`}, want: "/var/run/netns"},
		{name: "netns_mounts_under_state_dir", info: map[string]string{"config": `{"stateDir":"/run/c/cri","netnsMountsUnderStateDir":true}`}, want: "/run/c/cri/netns"},
		{name: "no config in the info", info: map[string]string{}, want: "/var/run/netns"},
		{name: "a relative state dir", info: map[string]string{"config": `{"stateDir":"cri","netnsMountsUnderStateDir":true}`}, wantErr: "not an absolute path"},
		{name: "config not JSON", info: map[string]string{"config": `[`}, wantErr: "not containerd's CRI config JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNetworkStatus(tc.info)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.NetnsDir != tc.want {
				t.Fatalf("got %+v, %v; want netns dir %q", got, err, tc.want)
			}
		})
	}
}
