package executor

import (
	"context"
	"errors"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// Node is the real node side of Files: each kind of log file only under its
// own root, kubelet pod dirs under KubeletRoot, pod cgroups through package
// podcgroups, the network's objects through package podnet.
type Node struct {
	PodLogs     *nodefs.Remover // rooted at logs.pod_logs_dir
	Links       *nodefs.Remover // rooted at logs.container_logs_dir
	KubeletRoot string
	// Network reclaims the network's objects with containerd's current
	// CNI configuration; nil when network.enabled is false (the planner
	// then proposes no network step).
	Network NetworkReclaimer
}

// NetworkReclaimer reclaims the network's objects (a *podnet.Reclaimer, or
// what holds the one made from containerd's latest CNI configuration).
type NetworkReclaimer interface {
	DeleteAttachment(ctx context.Context, a podnet.Attachment) error
	ReleaseReservation(ctx context.Context, r podnet.Reservation) error
	RemoveNetns(ctx context.Context, n podnet.Netns) error
}

// errNoNetwork: a network step without a configured reclaimer.
var errNoNetwork = errors.New("network reclaim is not configured (network.enabled = false, or containerd reported no CNI config)")

var _ Files = Node{}

func (n Node) RemovePodLogDir(ctx context.Context, path string) error {
	return n.PodLogs.RemovePodLogDir(ctx, path)
}

func (n Node) RemoveContainerLogLink(ctx context.Context, path string) error {
	return n.Links.RemoveContainerLogLink(ctx, path)
}

func (n Node) RemoveContainerLogFiles(ctx context.Context, l nodefs.ContainerLog, keep []string) ([]string, error) {
	return n.PodLogs.RemoveContainerLogFiles(ctx, l, keep)
}

func (n Node) RemoveOrphanedPodDir(ctx context.Context, seen nodefs.PodDir) error {
	return nodefs.RemoveOrphanedPodDir(ctx, n.KubeletRoot, seen)
}

func (n Node) DestroyPodCgroup(ctx context.Context, pod podcgroups.PodCgroup) (podcgroups.Destroyed, error) {
	return podcgroups.Destroy(ctx, pod)
}

func (n Node) ReducePodCgroupCPU(ctx context.Context, pod podcgroups.PodCgroup) error {
	return podcgroups.ReduceCPU(ctx, pod)
}

func (n Node) DeleteCNIAttachment(ctx context.Context, a podnet.Attachment) error {
	if n.Network == nil {
		return errNoNetwork
	}
	return n.Network.DeleteAttachment(ctx, a)
}

func (n Node) ReleaseIPReservation(ctx context.Context, r podnet.Reservation) error {
	if n.Network == nil {
		return errNoNetwork
	}
	return n.Network.ReleaseReservation(ctx, r)
}

func (n Node) RemoveNetns(ctx context.Context, ns podnet.Netns) error {
	if n.Network == nil {
		return errNoNetwork
	}
	return n.Network.RemoveNetns(ctx, ns)
}
