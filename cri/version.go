package cri

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// removeStops remembers, per client, whether the runtime's RemovePodSandbox
// stops the sandbox itself.
type removeStops struct {
	mu    sync.Mutex
	known bool
	stops bool
}

// RemoveStopsSandbox reports whether the runtime's RemovePodSandbox stops
// the sandbox first with the very code of StopPodSandbox and removes
// nothing when that fails, so that a separate StopPodSandbox before it is
// one RPC more for the same steps. True for containerd 2.x: v2.4.2's
// internal/cri/server/sandbox_remove.go calls stopPodSandbox, the function
// the StopPodSandbox RPC runs (sandbox_stop.go), and returns before
// deleting anything when it fails. False for any other runtime or version,
// and while the version cannot be read (asked again next time): then the
// sandbox is stopped first, as kubelet's container GC does. The answer is
// kept for the client's life once read.
func (c *Client) RemoveStopsSandbox(ctx context.Context) bool {
	c.removeStops.mu.Lock()
	defer c.removeStops.mu.Unlock()
	if !c.removeStops.known {
		name, version, err := c.Version(ctx)
		if err != nil {
			return false
		}
		c.removeStops.known, c.removeStops.stops = true, containerd2(name, version)
	}
	return c.removeStops.stops
}

// containerd2: containerd, major version 2 or later.
func containerd2(name, version string) bool {
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	n, err := strconv.Atoi(major)
	return name == "containerd" && err == nil && n >= 2
}

// removeStopsKnown: RemoveStopsSandbox was answered, and true (it is not
// asked here: the executor asks it before it removes a sandbox).
func (c *Client) removeStopsKnown() bool {
	c.removeStops.mu.Lock()
	defer c.removeStops.mu.Unlock()
	return c.removeStops.known && c.removeStops.stops
}

// RemoveSandboxTimeout is what a RemovePodSandbox that stops the sandbox
// first is given, rpcTimeout being a call's: a StopPodSandbox's and a
// RemovePodSandbox's.
func RemoveSandboxTimeout(rpcTimeout time.Duration) time.Duration { return 2 * rpcTimeout }
