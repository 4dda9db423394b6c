package podstate

import "time"

// Kubelet's labels on sandboxes and containers (pkg/kubelet/types/labels.go).
// Only objects that carry the three pod labels are managed.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
)

// PodIdentity is the kubelet identity of a pod.
type PodIdentity struct {
	UID       string
	Namespace string
	Name      string
}

// KubeletPod reads the pod identity from kubelet's labels. ok is false when
// any of the three labels is missing or empty: such objects were not created
// by kubelet and are never managed.
func KubeletPod(labels map[string]string) (id PodIdentity, ok bool) {
	id = PodIdentity{
		UID:       labels[LabelPodUID],
		Namespace: labels[LabelPodNamespace],
		Name:      labels[LabelPodName],
	}
	return id, id.UID != "" && id.Namespace != "" && id.Name != ""
}

// EventKind is the lifecycle event an NRI message reports.
type EventKind uint8

const (
	RunPodSandbox EventKind = iota + 1
	StopPodSandbox
	RemovePodSandbox
	CreateContainer // NRI PostCreateContainer
	StartContainer  // NRI PostStartContainer
	StopContainer   // NRI StopContainer: stopped through CRI or exited by itself
	RemoveContainer
)

func (k EventKind) String() string {
	switch k {
	case RunPodSandbox:
		return "RunPodSandbox"
	case StopPodSandbox:
		return "StopPodSandbox"
	case RemovePodSandbox:
		return "RemovePodSandbox"
	case CreateContainer:
		return "CreateContainer"
	case StartContainer:
		return "StartContainer"
	case StopContainer:
		return "StopContainer"
	case RemoveContainer:
		return "RemoveContainer"
	}
	return "Invalid"
}

// IsContainerEvent reports whether the event is about a container.
func (k EventKind) IsContainerEvent() bool { return k >= CreateContainer && k <= RemoveContainer }

// Event is one lifecycle event. Container fields are set for container events.
type Event struct {
	Kind      EventKind
	At        time.Time
	Pod       PodIdentity
	SandboxID string
	// Container events only.
	ContainerID   string
	ContainerName string
}

// SyncedSandbox is a sandbox from NRI Synchronize (any state but Unknown; NRI
// does not say which, so a synchronized sandbox is recorded as Ready unless
// the record already knows better).
type SyncedSandbox struct {
	Pod       PodIdentity
	SandboxID string
}

// SyncedContainer is a container from NRI Synchronize (never an exited one).
type SyncedContainer struct {
	Pod       PodIdentity
	SandboxID string
	ID        string
	Name      string
	// State is Created, Running or Unknown (it may run); Synchronize
	// leaves exited containers out.
	State ContainerState
}

// Listing is one fresh CRI listing of managed objects.
type Listing struct {
	// StartSeq is State.Seq() read before the listing was requested. Records
	// changed by an event after it are newer than the listing.
	StartSeq   uint64
	Sandboxes  []ListedSandbox
	Containers []ListedContainer
	// Unreadable are IDs the runtime listed but that could not be read: the
	// object exists, so its record must not be marked Removed.
	Unreadable []string
}

// ListedSandbox is a sandbox as CRI ListPodSandbox reports it.
type ListedSandbox struct {
	Pod       PodIdentity
	ID        string
	Attempt   uint32
	Ready     bool
	CreatedAt time.Time
}

// ListedContainer is a container as CRI ListContainers reports it.
type ListedContainer struct {
	Pod       PodIdentity // from the container's kubelet labels
	ID        string
	SandboxID string
	Name      string
	Attempt   uint32
	State     ContainerState // Created, Running, Exited or Unknown
	CreatedAt time.Time
}
