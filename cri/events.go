package cri

import (
	"context"
	"fmt"

	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc/metadata"
)

// TaskExitTopic is containerd's event topic for an exited task (a container
// process or a sandbox's pause process).
const TaskExitTopic = "/tasks/exit"

// WatchTaskExits subscribes to containerd's task-exit events in namespace and
// calls onExit for each, until ctx ends or the stream breaks (the error says
// which). A sandbox's pause process dying produces no NRI event; this is how
// housekeeping hears of it at once.
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
		if _, err := stream.Recv(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("containerd event stream on %s: %w", c.endpoint, err)
		}
		onExit()
	}
}
