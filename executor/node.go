package executor

import (
	"context"

	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

// Node is the real node side of Files: each kind of log file only under its
// own root, kubelet pod dirs under KubeletRoot, pod cgroups through package
// podcgroups.
type Node struct {
	PodLogs     *nodefs.Remover // rooted at logs.pod_logs_dir
	Links       *nodefs.Remover // rooted at logs.container_logs_dir
	KubeletRoot string
}

var _ Files = Node{}

func (n Node) RemovePodLogDir(ctx context.Context, path string) error {
	return n.PodLogs.RemovePodLogDir(ctx, path)
}

func (n Node) RemoveContainerLogLink(ctx context.Context, path string) error {
	return n.Links.RemoveContainerLogLink(ctx, path)
}

func (n Node) RemoveOrphanedPodDir(ctx context.Context, uid string) error {
	return nodefs.RemoveOrphanedPodDir(ctx, n.KubeletRoot, uid)
}

func (n Node) DestroyPodCgroup(ctx context.Context, pod podcgroups.PodCgroup) error {
	return podcgroups.Destroy(ctx, pod)
}

func (n Node) ReducePodCgroupCPU(ctx context.Context, pod podcgroups.PodCgroup) error {
	return podcgroups.ReduceCPU(ctx, pod)
}
