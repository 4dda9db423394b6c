package cri

import (
	"context"
	"fmt"

	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"github.com/containerd/containerd/api/types"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// TaskExitTopic is containerd's event topic for an exited task (a container
// process or a sandbox's pause process).
const TaskExitTopic = "/tasks/exit"

// WatchTaskExits subscribes to containerd's task-exit events in namespace and
// calls onExit for each exit of a task's own process, until ctx ends or the
// stream breaks (the error says which). A sandbox's pause process dying
// produces no NRI event; this is how housekeeping hears of it at once. The
// exit of an exec'd process (kubelet's exec probes, kubectl exec) changes
// no pod's state and is left out, as containerd's CRI leaves it out: on a
// node with exec probes it would keep a pass due every wake interval.
func (c *Client) WatchTaskExits(ctx context.Context, namespace string, onExit func()) error {
	// containerd reads the namespace from this gRPC metadata key.
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", namespace)
	stream, err := eventsapi.NewEventsClient(c.conn).Subscribe(ctx, &eventsapi.SubscribeRequest{
		Filters: []string{fmt.Sprintf(`topic==%q,namespace==%q`, TaskExitTopic, namespace)},
	})
	if err != nil {
		return fmt.Errorf("subscribe to containerd events on %s: %w", c.endpoint, err)
	}
	for {
		envelope, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("containerd event stream on %s: %w", c.endpoint, err)
		}
		if isExecExit(envelope) {
			continue
		}
		onExit()
	}
}

// isExecExit: the event is the exit of an exec'd process (its ID is not its
// container's). An event that cannot be read is not: a wake too many costs
// a pass, one too few a reclaim a period late.
func isExecExit(envelope *types.Envelope) bool {
	containerID, id, err := taskExitIDs(envelope.GetEvent().GetValue())
	return err == nil && id != "" && containerID != "" && id != containerID
}

// taskExitIDs reads the container_id (1) and id (2) fields of containerd's
// TaskExit message (api/events/task.proto). Its generated Go type would
// bring typeurl and gogo/protobuf into the binary for two strings.
func taskExitIDs(b []byte) (containerID, id string, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", fmt.Errorf("task exit event: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", fmt.Errorf("task exit event, field %d: %w", num, protowire.ParseError(n))
			}
			if num == 1 {
				containerID = string(v)
			} else {
				id = string(v)
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return "", "", fmt.Errorf("task exit event, field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return containerID, id, nil
}
