package podnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoDELActsOnAnAddressAnotherContainerHoldsNow: a leaked attachment of
// A whose IP (10.22.0.5, in its cached result) host-local has since
// reserved for another container B (a teardown that got past IPAM and then
// died frees the IP while libcni keeps the cache entry). The DEL would pass
// A's cached result on as prevResult, and plugins that act by its IPs (the
// reference firewall plugin removes the CNI-FORWARD rules of every IP in
// it) would act on B's address: it is refused, and no plugin runs. The
// same with A's result cached by a network that was at CNI 0.2.0 when A was
// added ("ip4": {"ip": ...}, no "ips") and is at 1.0.0 now (the conf dir
// upgraded while the pod ran): libcni's DEL converts the cached result to
// the network's version and passes 10.22.0.5 on all the same.
func TestNoDELActsOnAnAddressAnotherContainerHoldsNow(t *testing.T) {
	ownedBy := func(id string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { writeFile(t, path, id+"\r\neth0") }
	}
	for i, tc := range []struct {
		name     string
		cachedAt map[string]any                  // the network's conflist when A was added
		held     func(t *testing.T, path string) // what host-local has at the address now (nil: B's reservation)
		want     string                          // in the refusal ("": B's ID)
	}{
		{"the result cached at the network's version", nil, nil, ""},
		{"a 0.2.0 result, the network at 1.0.0 now", map[string]any{"cniVersion": "0.2.0"}, nil, ""},
		// Who holds it cannot be told: as good as another's.
		{"a reservation that cannot be read", nil, func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/hostname", path); err != nil {
				t.Fatal(err)
			}
		}, "cannot tell who holds 10.22.0.5"},
		{"a reservation that names no owner", nil, func(t *testing.T, path string) { writeFile(t, path, "not an ID\r\neth0") }, "cannot tell who holds 10.22.0.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a, b := containerID(51+2*i), containerID(52+2*i)
			n := newNode(t)
			added := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", tc.cachedAt)})
			n.add(t, added, "pods", a, fmt.Sprintf("/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3%d", i))
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			att := onlyAttachment(t, cfg, n, a)
			net, _ := cfg.Network("pods")
			// The fake plugin's ADD result is 10.22.0.5; host-local now has it for B.
			reservation := filepath.Join(net.HostLocalDir, "10.22.0.5")
			held, want := tc.held, tc.want
			if held == nil {
				held, want = ownedBy(b), b
			}
			held(t, reservation)
			before := len(n.pluginCalls(t))
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att)
			calls := n.pluginCalls(t)[before:]
			t.Logf("DeleteAttachment: %v; plugin calls:\n%s", err, strings.Join(calls, "\n"))
			if len(calls) > 0 {
				t.Fatalf("CNI DEL of %s ran with prevResult IP 10.22.0.5, which host-local holds for %s (or cannot say for whom) now", a[56:], b[56:])
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), "10.22.0.5") || !strings.Contains(err.Error(), want) {
				t.Fatalf("DeleteAttachment = %v; want a refusal naming 10.22.0.5 and %q", err, want)
			}
			// Its own again: the DEL runs.
			if err := os.Remove(reservation); err != nil {
				t.Fatal(err)
			}
			ownedBy(a)(t, reservation)
			if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att); err != nil {
				t.Fatalf("DeleteAttachment with the address still its own: %v", err)
			}
		})
	}
}

// TestNoDELActsOnAnyAddressOfTheResultItPassesOn: every address of the
// cached result the DEL passes on as prevResult must still be the
// attachment's own: the second of a dual-stack result too, and the
// addresses the entry holds right before the DEL, not when it was listed
// (an ADD again of the same container, interface and namespace rewrites
// the entry).
func TestNoDELActsOnAnyAddressOfTheResultItPassesOn(t *testing.T) {
	setIPs := func(t *testing.T, path string, ips ...string) {
		rewriteEntry(t, path, func(m map[string]any) {
			var list []any
			for _, ip := range ips {
				list = append(list, map[string]any{"address": ip + "/16", "interface": 0})
			}
			m["result"].(map[string]any)["ips"] = list
		})
	}
	for i, tc := range []struct {
		name string
		// before and after the listing
		listed, now func(t *testing.T, path string)
	}{
		{"the second address of a result with two", func(t *testing.T, path string) { setIPs(t, path, "10.22.0.5", "10.22.0.6") }, nil},
		{"an address the entry holds now, not when it was listed", nil, func(t *testing.T, path string) { setIPs(t, path, "10.22.0.6") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			a, b := containerID(61+2*i), containerID(62+2*i)
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			n.add(t, cfg, "pods", a, fmt.Sprintf("/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a4%d", i))
			entry := filepath.Join(n.cacheDir, "results", "pods-"+a+"-eth0")
			if tc.listed != nil {
				tc.listed(t, entry)
			}
			att := onlyAttachment(t, cfg, n, a)
			if tc.now != nil {
				tc.now(t, entry)
			}
			net, _ := cfg.Network("pods")
			writeFile(t, filepath.Join(net.HostLocalDir, "10.22.0.5"), a+"\r\neth0")
			writeFile(t, filepath.Join(net.HostLocalDir, "10.22.0.6"), b+"\r\neth0")
			before := len(n.pluginCalls(t))
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att)
			if calls := n.pluginCalls(t)[before:]; len(calls) > 0 {
				t.Fatalf("CNI DEL of %s ran with prevResult IP 10.22.0.6, which host-local holds for %s now (err %v):\n%s", a[56:], b[56:], err, strings.Join(calls, "\n"))
			}
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), "10.22.0.6") || !strings.Contains(err.Error(), b) {
				t.Fatalf("DeleteAttachment = %v; want a refusal naming 10.22.0.6 and %s", err, b)
			}
		})
	}
}
