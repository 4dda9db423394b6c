package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CNICacheDir is libcni's cache directory. containerd uses libcni's default,
// which cannot be moved: the result of every CNI ADD is kept in
// <CNICacheDir>/results/<network>-<sandbox id>-<ifname> until the DEL.
const CNICacheDir = "/var/lib/cni"

// CNIPaths describes the lab's CNI network (pods with Pod.Network): where its
// configuration, plugins and state are and what it is called. Only the cache
// dir is outside the lab's Dir.
type CNIPaths struct {
	Network string // CNI network name (the conflist's "name")
	Bridge  string // bridge device on the node (the bridge plugin's)
	Subnet  string // pod subnet, CIDR
	Gateway string // the bridge's address, the subnet's first

	// host-local's range, inclusive, as of Start or the last SetCNIRange;
	// empty: the subnet's bound.
	RangeStart, RangeEnd string

	ConfDir    string // containerd's CNI conf dir (watched: every change reloads)
	ConfFile   string // the conflist in ConfDir
	BinDir     string // the CNI plugins: bridge, host-local, loopback, portmap
	CacheDir   string // CNICacheDir
	ResultsDir string // <CacheDir>/results
	DataDir    string // host-local's dataDir
	IPAMDir    string // <DataDir>/<Network>: one file per reserved IP ("<id>\r\n<ifname>")
	NetnsDir   string // pod netns mounts: <containerd state>/io.containerd.grpc.v1.cri/netns
}

// ResultFile is libcni's cache entry of a sandbox's attachment to the lab's
// network; ifName is "eth0" for CRI pods.
func (c CNIPaths) ResultFile(sandboxID, ifName string) string {
	return filepath.Join(c.ResultsDir, c.Network+"-"+sandboxID+"-"+ifName)
}

// LoopbackResultFile is the cache entry of containerd's loopback attachment
// of a sandbox (network "cni-loopback", ifname "lo").
func (c CNIPaths) LoopbackResultFile(sandboxID string) string {
	return filepath.Join(c.ResultsDir, "cni-loopback-"+sandboxID+"-lo")
}

// Reservation is host-local's reservation file of ip.
func (c CNIPaths) Reservation(ip string) string { return filepath.Join(c.IPAMDir, ip) }

// Addr is the n-th address of the subnet: Addr(1) is the gateway, Addr(2)
// the first pod address. For SetCNIRange and Options.CNIRangeStart/End.
func (c CNIPaths) Addr(n int) string {
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !p.Addr().Is4() {
		return ""
	}
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
	a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	if !p.Contains(a) {
		return ""
	}
	return a.String()
}

// CNI describes the lab's CNI network.
func (l *Lab) CNI() CNIPaths { return l.cni }

// SetCNIRange rewrites the lab's conflist with host-local's range start..end
// (inclusive, addresses of the subnet; "" for the subnet's bound) and returns
// once containerd has loaded it (CRI Status shows it). Addresses reserved
// outside the new range stay reserved until released.
func (l *Lab) SetCNIRange(ctx context.Context, start, end string) error {
	if _, err := run(ctx, append(l.env(), "LAB_CNI_RANGE_START="+start, "LAB_CNI_RANGE_END="+end), "cni-conf"); err != nil {
		return err
	}
	l.cni.RangeStart, l.cni.RangeEnd = start, end
	return l.WaitCNIConfig(ctx)
}

