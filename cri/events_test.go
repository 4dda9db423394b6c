package cri

import (
	"testing"

	"github.com/containerd/containerd/api/types"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// taskExit encodes a TaskExit as containerd's task.proto lays it out:
// container_id 1, id 2, pid 3, exit_status 4, exited_at 5.
func taskExit(containerID, id string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, containerID)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, id)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 4242)
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, 137)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	return protowire.AppendBytes(b, []byte{0x08, 0x01})
}

func TestOnlyAnExecsExitIsLeftOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value []byte
		exec  bool
	}{
		{"a container's own process", taskExit("c1", "c1"), false},
		{"a sandbox's pause process", taskExit("sb", "sb"), false},
		{"an exec'd process", taskExit("c1", "probe-7f3a"), true},
		{"no process ID", taskExit("c1", ""), false},
		{"an empty event", nil, false},
		{"an event that cannot be read: a wake", taskExit("c1", "probe")[:5], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			envelope := &types.Envelope{Topic: TaskExitTopic, Event: &anypb.Any{TypeUrl: "containerd.events.TaskExit", Value: tc.value}}
			if got := isExecExit(envelope); got != tc.exec {
				t.Fatalf("isExecExit = %v, want %v", got, tc.exec)
			}
		})
	}
	if isExecExit(&types.Envelope{}) {
		t.Fatal("an envelope with no event is an exec's exit")
	}
}

func FuzzTaskExitIDs(f *testing.F) {
	f.Add(taskExit("c1", "exec"))
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = taskExitIDs(b) // must not panic on any input
	})
}
