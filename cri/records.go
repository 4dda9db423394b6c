package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	namespacesapi "github.com/containerd/containerd/api/services/namespaces/v1"
	sandboxapi "github.com/containerd/containerd/api/services/sandbox/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRINamespace is the containerd namespace the CRI plugin keeps its
// sandboxes and containers in.
const CRINamespace = "k8s.io"

// criMetadataKey and criMetadataType name the extension in which containerd's
// CRI plugin stores a sandbox's metadata, netns path included
// (containerd v2.4.2 internal/cri/server/podsandbox: MetadataKey, and the
// typeurl registration of sandboxstore.Metadata).
const (
	criMetadataKey  = "metadata"
	criMetadataType = "github.com/containerd/cri/pkg/store/sandbox/Metadata"
	// criMetadataVersion is the only version containerd writes into it
	// (the sandbox store's metadataVersion, 1.7 and 2.x alike).
	criMetadataVersion = "v1"
)

// Records are what containerd's own stores hold, in every namespace: the
// sandbox store (written at the start of RunPodSandbox, before the network
// namespace and CNI ADD, and deleted only after teardown) and, outside the
// CRI namespace, the container store (nerdctl and other clients attach
// containers to the same CNI networks with their container IDs). CRI's own
// containers are in the CRI listing; their records there are large (a full
// OCI spec each) and they never own a CNI attachment.
type Records struct {
	// Sandboxes by ID, in any namespace.
	Sandboxes map[string]SandboxRecord
	// Containers are the container IDs of every namespace but the CRI one.
	Containers map[string]string // ID → namespace
	// Unreadable says which records could not be decoded: they are
	// listed by ID, but their network namespace is not known. A
	// containerd before 2.0 is one too: it keeps no CRI sandbox in its
	// sandbox store, so no record tells any sandbox's netns.
	Unreadable []string
}

// SandboxRecord is one entry of containerd's sandbox store.
type SandboxRecord struct {
	Namespace string
	// NetNSPath is the network namespace the CRI plugin made for the
	// sandbox ("" for a host-network pod, or one whose netns was not made
	// yet or was already removed).
	NetNSPath string
}

// Has reports whether any record, sandbox or container, has this ID.
func (r Records) Has(id string) bool {
	if _, ok := r.Sandboxes[id]; ok {
		return true
	}
	_, ok := r.Containers[id]
	return ok
}

// Records lists containerd's sandbox store in every namespace and its
// container store in every namespace but CRI's. Any error fails the whole
// listing: a partial one would make a live attachment look unowned.
//
// containerd 2.x writes a CRI sandbox's record to its sandbox store before
// it makes the netns, and names the netns there (v2.4.2
// internal/cri/server/sandbox_run.go). containerd 1.7 keeps a CRI sandbox
// as a container of the CRI namespace instead, and makes the netns and runs
// CNI ADD before the sandbox is listed (v1.7.27 pkg/cri/server/
// sandbox_run.go): no record names the netns of a sandbox it is making, so
// for a containerd before 2.0 (or one whose version does not say) Records
// says so in Unreadable, which holds every netns removal. Attachments and
// reservations do not rest on it: the check right before their step asks
// every namespace's container store too (RecordExists).
func (c *Client) Records(ctx context.Context) (Records, error) {
	namespaces, err := c.namespaces(ctx)
	if err != nil {
		return Records{}, err
	}
	r := Records{Sandboxes: map[string]SandboxRecord{}, Containers: map[string]string{}}
	name, version, err := c.Version(ctx)
	if err != nil {
		return Records{}, err
	}
	if !containerd2(name, version) {
		r.Unreadable = append(r.Unreadable, fmt.Sprintf("the runtime is %s %s, not containerd 2.0 or later: it keeps no CRI sandbox in its sandbox store, "+
			"so no record tells which netns a sandbox it is making uses", name, version))
	}
	store := sandboxapi.NewStoreClient(c.conn)
	ctrs := containersapi.NewContainersClient(c.conn)
	for _, ns := range namespaces {
		nctx, cancel := context.WithTimeout(namespaced(ctx, ns), c.rpcTimeout)
		sbs, err := store.List(nctx, &sandboxapi.StoreListRequest{})
		cancel()
		if err != nil {
			return Records{}, fmt.Errorf("containerd sandbox store List in namespace %q on %s: %w", ns, c.endpoint, err)
		}
		for _, sb := range sbs.GetList() {
			rec := SandboxRecord{Namespace: ns}
			netns, err := criNetNSPath(sb.GetExtensions()[criMetadataKey].GetTypeUrl(), sb.GetExtensions()[criMetadataKey].GetValue())
			if err != nil {
				r.Unreadable = append(r.Unreadable, fmt.Sprintf("sandbox %s in namespace %s: %v", sb.GetSandboxID(), ns, err))
			}
			rec.NetNSPath = netns
			if prev, ok := r.Sandboxes[sb.GetSandboxID()]; ok {
				// IDs are random: two namespaces with one are a forgery or
				// a corruption, and which netns it names cannot be told.
				r.Unreadable = append(r.Unreadable, fmt.Sprintf("sandbox %s is in namespaces %s and %s", sb.GetSandboxID(), prev.Namespace, ns))
				if prev.NetNSPath != "" {
					continue
				}
			}
			r.Sandboxes[sb.GetSandboxID()] = rec
		}
		if ns == CRINamespace {
			continue
		}
		nctx, cancel = context.WithTimeout(namespaced(ctx, ns), c.rpcTimeout)
		list, err := ctrs.List(nctx, &containersapi.ListContainersRequest{})
		cancel()
		if err != nil {
			return Records{}, fmt.Errorf("containerd container store List in namespace %q on %s: %w", ns, c.endpoint, err)
		}
		for _, ct := range list.GetContainers() {
			r.Containers[ct.GetID()] = ns
		}
	}
	sort.Strings(r.Unreadable)
	return r, nil
}

