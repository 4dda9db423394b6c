// Package cri is the only code that talks to containerd's CRI service. It
// lists sandboxes and containers into plain Go values (Snapshot) so the rest
// of the plugin never sees protobufs, and sets apart malformed entries with
// what can still be read of them (their sandbox and pod).
package cri

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// maxMessageSize bounds one CRI response. A node with 10,000 pods and their
// labels and annotations lists well under this.
const maxMessageSize = 64 << 20

// Client is a CRI runtime-service client on containerd's socket.
type Client struct {
	endpoint   string
	rpcTimeout time.Duration
	conn       *grpc.ClientConn
	runtime    runtimeapi.RuntimeServiceClient
	// removeStops caches RemoveStopsSandbox's answer.
	removeStops removeStops
	// logPaths keeps ContainerLogPaths' answers.
	logPaths logPathMemo
}

// logPathMemo keeps the log paths ContainerLogPaths read, by pod UID and
// container ID. A container's log path is set once, when it is created
// (containerd v2.4.2 internal/cri/server/container_create.go; its status
// reads it from the container's metadata), so asking again cannot give
// another answer: only containers the pod's listing has not shown before
// are asked. Without it, removing N dead instances of one pod would ask
// N² statuses in one pass.
type logPathMemo struct {
	mu   sync.Mutex
	pods map[string]map[string]string
}

// logPathMemoPods bounds the pods kept: past it the memo starts again. Each
// pod's entry is replaced by its latest listing, so a pod's entry holds no
// container the runtime no longer lists; only pods gone since stay, until
// the bound.
const logPathMemoPods = 256

func (m *logPathMemo) get(podUID string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pods[podUID]
}

func (m *logPathMemo) put(podUID string, paths map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, kept := m.pods[podUID]; !kept && len(m.pods) >= logPathMemoPods {
		m.pods = nil
	}
	if m.pods == nil {
		m.pods = make(map[string]map[string]string)
	}
	m.pods[podUID] = paths
}

// Observer is told about every CRI and containerd call: the method's short
// name (e.g. "ListPodSandbox"), how long it took and its error.
type Observer func(method string, took time.Duration, err error)

// Option configures Dial.
type Option func(*[]grpc.DialOption)

// WithObserver reports every unary call to observe (for metrics).
func WithObserver(observe Observer) Option {
	return func(opts *[]grpc.DialOption) {
		*opts = append(*opts, grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
				start := time.Now()
				err := invoker(ctx, method, req, reply, cc, callOpts...)
				observe(method[strings.LastIndexByte(method, '/')+1:], time.Since(start), err)
				return err
			}))
	}
}

// Dial prepares a client for endpoint ("unix:///run/containerd/containerd.sock").
// The connection is made lazily, so Dial succeeds while containerd is down;
// every call is bounded by rpcTimeout.
func Dial(endpoint string, rpcTimeout time.Duration, opts ...Option) (*Client, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("CRI endpoint %q: only unix:// endpoints are supported", endpoint)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)),
	}
	for _, o := range opts {
		o(&dialOpts)
	}
	conn, err := grpc.NewClient(endpoint, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	}
	return &Client{endpoint: endpoint, rpcTimeout: rpcTimeout, conn: conn, runtime: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Endpoint returns the endpoint the client talks to.
func (c *Client) Endpoint() string { return c.endpoint }

// Version returns the runtime's name and version.
func (c *Client) Version(ctx context.Context) (name, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	r, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", "", fmt.Errorf("CRI Version on %s: %w", c.endpoint, err)
	}
	return r.GetRuntimeName(), r.GetRuntimeVersion(), nil
}

// ContainerState is a CRI container state.
type ContainerState string

const (
	ContainerCreated ContainerState = "CREATED"
	ContainerRunning ContainerState = "RUNNING"
	ContainerExited  ContainerState = "EXITED"
	ContainerUnknown ContainerState = "UNKNOWN"
)

// Sandbox is one pod sandbox from ListPodSandbox.
type Sandbox struct {
	ID string
	// Metadata as the creator (kubelet) set it.
	Name, Namespace, UID string
	Attempt              uint32
	Ready                bool
	CreatedAt            time.Time
	Labels               map[string]string
}

