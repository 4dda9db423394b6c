package cri

import (
	"context"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"
)

// PeerPID returns the process ID of the runtime serving the endpoint, as
// this process's PID namespace names it: the peer credentials of a
// connection of its own to the socket, closed at once (gRPC's server drops
// a connection that ends before its preface without a word). It is 0 when
// the runtime runs in a PID namespace this process cannot see into (a
// DaemonSet pod without hostPID).
func (c *Client) PeerPID(ctx context.Context) (int, error) {
	socket := strings.TrimPrefix(c.endpoint, "unix://")
	ctx, cancel := context.WithTimeout(ctx, c.rpcTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, fmt.Errorf("connecting to %s for its server's process: %w", socket, err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", socket, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("%s: %w", socket, err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("%s: the peer credentials of its server: %w", socket, credErr)
	}
	return int(cred.Pid), nil
}