// WaitCNIConfig waits (at most 30s) until containerd's loaded CNI config
// (CRI Status, verbose: "cniconfig") is the conflist in the conf dir byte for
// byte. containerd reloads on every write, rename or removal in the conf dir
// (fsnotify), so this takes milliseconds.
func (l *Lab) WaitCNIConfig(ctx context.Context) error {
	want, err := os.ReadFile(l.cni.ConfFile)
	if err != nil {
		return fmt.Errorf("lab CNI config: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := l.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true}, grpc.WaitForReady(true))
		if err != nil {
			return fmt.Errorf("CRI Status: %w", err)
		}
		var cfg struct {
			Networks []struct {
				Config struct{ Source string }
			}
		}
		if err := json.Unmarshal([]byte(r.Info["cniconfig"]), &cfg); err == nil {
			for _, n := range cfg.Networks {
				if n.Config.Source == string(want) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not load %s within 30s (lastCNILoadStatus: %s); see %s",
				l.cni.ConfFile, r.Info["lastCNILoadStatus"], l.ContainerdLog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// SandboxNet is a pod sandbox's network as containerd reports it.
type SandboxNet struct {
	IP            string   // PodSandboxStatus .network.ip; "" for hostNetwork
	AdditionalIPs []string // further IPs (none on the lab's network)
	// NetnsPath is the sandbox's netns mount (in CNIPaths.NetnsDir) from the
	// sandbox metadata; "" for hostNetwork. containerd removes the mount at
	// StopPodSandbox (NetnsClosed then) but keeps the path in the metadata.
	NetnsPath   string
	NetnsClosed bool
}

// SandboxNetwork returns the network of a pod sandbox of the lab.
func (l *Lab) SandboxNetwork(ctx context.Context, sandboxID string) (SandboxNet, error) {
	return SandboxNetwork(ctx, l.rt, sandboxID)
}

// SandboxNetwork returns a pod sandbox's IP (PodSandboxStatus) and netns path
// (containerd's verbose info: sandboxMetadata.Metadata.NetNSPath).
func SandboxNetwork(ctx context.Context, rt runtimeapi.RuntimeServiceClient, sandboxID string) (SandboxNet, error) {
	r, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID, Verbose: true})
	if err != nil {
		return SandboxNet{}, fmt.Errorf("PodSandboxStatus %s: %w", sandboxID, err)
	}
	var n SandboxNet
	if nw := r.GetStatus().GetNetwork(); nw != nil {
		n.IP = nw.Ip
		for _, ip := range nw.AdditionalIps {
			n.AdditionalIPs = append(n.AdditionalIPs, ip.Ip)
		}
	}
	var info struct {
		NetNSClosed bool `json:"netNamespaceClosed"`
		Metadata    struct {
			Metadata struct{ NetNSPath string }
		} `json:"sandboxMetadata"`
	}
	if err := json.Unmarshal([]byte(r.Info["info"]), &info); err != nil {
		return n, fmt.Errorf("sandbox %s: verbose info: %w", sandboxID, err)
	}
	n.NetnsPath, n.NetnsClosed = info.Metadata.Metadata.NetNSPath, info.NetNSClosed
	return n, nil
}

// WipeRuntimeState simulates a node reboot (lab.sh reboot): kill -9 of
// containerd, shims, pause and container processes and launched NRI plugins;
// containerd's root and state are unmounted and deleted (no sandbox or
// container records; images are imported again). What the kernel holds for
// the lab's network goes too, as in a reboot: pod netns mounts, pod veths,
// the bridge and portmap's chains — unless keepNetns, then all of these stay,
// unknown to the new containerd. Kept either way, as on a node whose disk
// survives: the CNI cache (CNIPaths.ResultsDir), host-local's reservations
// (CNIPaths.IPAMDir), the conflist (with its range), logs and the NRI dirs.
// containerd then starts on the empty state; WipeRuntimeState returns once
// CRI is ready and Runtime() is connected again.
func (l *Lab) WipeRuntimeState(ctx context.Context, keepNetns bool) error {
	args := []string{"reboot"}
	if keepNetns {
		args = append(args, "-keep-netns")
	}
	if _, err := run(ctx, l.env(), args...); err != nil {
		return err
	}
	l.conn.ResetConnectBackoff()
	if _, err := l.rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("CRI client did not reconnect after the reboot: %w", err)
	}
	return nil
}

// loadCNI reads the network's identity and paths from `lab.sh env` (lab.sh
// derives the defaults and records them in the lab's dir).
func (l *Lab) loadCNI(ctx context.Context) error {
	out, err := run(ctx, l.env(), "env")
	if err != nil {
		return err
	}
	v := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, val, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			v[k] = val
		}
	}
	l.cni = CNIPaths{
		Network:    v["LAB_CNI_NAME"],
		Bridge:     v["LAB_CNI_BRIDGE"],
		Subnet:     v["LAB_CNI_SUBNET"],
		Gateway:    v["LAB_CNI_GATEWAY"],
		RangeStart: v["LAB_CNI_RANGE_START"],
		RangeEnd:   v["LAB_CNI_RANGE_END"],
		ConfDir:    v["LAB_CNI_CONF_DIR"],
		ConfFile:   v["LAB_CNI_CONF"],
		BinDir:     v["LAB_CNI_BIN"],
		CacheDir:   v["LAB_CNI_CACHE_DIR"],
		DataDir:    v["LAB_CNI_DATA_DIR"],
		NetnsDir:   v["LAB_NETNS_DIR"],
	}
	if l.cni.Network == "" || l.cni.ConfFile == "" || l.cni.NetnsDir == "" || l.cni.CacheDir == "" {
		return errors.New("lab.sh env: no LAB_CNI_* settings (lab.sh older than the lab package?)")
	}
	l.cni.ResultsDir = filepath.Join(l.cni.CacheDir, "results")
	l.cni.IPAMDir = filepath.Join(l.cni.DataDir, l.cni.Network)
	return nil
}
