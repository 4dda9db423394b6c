package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestAResultLibcniCannotConvertHasNoAddresses: libcni's conversions of a
// cached result between the 0.3/0.4 and the 1.x versions dereference every
// element of its "ips" and "interfaces" (down to 0.1/0.2, of "routes" too)
// and crash on a null one. Such a result is one libcni cannot decode: it has
// no addresses, and reading it does not panic. A null element no
// conversion dereferences is passed over, as before.
func TestAResultLibcniCannotConvertHasNoAddresses(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{`{"cniVersion":"0.4.0","ips":[null]}`, nil},
		{`{"cniVersion":"0.4.0","ips":[null,{"version":"4","address":"10.22.0.5/16"}]}`, nil},
		{`{"cniVersion":"0.4.0","interfaces":[null],"ips":[{"version":"4","address":"10.22.0.5/16"}]}`, nil},
		{`{"cniVersion":"0.3.1","interfaces":[null],"ips":[]}`, nil},
		{`{"cniVersion":"0.3.0","ips":[{"version":"4","address":"10.22.0.5/16"},null]}`, nil},
		// 0.4 to 1.x copies routes with a method that takes a nil one.
		{`{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.22.0.5/16"}],"routes":[null]}`, []string{"10.22.0.5"}},
		// 1.0.0 to 1.1.0 shares the lists: nothing is dereferenced.
		{`{"cniVersion":"1.0.0","ips":[null,{"address":"10.22.0.5/16"}],"interfaces":[null]}`, []string{"10.22.0.5"}},
		{`{"cniVersion":"1.1.0","ips":[null]}`, nil},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			if got := resultIPs(json.RawMessage(tc.raw)); !slices.Equal(got, tc.want) {
				t.Errorf("resultIPs = %q, want %q", got, tc.want)
			}
		})
	}
}

// withNullResult rewrites id's cache entry on n so that its result is
// result (JSON).
func withNullResult(t *testing.T, n node, network, id, result string) {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal([]byte(result), &r); err != nil {
		t.Fatal(err)
	}
	rewriteEntry(t, n.cacheDir+"/results/"+cacheFileName(network, id, "eth0"), func(m map[string]any) { m["result"] = r })
}

// TestAnEntryWhoseResultLibcniCannotConvertIsListed: one cache entry with
// such a result does not crash a listing (the plugin, on every pass): it
// is listed, with no addresses, as an entry whose result libcni cannot
// decode is.
func TestAnEntryWhoseResultLibcniCannotConvertIsListed(t *testing.T) {
	ctx := context.Background()
	id := containerID(91)
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	n.add(t, cfg, "pods", id, "/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a90")
	withNullResult(t, n, "pods", id, `{"cniVersion":"0.4.0","ips":[null,{"version":"4","address":"10.22.0.5/16"}]}`)
	var lister Lister
	for name, list := range map[string]func() (Listing, error){
		"List":        func() (Listing, error) { return List(ctx, cfg, n.cacheDir, n.netnsDir) },
		"Lister.List": func() (Listing, error) { return lister.List(ctx, cfg, n.cacheDir, n.netnsDir) },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := list()
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Attachments) != 1 || l.Attachments[0].ContainerID != id || len(l.Attachments[0].IPs) != 0 || len(l.Unreadable) != 0 {
				t.Fatalf("listing = %+v, want the attachment of %s with no addresses", l, id[56:])
			}
		})
	}
}

// TestADELOfAResultLibcniCannotConvertIsRefused: libcni's DEL converts the
// cached result to the network's version (and GetNetworkListCachedResult,
// which DeleteAttachment asks first, does too): a null element that
// conversion dereferences crashed the plugin. Such an entry is refused
// before any plugin runs, as one whose result libcni cannot read; so is one
// whose addresses cannot be read (as the newest version), with no
// conversion to the network's version, since the DEL would pass on
// addresses no check looked at. A network before 0.4.0 passes no
// prevResult: its DEL runs.
func TestADELOfAResultLibcniCannotConvertIsRefused(t *testing.T) {
	for i, tc := range []struct {
		rule           string
		networkVersion string
		result         string
		want           string // in the refusal; "": the DEL runs
	}{
		{"a 0.4.0 result with a null address on a 1.0.0 network is refused", "1.0.0",
			`{"cniVersion":"0.4.0","ips":[null,{"version":"4","address":"10.22.0.5/16"}]}`, `"ips" has a null element`},
		{"a 1.0.0 result with a null interface on a 0.4.0 network is refused", "0.4.0",
			`{"cniVersion":"1.0.0","interfaces":[null],"ips":[{"address":"10.22.0.5/16"}]}`, `"interfaces" has a null element`},
		{"a 0.4.0 result with a null address on a 0.4.0 network is refused: its addresses cannot be read", "0.4.0",
			`{"cniVersion":"0.4.0","ips":[null,{"version":"4","address":"10.22.0.5/16"}]}`, `"ips" has a null element`},
		{"a 0.3.1 network passes no prevResult: the DEL runs", "0.3.1",
			`{"cniVersion":"0.3.1","interfaces":[null],"ips":[{"version":"4","address":"10.22.0.5/16"}]}`, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			ctx := context.Background()
			id := containerID(92 + i)
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", map[string]any{"cniVersion": tc.networkVersion})})
			n.add(t, cfg, "pods", id, fmt.Sprintf("/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a9%d", i))
			withNullResult(t, n, "pods", id, tc.result)
			att := onlyAttachment(t, cfg, n, id)
			before := len(n.pluginCalls(t))
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, att)
			calls := n.pluginCalls(t)[before:]
			if tc.want == "" {
				if err != nil || len(calls) == 0 {
					t.Fatalf("DeleteAttachment = %v, plugin calls %q; want the DEL run", err, calls)
				}
				return
			}
			var refused *RefusedError
			if len(calls) > 0 || !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DeleteAttachment = %v, plugin calls %q; want a refusal saying %q and no plugin run", err, calls, tc.want)
			}
			if changedSinceDecided(err) {
				t.Fatalf("DeleteAttachment = %v: a refusal that lasts is no change since the listing", err)
			}
			if !exists(t, att.CacheFile) {
				t.Fatal("the cache entry is gone")
			}
		})
	}
}

// TestAPanicInLibcniIsAnError: the last defence around libcni's
// conversions, for a dereference the explicit check does not know of: a
// panic is an error naming what panicked, and the plugin lives on.
func TestAPanicInLibcniIsAnError(t *testing.T) {
	_, err := withoutPanic("reading the cached result", func() (*int, error) {
		var p *int
		return p, fmt.Errorf("never: %d", *p)
	})
	if err == nil || !strings.Contains(err.Error(), "libcni panicked reading the cached result") {
		t.Fatalf("err = %v, want the panic as an error", err)
	}
}
