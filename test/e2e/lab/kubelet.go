package lab

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Images imported by lab.sh up. Both run cmd/sleeper, which exits at once on
// SIGTERM/SIGINT.
const (
	PauseImage   = "localhost/pause:lab"
	SleeperImage = "localhost/sleeper:lab"
)

// Pod identifies a pod the way the kubelet does. Attempt is the sandbox
// attempt: a new sandbox for the same pod needs a higher one.
type Pod struct {
	Name, Namespace, UID string
	Attempt              uint32
	// Network, when set, gives the sandbox its own network namespace on the
	// lab's CNI network (bridge, host-local, portmap). Nil: hostNetwork, the
	// node's network namespace, no CNI call.
	Network *PodNetwork
}

// PodNetwork is a pod network (not hostNetwork) and its hostPorts.
type PodNetwork struct {
	Ports []PortMapping // portmap's DNAT rules
}

// PortMapping is a container port published on the node (a hostPort).
type PortMapping struct {
	HostPort, ContainerPort int32
	Protocol                string // "TCP" (default), "UDP" or "SCTP"
	HostIP                  string // optional
}

// NewUID returns a random RFC 4122 version 4 UUID, like a pod's metadata.uid.
func NewUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// PodLogDir is the kubelet's pod log directory <logRoot>/<ns>_<name>_<uid>.
func PodLogDir(logRoot string, p Pod) string {
	return filepath.Join(logRoot, p.Namespace+"_"+p.Name+"_"+p.UID)
}

// PodCgroupParent is the cgroupfs parent of a best-effort pod: <cgroupRoot>/besteffort/pod<uid>.
func PodCgroupParent(cgroupRoot string, p Pod) string {
	return filepath.Join(cgroupRoot, "besteffort", "pod"+p.UID)
}

// podNamespaces are the kubelet's namespace options of the pod's sandbox and
// containers: the node's network for hostNetwork pods, else the pod's own.
func podNamespaces(p Pod) *runtimeapi.NamespaceOption {
	network := runtimeapi.NamespaceMode_NODE
	if p.Network != nil {
		network = runtimeapi.NamespaceMode_POD
	}
	return &runtimeapi.NamespaceOption{
		Network: network,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// portMappings are the sandbox's port mappings, as the kubelet sends them.
func portMappings(p Pod) []*runtimeapi.PortMapping {
	if p.Network == nil {
		return nil
	}
	var out []*runtimeapi.PortMapping
	for _, m := range p.Network.Ports {
		proto := runtimeapi.Protocol_TCP
		switch strings.ToUpper(m.Protocol) {
		case "UDP":
			proto = runtimeapi.Protocol_UDP
		case "SCTP":
			proto = runtimeapi.Protocol_SCTP
		}
		out = append(out, &runtimeapi.PortMapping{Protocol: proto, ContainerPort: m.ContainerPort, HostPort: m.HostPort, HostIp: m.HostIP})
	}
	return out
}

// SandboxConfig is what the kubelet sends in RunPodSandbox for a best-effort
// pod: hostNetwork unless p.Network is set.
func SandboxConfig(p Pod, logRoot, cgroupRoot string) *runtimeapi.PodSandboxConfig {
	hostname := ""
	if p.Network != nil {
		// Like the kubelet, a Hostname only for pods with their own network
		// (and UTS) namespace: runc refuses to set one in the node's.
		hostname = p.Name
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Attempt: p.Attempt},
		Hostname:     hostname,
		LogDirectory: PodLogDir(logRoot, p),
		PortMappings: portMappings(p),
		Labels: map[string]string{
			"io.kubernetes.pod.name":      p.Name,
			"io.kubernetes.pod.namespace": p.Namespace,
			"io.kubernetes.pod.uid":       p.UID,
		},
		Annotations: map[string]string{
			"kubernetes.io/config.source": "api",
			"kubernetes.io/config.seen":   time.Now().UTC().Format(time.RFC3339Nano),
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    PodCgroupParent(cgroupRoot, p),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: podNamespaces(p)},
		},
	}
}