// Container is one container from ListContainers.
type Container struct {
	ID        string
	SandboxID string
	Name      string // CRI metadata name
	Attempt   uint32
	State     ContainerState
	CreatedAt time.Time
	Labels    map[string]string
	// Kill is how kubelet stops the container when it has no pod object
	// for it (its container GC stopping an UNKNOWN container), from the
	// annotations kubelet puts on every container.
	Kill KillSpec
}

// KillSpec is what kubelet's killContainer reads from a container's
// annotations when it restores the pod from them (kubelet v1.37
// kuberuntime labels.go getContainerInfoFromAnnotations,
// setTerminationGracePeriod).
type KillSpec struct {
	// Grace is the pod's deletion grace period, else its termination grace
	// period; 0 when neither annotation is there (kubelet then gives its
	// minimum, 2 s).
	Grace time.Duration
	// Unreadable says why a grace annotation that is there cannot be read
	// ("" when none is unreadable).
	Unreadable string
	// PreStop: the container has a preStop hook, which kubelet runs before
	// the stop.
	PreStop bool
}

// Annotations kubelet puts on every container it creates (v1.37
// kuberuntime labels.go).
const (
	annotationDeletionGrace    = "io.kubernetes.pod.deletionGracePeriod"
	annotationTerminationGrace = "io.kubernetes.pod.terminationGracePeriod"
	annotationPreStop          = "io.kubernetes.container.preStopHandler"
)

// killSpec reads a container's KillSpec from its annotations.
func killSpec(annotations map[string]string) KillSpec {
	var k KillSpec
	_, k.PreStop = annotations[annotationPreStop]
	for _, key := range []string{annotationDeletionGrace, annotationTerminationGrace} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs < 0 || secs > int64(maxGraceSeconds) {
			k.Unreadable = fmt.Sprintf("annotation %s = %q is not a number of seconds from 0 to %d", key, v, maxGraceSeconds)
			return k
		}
		k.Grace = time.Duration(secs) * time.Second
		return k
	}
	return k
}

// maxGraceSeconds bounds a grace period read from an annotation, so that it
// converts to a time.Duration (a pod's grace period is an int64 of seconds).
const maxGraceSeconds = 1 << 32

// Malformed is a listing entry that could not be read. It is never acted
// on, but what can be read of it still counts: containerd lists a container
// whose status it could not load as UNKNOWN with no creation time, and that
// container still holds its sandbox and its pod.
type Malformed struct {
	Kind   string // "sandbox" or "container"
	ID     string // may be empty
	Reason string
	// SandboxID is a container's sandbox; may be empty.
	SandboxID string
	// PodUID is kubelet's pod UID label, or else a sandbox's metadata UID;
	// may be empty.
	PodUID string
}

func (m Malformed) String() string {
	id := m.ID
	if id == "" {
		id = "<no id>"
	}
	return fmt.Sprintf("%s %s: %s", m.Kind, id, m.Reason)
}

// Snapshot is one complete listing of the runtime, in every state.
type Snapshot struct {
	TakenAt    time.Time
	Sandboxes  []Sandbox
	Containers []Container
	// Malformed entries are left out of Sandboxes and Containers.
	Malformed []Malformed
}

