package cri

import (
	"context"
	"strings"
	"testing"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	namespacesapi "github.com/containerd/containerd/api/services/namespaces/v1"
	sandboxapi "github.com/containerd/containerd/api/services/sandbox/v1"
	sandboxtypes "github.com/containerd/containerd/api/types"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestTheNetnsPathIsReadFromCRIsSandboxMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, typeURL, value string
		want, wantErr        string
	}{
		{name: "a pod network sandbox", typeURL: criMetadataType,
			value: `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":"/run/containerd/netns/cni-1"}}`, want: "/run/containerd/netns/cni-1"},
		{name: "a netns path spelt uncleanly is read clean, as the netns dir's namespaces are named", typeURL: criMetadataType,
			value: `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":"/run/containerd//netns/./cni-1"}}`, want: "/run/containerd/netns/cni-1"},
		{name: "a host network sandbox", typeURL: criMetadataType, value: `{"Version":"v1","Metadata":{"ID":"abc","NetNSPath":""}}`},
		{name: "not a CRI sandbox: no extension"},
		{name: "another type under the key", typeURL: "example.com/Other", value: `{}`, wantErr: "has type"},
		{name: "not JSON", typeURL: criMetadataType, value: `{`, wantErr: "unexpected end"},
		{name: "a relative netns path", typeURL: criMetadataType, value: `{"Version":"v1","Metadata":{"NetNSPath":"cni-1"}}`, wantErr: "not absolute"},
		// containerd refuses every version but v1 itself (sandbox store
		// Metadata.UnmarshalJSON): none of these says "no netns".
		{name: "null metadata", typeURL: criMetadataType, value: `null`, wantErr: `metadata version ""`},
		{name: "empty metadata", typeURL: criMetadataType, value: `{}`, wantErr: `metadata version ""`},
		{name: "no version", typeURL: criMetadataType, value: `{"Metadata":{"NetNSPath":"/run/netns/cni-1"}}`, wantErr: `metadata version ""`},
		{name: "another version", typeURL: criMetadataType, value: `{"Version":"v2","Metadata":{"NetNSPath":"/run/netns/cni-1"}}`, wantErr: `metadata version "v2"`},
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

// storesRuntime is a containerd with one namespace, CRI's, and empty
// sandbox and container stores, that reports version.
type storesRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	namespacesapi.UnimplementedNamespacesServer
	version string
	// others are namespaces beside CRI's.
	others []string
}

func (s *storesRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: s.version}, nil
}

func (s *storesRuntime) List(context.Context, *namespacesapi.ListNamespacesRequest) (*namespacesapi.ListNamespacesResponse, error) {
	list := []*namespacesapi.Namespace{{Name: CRINamespace}}
	for _, ns := range s.others {
		list = append(list, &namespacesapi.Namespace{Name: ns})
	}
	return &namespacesapi.ListNamespacesResponse{Namespaces: list}, nil
}

// sandboxStore is storesRuntime's sandbox store (its List would clash
// with the namespaces service's).
type sandboxStore struct {
	sandboxapi.UnimplementedStoreServer
	// ids are the sandboxes every namespace's store lists (with no CRI
	// extension).
	ids []string
}

func (s sandboxStore) List(context.Context, *sandboxapi.StoreListRequest) (*sandboxapi.StoreListResponse, error) {
	r := &sandboxapi.StoreListResponse{}
	for _, id := range s.ids {
		r.List = append(r.List, &sandboxtypes.Sandbox{SandboxID: id})
	}
	return r, nil
}

// containerStore is an empty container store.
type containerStore struct {
	containersapi.UnimplementedContainersServer
}

func (containerStore) List(context.Context, *containersapi.ListContainersRequest) (*containersapi.ListContainersResponse, error) {
	return &containersapi.ListContainersResponse{}, nil
}

// An ID is random: one sandbox ID in two namespaces' stores is a forgery
// or a corruption, and which netns it names cannot be told. The records
// say so (the network side then holds its steps); the later namespace's
// record no longer silently replaces the earlier one.
func TestASandboxIDInTwoNamespacesMakesTheRecordsUnreadable(t *testing.T) {
	rt := &storesRuntime{version: "v2.4.2", others: []string{"moby"}}
	endpoint := serveServices(t, func(srv *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(srv, rt)
		namespacesapi.RegisterNamespacesServer(srv, rt)
		sandboxapi.RegisterStoreServer(srv, sandboxStore{ids: []string{"twice"}})
		containersapi.RegisterContainersServer(srv, containerStore{})
	})
	c, err := Dial(endpoint, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recs, err := c.Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs.Unreadable) != 1 || !strings.Contains(recs.Unreadable[0], "sandbox twice is in namespaces") {
		t.Fatalf("unreadable %q, want the sandbox in two namespaces named", recs.Unreadable)
	}
}

// TestANetnsRestsOnRecordsOnlyFromContainerd2: containerd 1.7 keeps CRI
// sandboxes outside its sandbox store and makes their netns before they
// are listed, so its (empty) records must hold every netns removal, with
// the reason; containerd 2.x's empty records hold nothing.
func TestANetnsRestsOnRecordsOnlyFromContainerd2(t *testing.T) {
	for _, tc := range []struct {
		version string
		holds   bool
	}{{"v2.4.2", false}, {"v1.7.27", true}, {"", true}} {
		rt := &storesRuntime{version: tc.version}
		endpoint := serveServices(t, func(srv *grpc.Server) {
			runtimeapi.RegisterRuntimeServiceServer(srv, rt)
			namespacesapi.RegisterNamespacesServer(srv, rt)
			sandboxapi.RegisterStoreServer(srv, sandboxStore{})
		})
		c, err := Dial(endpoint, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := c.Records(context.Background())
		c.Close()
		if err != nil {
			t.Fatalf("%q: %v", tc.version, err)
		}
		held := len(recs.Unreadable) > 0
		if held != tc.holds || (held && !strings.Contains(recs.Unreadable[0], "not containerd 2.0 or later")) {
			t.Errorf("containerd %q: unreadable %q, want netns removals held: %v", tc.version, recs.Unreadable, tc.holds)
		}
	}
}
