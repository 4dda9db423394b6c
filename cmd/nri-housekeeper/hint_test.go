package main

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-housekeeper/nri-housekeeper/config"
)

// TestTheHintOfAFailedListingFollowsItsCause: report and once end a failed listing
// with what to do about it, by gRPC's code; a socket that refuses the
// user (report run without root) is told apart from a containerd that is
// not there (it was asked "is containerd running?").
func TestTheHintOfAFailedListingFollowsItsCause(t *testing.T) {
	rt := config.Runtime{Endpoint: "unix:///run/containerd/containerd.sock", RPCTimeout: 3 * time.Second}
	for _, tt := range []struct {
		rule string
		err  error
		want string
	}{
		{"a socket that refuses the user: run as root",
			status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: permission denied"`),
			"; runtime.endpoint (unix:///run/containerd/containerd.sock) refuses this user (UID 1000): run this as root, as the plugin runs"},
		{"no one at the socket: is containerd running",
			status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: no such file or directory"`),
			"; is containerd running, and is runtime.endpoint (unix:///run/containerd/containerd.sock) its socket?"},
		{"no answer: each call's timeout",
			status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
			"; containerd did not answer within runtime.rpc_timeout (3s, each call): is it hung, or is runtime.endpoint (unix:///run/containerd/containerd.sock) another server's socket?"},
		{"anything else: nothing to add", errors.New("CRI ListPodSandbox: a sandbox without metadata"), ""},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			if got := listingFailedHint(tt.err, rt, 1000); got != tt.want {
				t.Fatalf("hint %q, want %q", got, tt.want)
			}
		})
	}
}