// Snapshot lists all sandboxes and all containers. Any failure fails the
// whole snapshot: a partial listing must never be taken for the truth.
func (c *Client) Snapshot(ctx context.Context) (Snapshot, error) {
	snap := Snapshot{TakenAt: time.Now()}
	sctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	pods, err := c.runtime.ListPodSandbox(sctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		return Snapshot{}, fmt.Errorf("CRI ListPodSandbox on %s: %w", c.endpoint, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	ctrs, err := c.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{})
	cancel()
	if err != nil {
		return Snapshot{}, fmt.Errorf("CRI ListContainers on %s: %w", c.endpoint, err)
	}
	snap.Sandboxes, snap.Containers, snap.Malformed = convert(pods.GetItems(), ctrs.GetContainers())
	return snap, nil
}

// convert turns CRI messages into plain values, setting apart what cannot be
// read. An ID listed more than once cannot be read either: which entry is
// the object? Taken as two, a pod's only sandbox would be "not its newest"
// to the planner.
func convert(pods []*runtimeapi.PodSandbox, ctrs []*runtimeapi.Container) ([]Sandbox, []Container, []Malformed) {
	var bad []Malformed
	podIDs := make(map[string]int, len(pods))
	for _, p := range pods {
		podIDs[p.GetId()]++
	}
	ctrIDs := make(map[string]int, len(ctrs))
	for _, c := range ctrs {
		ctrIDs[c.GetId()]++
	}
	sandboxes := make([]Sandbox, 0, len(pods))
	for _, p := range pods {
		s, reason := convertSandbox(p)
		if n := podIDs[p.GetId()]; reason == "" && n > 1 {
			reason = fmt.Sprintf("listed %d times", n)
		}
		if reason != "" {
			uid := p.GetLabels()[podstate.LabelPodUID]
			if uid == "" {
				uid = p.GetMetadata().GetUid()
			}
			bad = append(bad, Malformed{Kind: "sandbox", ID: p.GetId(), Reason: reason, PodUID: uid})
			continue
		}
		sandboxes = append(sandboxes, s)
	}
	containers := make([]Container, 0, len(ctrs))
	for _, c := range ctrs {
		ct, reason := convertContainer(c)
		if n := ctrIDs[c.GetId()]; reason == "" && n > 1 {
			reason = fmt.Sprintf("listed %d times", n)
		}
		if reason != "" {
			bad = append(bad, Malformed{Kind: "container", ID: c.GetId(), Reason: reason,
				SandboxID: c.GetPodSandboxId(), PodUID: c.GetLabels()[podstate.LabelPodUID]})
			continue
		}
		containers = append(containers, ct)
	}
	return sandboxes, containers, bad
}

func convertSandbox(p *runtimeapi.PodSandbox) (Sandbox, string) {
	switch {
	case p == nil:
		return Sandbox{}, "empty entry"
	case p.Id == "":
		return Sandbox{}, "no id"
	case p.Metadata == nil:
		return Sandbox{}, "no metadata"
	case p.CreatedAt <= 0:
		return Sandbox{}, "no creation time"
	}
	var ready bool
	switch p.State {
	case runtimeapi.PodSandboxState_SANDBOX_READY:
		ready = true
	case runtimeapi.PodSandboxState_SANDBOX_NOTREADY:
	default:
		return Sandbox{}, fmt.Sprintf("unknown state %d", p.State)
	}
	return Sandbox{
		ID: p.Id, Name: p.Metadata.Name, Namespace: p.Metadata.Namespace, UID: p.Metadata.Uid,
		Attempt: p.Metadata.Attempt, Ready: ready, CreatedAt: time.Unix(0, p.CreatedAt), Labels: p.Labels,
	}, ""
}

func convertContainer(c *runtimeapi.Container) (Container, string) {
	switch {
	case c == nil:
		return Container{}, "empty entry"
	case c.Id == "":
		return Container{}, "no id"
	case c.PodSandboxId == "":
		return Container{}, "no sandbox id"
	case c.Metadata == nil:
		return Container{}, "no metadata"
	case c.CreatedAt <= 0:
		return Container{}, "no creation time"
	}
	var state ContainerState
	switch c.State {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		state = ContainerCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		state = ContainerRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		state = ContainerExited
	case runtimeapi.ContainerState_CONTAINER_UNKNOWN:
		state = ContainerUnknown
	default:
		return Container{}, fmt.Sprintf("unknown state %d", c.State)
	}
	return Container{
		ID: c.Id, SandboxID: c.PodSandboxId, Name: c.Metadata.Name, Attempt: c.Metadata.Attempt,
		State: state, CreatedAt: time.Unix(0, c.CreatedAt), Labels: c.Labels, Kill: killSpec(c.Annotations),
	}, ""
}

// StopContainer stops a container, giving it timeout to exit after SIGTERM.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	// The call lasts as long as the container takes to stop: allow for that.
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout+timeout)
	defer cancel()
	_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64((timeout + time.Second - 1) / time.Second)})
	if err = ignoreNotFound(err); err != nil {
		return fmt.Errorf("CRI StopContainer %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes a container (CRI force-stops it first if needed).
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	if _, err := c.runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); ignoreNotFound(err) != nil {
		return fmt.Errorf("CRI RemoveContainer %s: %w", id, err)
	}
	return nil
}

// StopPodSandbox stops a sandbox and every container in it.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	if _, err := c.runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); ignoreNotFound(err) != nil {
		return fmt.Errorf("CRI StopPodSandbox %s: %w", id, err)
	}
	return nil
}

