package lab

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImportImage imports an OCI image-layout tarball into the lab's containerd,
// namespace k8s.io, as lab.sh does with its own images (ctr images import
// --local), and waits until CRI lists every name the tarball's index.json
// holds. It returns those names.
func (l *Lab) ImportImage(ctx context.Context, tarball string) ([]string, error) {
	names, err := imageNames(tarball)
	if err != nil {
		return nil, err
	}
	ctr := filepath.Join(l.Tools, "bin", "ctr")
	cmd := exec.CommandContext(ctx, ctr, "--address", l.CRISocket, "-n", "k8s.io", "images", "import", "--local", tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ctr images import %s: %w\n%s", tarball, err, out)
	}
	images := runtimeapi.NewImageServiceClient(l.conn)
	for _, name := range names {
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
			if err == nil && r.Image != nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("image %s imported but not listed by CRI (err %v)", name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return names, nil
}

// imageNames reads the io.containerd.image.name annotations of the
// tarball's index.json.
func imageNames(tarball string) ([]string, error) {
	f, err := os.Open(tarball)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no index.json (not an OCI image layout)", tarball)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tarball, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return nil, fmt.Errorf("%s: index.json: %w", tarball, err)
		}
		var names []string
		for _, m := range index.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: index.json names no image", tarball)
		}
		return names, nil
	}
}

// PodOptions are the pod-level privileges of a pod beyond the lab's
// default (best-effort, unprivileged; hostNetwork unless Pod.Network).
type PodOptions struct {
	HostPID    bool // the node's PID namespace (pod spec hostPID)
	Privileged bool // the sandbox may hold privileged containers
}

// Mount is a bind mount of a node path into a container.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
	Propagation             runtimeapi.MountPropagation
}

// ContainerSpec is a container of any imported image, shaped like the
// kubelet's CreateContainer for a pod spec's container.
type ContainerSpec struct {
	Name           string
	Image          string
	Command, Args  []string
	Mounts         []Mount
	Privileged     bool
	ReadOnlyRootfs bool
	RunAsUser      *int64
	Attempt        uint32
}

func namespaces(p Pod, o PodOptions) *runtimeapi.NamespaceOption {
	ns := podNamespaces(p)
	if o.HostPID {
		ns.Pid = runtimeapi.NamespaceMode_NODE
	}
	return ns
}

// sandboxConfigWith is SandboxConfig with the pod options applied.
func (l *Lab) sandboxConfigWith(p Pod, o PodOptions) *runtimeapi.PodSandboxConfig {
	cfg := SandboxConfig(p, l.LogRoot, l.CgroupRoot)
	cfg.Linux.SecurityContext.NamespaceOptions = namespaces(p, o)
	cfg.Linux.SecurityContext.Privileged = o.Privileged
	return cfg
}

// RunPodWith is RunPod with pod-level privileges.
func (l *Lab) RunPodWith(ctx context.Context, p Pod, o PodOptions) (string, error) {
	cfg := l.sandboxConfigWith(p, o)
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", err
	}
	r, err := l.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s/%s: %w", p.Namespace, p.Name, err)
	}
	return r.PodSandboxId, nil
}

// RunContainerSpec creates and starts the container c in a sandbox made by
// RunPodWith with the same options. Its log is ContainerLog(p, c.Name, c.Attempt).
func (l *Lab) RunContainerSpec(ctx context.Context, p Pod, sandboxID string, o PodOptions, c ContainerSpec) (string, error) {
	cfg := ContainerConfig(p, c.Name, c.Attempt, c.Image, c.Args...)
	cfg.Command = c.Command
	for _, m := range c.Mounts {
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath, Readonly: m.ReadOnly, Propagation: m.Propagation,
		})
	}
	sc := cfg.Linux.SecurityContext
	sc.NamespaceOptions = namespaces(p, o)
	sc.Privileged = c.Privileged
	sc.ReadonlyRootfs = c.ReadOnlyRootfs
	if c.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *c.RunAsUser}
	}
	r, err := l.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: sandboxID, Config: cfg, SandboxConfig: l.sandboxConfigWith(p, o),
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s in %s: %w", c.Name, sandboxID, err)
	}
	return r.ContainerId, l.StartContainer(ctx, r.ContainerId)
}

// ContainerLog is the path of a container's CRI log file
// (<pod log dir>/<name>/<attempt>.log).
func (l *Lab) ContainerLog(p Pod, name string, attempt uint32) string {
	return filepath.Join(l.PodLogDir(p), name, fmt.Sprintf("%d.log", attempt))
}

// ShareMount bind-mounts dir onto itself (recursively) and makes it a
// shared mount, as / is on a systemd node: containerd only accepts
// HostToContainer (rslave) or Bidirectional propagation for host paths on a
// shared or slave mount. Mounts made under dir later then reach containers
// that mounted it with HostToContainer. undo unmounts it (lazily); lab.sh
// down also unmounts it when dir is inside the lab's Dir.
func ShareMount(dir string) (undo func() error, err error) {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("bind-mounting %s onto itself: %w", dir, err)
	}
	undo = func() error { return unix.Unmount(dir, unix.MNT_DETACH) }
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		_ = undo()
		return nil, fmt.Errorf("making %s a shared mount: %w", dir, err)
	}
	return undo, nil
}