// ContainerConfig is what the kubelet sends in CreateContainer. attempt is the
// container's restart count; the log goes to <pod log dir>/<name>/<attempt>.log.
func ContainerConfig(p Pod, name string, attempt uint32, image string, args ...string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image},
		Args:     args,
		Labels: map[string]string{
			"io.kubernetes.container.name": name,
			"io.kubernetes.pod.name":       p.Name,
			"io.kubernetes.pod.namespace":  p.Namespace,
			"io.kubernetes.pod.uid":        p.UID,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.restartCount":           fmt.Sprint(attempt),
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
			// The API server defaults a pod's grace period to 30 s, and
			// kubelet writes it on every container.
			"io.kubernetes.pod.terminationGracePeriod": "30",
		},
		LogPath: filepath.Join(name, fmt.Sprintf("%d.log", attempt)),
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuShares: 2, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: podNamespaces(p)},
		},
	}
}

// RunPod creates the pod's log directory (the kubelet does that first) and
// runs its sandbox.
func (l *Lab) RunPod(ctx context.Context, p Pod) (string, error) {
	cfg := SandboxConfig(p, l.LogRoot, l.CgroupRoot)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", err
	}
	r, err := l.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s/%s: %w", p.Namespace, p.Name, err)
	}
	return r.PodSandboxId, nil
}

// CreateContainer creates a sleeper container named name in the pod's sandbox.
func (l *Lab) CreateContainer(ctx context.Context, p Pod, sandboxID, name string, attempt uint32) (string, error) {
	r, err := l.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sandboxID,
		Config:        ContainerConfig(p, name, attempt, SleeperImage, "-name", name),
		SandboxConfig: SandboxConfig(p, l.LogRoot, l.CgroupRoot),
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s in %s: %w", name, sandboxID, err)
	}
	return r.ContainerId, nil
}

// StartContainer starts a created container.
func (l *Lab) StartContainer(ctx context.Context, id string) error {
	if _, err := l.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("StartContainer %s: %w", id, err)
	}
	return nil
}

// RunContainer creates and starts a sleeper container.
func (l *Lab) RunContainer(ctx context.Context, p Pod, sandboxID, name string, attempt uint32) (string, error) {
	id, err := l.CreateContainer(ctx, p, sandboxID, name, attempt)
	if err != nil {
		return "", err
	}
	return id, l.StartContainer(ctx, id)
}

// StopContainer stops a container, with timeout seconds of grace.
func (l *Lab) StopContainer(ctx context.Context, id string, timeout int64) error {
	if _, err := l.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		return fmt.Errorf("StopContainer %s: %w", id, err)
	}
	return nil
}

// RemoveContainer removes a container.
func (l *Lab) RemoveContainer(ctx context.Context, id string) error {
	if _, err := l.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("RemoveContainer %s: %w", id, err)
	}
	return nil
}

// StopPod stops a pod sandbox and its containers.
func (l *Lab) StopPod(ctx context.Context, id string) error {
	if _, err := l.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	return nil
}

// RemovePod removes a pod sandbox and its containers.
func (l *Lab) RemovePod(ctx context.Context, id string) error {
	if _, err := l.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// SandboxPID returns the host pid of the sandbox's pause process.
func (l *Lab) SandboxPID(ctx context.Context, sandboxID string) (int, error) {
	r, err := l.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("PodSandboxStatus %s: %w", sandboxID, err)
	}
	return infoPID(r.Info, "sandbox "+sandboxID)
}

// ContainerPID returns the host pid of the container's process.
func (l *Lab) ContainerPID(ctx context.Context, ctrID string) (int, error) {
	r, err := l.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrID, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("ContainerStatus %s: %w", ctrID, err)
	}
	return infoPID(r.Info, "container "+ctrID)
}

// infoPID digs the pid out of containerd's verbose status ({"info": "{...,\"pid\":N}"}).
func infoPID(info map[string]string, what string) (int, error) {
	var v struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &v); err != nil {
		return 0, fmt.Errorf("%s: verbose info: %w", what, err)
	}
	if v.PID <= 0 {
		return 0, fmt.Errorf("%s: no pid in verbose info (not running?)", what)
	}
	return v.PID, nil
}