// RecordExists asks containerd, right before a network step, whether any
// namespace's sandbox store or container store, or CRI, knows id.
func (c *Client) RecordExists(ctx context.Context, id string) (bool, error) {
	namespaces, err := c.namespaces(ctx)
	if err != nil {
		return false, err
	}
	store := sandboxapi.NewStoreClient(c.conn)
	ctrs := containersapi.NewContainersClient(c.conn)
	for _, ns := range namespaces {
		nctx, cancel := context.WithTimeout(namespaced(ctx, ns), c.rpcTimeout)
		_, err := store.Get(nctx, &sandboxapi.StoreGetRequest{SandboxID: id})
		cancel()
		switch {
		case err == nil:
			return true, nil
		case status.Code(err) != codes.NotFound:
			return false, fmt.Errorf("containerd sandbox store Get %s in namespace %q on %s: %w", id, ns, c.endpoint, err)
		}
		nctx, cancel = context.WithTimeout(namespaced(ctx, ns), c.rpcTimeout)
		_, err = ctrs.Get(nctx, &containersapi.GetContainerRequest{ID: id})
		cancel()
		switch {
		case err == nil:
			return true, nil
		case status.Code(err) != codes.NotFound:
			return false, fmt.Errorf("containerd container store Get %s in namespace %q on %s: %w", id, ns, c.endpoint, err)
		}
	}
	return c.SandboxExists(ctx, id)
}

func (c *Client) namespaces(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	resp, err := namespacesapi.NewNamespacesClient(c.conn).List(ctx, &namespacesapi.ListNamespacesRequest{})
	if err != nil {
		return nil, fmt.Errorf("containerd namespaces List on %s: %w", c.endpoint, err)
	}
	var names []string
	for _, ns := range resp.GetNamespaces() {
		names = append(names, ns.GetName())
	}
	return names, nil
}

// namespaced sets the containerd namespace of the calls made with ctx.
func namespaced(ctx context.Context, ns string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "containerd-namespace", ns)
}

// criNetNSPath reads the netns path out of the CRI plugin's sandbox
// metadata extension ({"Version":"v1","Metadata":{...,"NetNSPath":...}}).
// A sandbox without the extension is not a CRI sandbox: no netns.
func criNetNSPath(typeURL string, value []byte) (string, error) {
	if typeURL == "" && len(value) == 0 {
		return "", nil
	}
	if typeURL != criMetadataType {
		return "", fmt.Errorf("extension %q has type %q, not %q", criMetadataKey, typeURL, criMetadataType)
	}
	var v struct {
		Version  string
		Metadata struct{ NetNSPath string }
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return "", fmt.Errorf("extension %q: %w", criMetadataKey, err)
	}
	// Anything but version "v1" ("null", "{}", another version) is not
	// a record containerd wrote, and read as "no netns" it would leave
	// the sandbox's netns unrecorded: one for a namespace removal to take.
	if v.Version != criMetadataVersion {
		return "", fmt.Errorf("extension %q: metadata version %q, not containerd's %q", criMetadataKey, v.Version, criMetadataVersion)
	}
	if v.Metadata.NetNSPath != "" && !filepath.IsAbs(v.Metadata.NetNSPath) {
		return "", fmt.Errorf("extension %q: netns path %q is not absolute", criMetadataKey, v.Metadata.NetNSPath)
	}
	if v.Metadata.NetNSPath == "" {
		return "", nil
	}
	// Clean: the path is compared with the namespaces of the netns dir,
	// which are clean; "/var/run/netns//cni-x" names the same one.
	return filepath.Clean(v.Metadata.NetNSPath), nil
}

// NetworkStatus is what containerd's CRI Status (verbose) says of pod
// networking.
type NetworkStatus struct {
	// CNIConfig is the CNI configuration containerd loaded, as go-cni's
	// ConfigResult JSON (Info["cniconfig"]); "" when it reports none.
	CNIConfig string
	// NetnsDir is where containerd mounts sandbox network namespaces:
	// <CRI state dir>/netns with netns_mounts_under_state_dir, else
	// /var/run/netns (containerd v2.4.2 sandbox_run.go).
	NetnsDir string
}

// NetworkStatus asks CRI Status (verbose) for containerd's CNI configuration
// and its netns dir.
func (c *Client) NetworkStatus(ctx context.Context) (NetworkStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	resp, err := c.runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return NetworkStatus{}, fmt.Errorf("CRI Status on %s: %w", c.endpoint, err)
	}
	return parseNetworkStatus(resp.GetInfo())
}

func parseNetworkStatus(info map[string]string) (NetworkStatus, error) {
	s := NetworkStatus{CNIConfig: info["cniconfig"], NetnsDir: "/var/run/netns"}
	raw, ok := info["config"]
	if !ok {
		return s, nil
	}
	var cfg struct {
		StateDir                 string `json:"stateDir"`
		NetNSMountsUnderStateDir bool   `json:"netnsMountsUnderStateDir"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return NetworkStatus{}, fmt.Errorf("CRI Status info \"config\" is not containerd's CRI config JSON: %w", err)
	}
	if cfg.NetNSMountsUnderStateDir {
		if !filepath.IsAbs(cfg.StateDir) {
			return NetworkStatus{}, fmt.Errorf("CRI Status info \"config\": netns_mounts_under_state_dir is set but stateDir %q is not an absolute path", cfg.StateDir)
		}
		s.NetnsDir = filepath.Join(cfg.StateDir, "netns")
	}
	return s, nil
}