// RemovePodSandbox removes a stopped sandbox. On a runtime whose
// RemovePodSandbox stops the sandbox first itself (RemoveStopsSandbox), the
// call is given the time of both calls it stands for: its stop runs the
// network's teardown (a CNI DEL through the whole chain), and cut short it
// would be cut short again at every retry.
func (c *Client) RemovePodSandbox(ctx context.Context, id string) error {
	timeout := c.rpcTimeout
	if c.removeStopsKnown() {
		timeout = RemoveSandboxTimeout(c.rpcTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); ignoreNotFound(err) != nil {
		return fmt.Errorf("CRI RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// ignoreNotFound treats "no such object" as done, as kubelet does: the goal
// of a stop or remove is reached when the object is gone.
func ignoreNotFound(err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// SandboxExists asks the runtime for one sandbox by ID: false when it does
// not know it (NotFound).
func (c *Client) SandboxExists(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	_, err := c.runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	switch {
	case status.Code(err) == codes.NotFound:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("CRI PodSandboxStatus %s on %s: %w", id, c.endpoint, err)
	}
	return true, nil
}

// ContainerLogPaths lists the containers labelled with a pod UID and asks
// the runtime for each one's log path (CRI ContainerStatus log_path: the
// sandbox's log directory joined with the container's log path; "" when
// kubelet gave none). A container removed between the listing and its
// status is left out. Taken right before a container's log files are
// removed: what it returns is what every container of the pod logs to now.
// The listing is taken every time; a status only for a container not
// listed by an earlier call (logPathMemo).
func (c *Client) ContainerLogPaths(ctx context.Context, podUID string) (map[string]string, error) {
	lctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	ctrs, err := c.runtime.ListContainers(lctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{podstate.LabelPodUID: podUID}}})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers for pod %s on %s: %w", podUID, c.endpoint, err)
	}
	known := c.logPaths.get(podUID)
	paths := make(map[string]string, len(ctrs.GetContainers()))
	for _, ct := range ctrs.GetContainers() {
		if p, ok := known[ct.GetId()]; ok {
			paths[ct.GetId()] = p
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
		r, err := c.runtime.ContainerStatus(sctx, &runtimeapi.ContainerStatusRequest{ContainerId: ct.GetId()})
		cancel()
		switch {
		case status.Code(err) == codes.NotFound:
			continue
		case err != nil:
			return nil, fmt.Errorf("CRI ContainerStatus %s on %s: %w", ct.GetId(), c.endpoint, err)
		case r.GetStatus() == nil:
			return nil, fmt.Errorf("CRI ContainerStatus %s on %s: the answer has no status", ct.GetId(), c.endpoint)
		}
		paths[ct.GetId()] = r.GetStatus().GetLogPath()
	}
	c.logPaths.put(podUID, paths)
	return maps.Clone(paths), nil
}

// PodObjects are the sandboxes and containers the runtime lists for one pod
// UID, in any state, readable or not.
type PodObjects struct {
	Sandboxes  []string // IDs
	Containers []string // IDs
}

// Empty reports whether the runtime lists nothing of the pod.
func (o PodObjects) Empty() bool { return len(o.Sandboxes) == 0 && len(o.Containers) == 0 }

// ListPod lists the sandboxes and containers labelled with a pod UID
// (kubelet's io.kubernetes.pod.uid): a listing filtered by the runtime,
// cheap enough to take right before a step that cannot be undone.
func (c *Client) ListPod(ctx context.Context, uid string) (PodObjects, error) {
	selector := map[string]string{podstate.LabelPodUID: uid}
	sctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	pods, err := c.runtime.ListPodSandbox(sctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: selector}})
	cancel()
	if err != nil {
		return PodObjects{}, fmt.Errorf("CRI ListPodSandbox for pod %s on %s: %w", uid, c.endpoint, err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	ctrs, err := c.runtime.ListContainers(cctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: selector}})
	cancel()
	if err != nil {
		return PodObjects{}, fmt.Errorf("CRI ListContainers for pod %s on %s: %w", uid, c.endpoint, err)
	}
	var o PodObjects
	for _, p := range pods.GetItems() {
		o.Sandboxes = append(o.Sandboxes, p.GetId())
	}
	for _, ct := range ctrs.GetContainers() {
		o.Containers = append(o.Containers, ct.GetId())
	}
	return o, nil
}
