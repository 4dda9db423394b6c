package cri

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stopRuntime records the timeout of every StopContainer.
type stopRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	timeouts chan int64
}

func (s stopRuntime) StopContainer(_ context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	s.timeouts <- r.GetTimeout()
	return &runtimeapi.StopContainerResponse{}, nil
}

// TestANonZeroStopTimeoutIsNeverSentAsKillAtOnce: a stop timeout is sent in
// whole seconds, and 0 means kill at once (orphans.stop_timeout = "0s"). A
// sub-second timeout (config check accepts "400ms") was rounded to 0: the
// orphan was SIGKILLed with no SIGTERM grace. It is rounded up.
func TestANonZeroStopTimeoutIsNeverSentAsKillAtOnce(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    int64
	}{
		{0, 0},
		{400 * time.Millisecond, 1},
		{time.Second, 1},
		{1500 * time.Millisecond, 2},
		{30 * time.Second, 30},
	} {
		rt := stopRuntime{timeouts: make(chan int64, 1)}
		c, err := Dial(serveRuntime(t, rt), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.StopContainer(context.Background(), "c1", tc.timeout); err != nil {
			t.Fatal(err)
		}
		if got := <-rt.timeouts; got != tc.want {
			t.Errorf("stop timeout %s was sent as Timeout %d, want %d (0 kills at once)", tc.timeout, got, tc.want)
		}
		_ = c.Close()
	}
}
