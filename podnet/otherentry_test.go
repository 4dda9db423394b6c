package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNoDELActsOnAnAddressAnotherAttachmentHas: on a network whose IPAM is
// not host-local (no reservation file to ask), a leaked attachment of A
// whose address its IPAM freed and gave to a pod B since: B's newer cache
// entry has the address in its result. A's DEL would pass A's result on as
// prevResult, and a plugin that acts by its addresses (the reference
// firewall plugin removes the CNI-FORWARD rules of every IP in it) would
// act on B's: it is refused, and no plugin runs. A loopback address, which
// every sandbox's loopback attachment has, or another address, is no
// conflict: the DEL runs; nor is an older entry's (of two stale entries of
// one address the newer goes first; the plan keeps A for a live B's).
func TestNoDELActsOnAnAddressAnotherAttachmentHas(t *testing.T) {
	setIPs := func(t *testing.T, path string, ips ...string) {
		rewriteEntry(t, path, func(m map[string]any) {
			var list []any
			for _, ip := range ips {
				list = append(list, map[string]any{"address": ip, "interface": 0})
			}
			m["result"].(map[string]any)["ips"] = list
		})
	}
	for i, tc := range []struct {
		rule    string
		a, b    []string // the addresses of A's and B's results
		bOlder  bool     // B's entry older than A's
		refused bool
	}{
		{"B has A's address now: refused", []string{"10.30.0.7/16"}, []string{"10.30.0.7/16"}, false, true},
		{"B has A's second address now: refused", []string{"10.30.0.7/16", "fd00::7/64"}, []string{"fd00::7/64"}, false, true},
		{"B has another address: the DEL runs", []string{"10.30.0.7/16"}, []string{"10.30.0.8/16"}, false, false},
		{"both have a loopback address: the DEL runs", []string{"127.0.0.1/8", "::1/128"}, []string{"127.0.0.1/8", "::1/128"}, false, false},
		{"B's older entry has A's address: the DEL runs", []string{"10.30.0.7/16"}, []string{"10.30.0.7/16"}, true, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			ctx := context.Background()
			a, b := containerID(71+2*i), containerID(72+2*i)
			n := newNode(t)
			list := n.netConfList("pods", map[string]any{"plugins": []any{
				map[string]any{"type": fakeVeth, "log": n.log, "ipam": map[string]any{"type": "calico-ipam"}},
			}})
			cfg := n.config(t, map[string]string{"10-pods.conflist": list})
			if net, _ := cfg.Network("pods"); net.HostLocalDir != "" {
				t.Fatalf("the network uses host-local (%s): the test proves nothing", net.HostLocalDir)
			}
			n.add(t, cfg, "pods", a, fmt.Sprintf("/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a5%d", i))
			n.add(t, cfg, "pods", b, fmt.Sprintf("/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a6%d", i))
			att := onlyAttachment(t, cfg, n, a)
			setIPs(t, att.CacheFile, tc.a...)
			setIPs(t, onlyAttachment(t, cfg, n, b).CacheFile, tc.b...)
			if tc.bOlder {
				old := time.Now().Add(-time.Hour)
				if err := os.Chtimes(onlyAttachment(t, cfg, n, b).CacheFile, old, old); err != nil {
					t.Fatal(err)
				}
			}
			att = onlyAttachment(t, cfg, n, a)
			before := len(n.pluginCalls(t))
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att)
			calls := n.pluginCalls(t)[before:]
			var refused *RefusedError
			switch {
			case tc.refused && (len(calls) > 0 || !errors.As(err, &refused) || !strings.Contains(err.Error(), b)):
				t.Fatalf("DeleteAttachment = %v, plugin calls %q; want a refusal naming %s and no plugin run", err, calls, b[56:])
			case !tc.refused && (err != nil || len(calls) == 0):
				t.Fatalf("DeleteAttachment = %v, plugin calls %q; want the DEL run", err, calls)
			}
		})
	}
}

// TestADELOfAResultLibcniCannotReadIsRefused: libcni's DEL of an entry whose
// result it cannot read as the network's version removes the entry first
// and runs the plugins without it (DelNetworkList): a DEL that then fails is
// never retried, and the entry no longer holds its namespace. It is refused
// before any of that.
func TestADELOfAResultLibcniCannotReadIsRefused(t *testing.T) {
	ctx := context.Background()
	a := containerID(81)
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	n.add(t, cfg, "pods", a, "/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a70")
	att := onlyAttachment(t, cfg, n, a)
	rewriteEntry(t, att.CacheFile, func(m map[string]any) { m["result"].(map[string]any)["cniVersion"] = "9.9.9" })
	att = onlyAttachment(t, cfg, n, a)
	before := len(n.pluginCalls(t))
	err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att)
	var refused *RefusedError
	if calls := n.pluginCalls(t)[before:]; len(calls) > 0 || !errors.As(err, &refused) || !strings.Contains(err.Error(), "libcni cannot read its cached result") {
		t.Fatalf("DeleteAttachment = %v, plugin calls %q; want a refusal and no plugin run", err, calls)
	}
	if changedSinceDecided(err) {
		t.Fatalf("DeleteAttachment = %v: a refusal that lasts until the entry or the network changes is no change since the listing", err)
	}
	if !exists(t, att.CacheFile) {
		t.Fatal("the cache entry is gone")
	}
}
