package housekeeping

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
)

// NetworkOptions configure the network side of a pass ([network]).
type NetworkOptions struct {
	// CacheDir is libcni's cache dir (network.cache_dir).
	CacheDir string
	// ConfDir and BinDir are used only when containerd reports no CNI
	// configuration (network.conf_dir, network.bin_dir).
	ConfDir, BinDir string
	// NetnsDir overrides the netns dir containerd's config implies
	// (network.netns_dir); "" reads it from containerd.
	NetnsDir string
	// ExecRoot is the root CNI plugins run chrooted into
	// (network.exec_root); "" is the plugin's own.
	ExecRoot string
}

// NetworkRuntime is what the network side needs from containerd (package
// cri's *Client).
type NetworkRuntime interface {
	NetworkStatus(ctx context.Context) (cri.NetworkStatus, error)
	Records(ctx context.Context) (cri.Records, error)
	RecordExists(ctx context.Context, id string) (bool, error)
	// PeerPID is containerd's process, as this process's PID namespace
	// names it (0: another PID namespace): see podnet.NetnsMountsUnseen.
	PeerPID(ctx context.Context) (int, error)
}

// StatusEvery is how long passes with nothing suspect on the network use
// the CNI configuration containerd reported (CRI Status) before asking
// again. A pass with a suspect asks again before it plans (see
// Network.confirm), so a step is never planned on an older configuration;
// a network added meanwhile is found at most this much later, and its
// leaks wait leak_grace anyway.
const StatusEvery = 5 * time.Minute

// Network is the network side of the loop. Each pass it reads the
// network's objects before the CRI listing, with containerd's CNI
// configuration (read again every StatusEvery, and whenever something is
// suspect), and containerd's records after it; it keeps the CNI DEL runner
// made from the latest configuration (containerd reloads its CNI conf dir
// at run time).
type Network struct {
	opts NetworkOptions
	rt   NetworkRuntime
	// lister reads the network's objects each pass, reading again only
	// the files that changed since the last pass (safe for concurrent
	// use).
	lister podnet.Lister
	// inspect reads what the suspect namespaces are: podnet.InspectNetns
	// (a test, which cannot mount a namespace, gives its own answer).
	inspect func(ctx context.Context, netnsDir string, paths []string) ([]podnet.Netns, []podnet.Unreadable, error)

	// Owned by the pass: containerd's answer to CRI Status as last read,
	// when, and what was made of it. statusAt is zero when it is not to
	// be used again (none yet, a failure, or containerd reported no CNI
	// configuration and the conf dir was read instead).
	status   cri.NetworkStatus
	statusAt time.Time
	cfg      podnet.Config
	netnsDir string

	mu        sync.Mutex
	reclaimer *podnet.Reclaimer
}

// NewNetwork returns the network side of a loop.
func NewNetwork(rt NetworkRuntime, opts NetworkOptions) *Network {
	return &Network{opts: opts, rt: rt, inspect: podnet.InspectNetns}
}

// DeleteAttachment, ReleaseReservation and RemoveNetns reclaim with the
// CNI configuration of the last pass (executor.NetworkReclaimer).
func (n *Network) DeleteAttachment(ctx context.Context, a podnet.Attachment) error {
	r, err := n.current()
	if err != nil {
		return err
	}
	return r.DeleteAttachment(ctx, a)
}

func (n *Network) ReleaseReservation(ctx context.Context, res podnet.Reservation) error {
	r, err := n.current()
	if err != nil {
		return err
	}
	return r.ReleaseReservation(ctx, res)
}

func (n *Network) RemoveNetns(ctx context.Context, ns podnet.Netns) error {
	r, err := n.current()
	if err != nil {
		return err
	}
	return r.RemoveNetns(ctx, ns)
}

func (n *Network) current() (*podnet.Reclaimer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reclaimer == nil {
		return nil, errors.New("no CNI configuration was read from containerd yet")
	}
	return n.reclaimer, nil
}

// networkListing is what list read at listedAt. statusRead: containerd's
// CNI configuration was read for it, not taken from an earlier pass.
type networkListing struct {
	podnet.Listing
	netnsDir   string
	listedAt   time.Time
	statusRead bool
}

// list reads the network's objects, with containerd's CNI configuration
// as last read unless StatusEvery has passed. It runs before the CRI
// listing (see gc.NetworkInput).
func (n *Network) list(ctx context.Context, now time.Time) (networkListing, error) {
	read := n.statusAt.IsZero() || now.Sub(n.statusAt) >= StatusEvery || now.Before(n.statusAt)
	if read {
		st, err := n.rt.NetworkStatus(ctx)
		if err == nil {
			err = n.use(st, now)
		}
		if err != nil {
			n.statusAt = time.Time{}
			return networkListing{}, err
		}
	}
	listing, err := n.lister.List(ctx, n.cfg, n.opts.CacheDir, n.netnsDir)
	if err != nil {
		return networkListing{}, err
	}
	return networkListing{Listing: listing, netnsDir: n.netnsDir, listedAt: now, statusRead: read}, nil
}

// use makes the configuration and the CNI DEL runner of containerd's
// answer st, read at now; an answer the same as the last one's is not
// made again.
func (n *Network) use(st cri.NetworkStatus, now time.Time) error {
	if !n.statusAt.IsZero() && st == n.status {
		n.statusAt = now
		return nil
	}
	var cfg podnet.Config
	var err error
	if st.CNIConfig != "" {
		cfg, err = podnet.FromContainerdStatus(st.CNIConfig)
	} else {
		// containerd's own default of at most one network.
		cfg, err = podnet.FromConfDir(n.opts.ConfDir, []string{n.opts.BinDir}, 1, true)
	}
	if err != nil {
		return fmt.Errorf("containerd's CNI configuration: %w", err)
	}
	if err := sameNetnsDir(n.opts.NetnsDir, st.NetnsDir); err != nil {
		return err
	}
	// A network that sets disableGC asks runtimes not to garbage-collect
	// it (CNI spec 1.1: its configuration may be shared with another
	// runtime): its attachments and reservations are not even looked at.
	cfg.Networks = slices.DeleteFunc(cfg.Networks, func(n podnet.Network) bool { return n.List != nil && n.List.DisableGC })
	n.cfg, n.status, n.statusAt = cfg, st, now
	// containerd's spelling once sameNetnsDir found the configured one the
	// same dir: records and cache entries name namespaces as containerd does.
	n.netnsDir = st.NetnsDir
	if n.netnsDir == "" {
		n.netnsDir = n.opts.NetnsDir
	}
	if st.CNIConfig == "" {
		// The conf dir, not containerd, said what the networks are: it
		// may change without containerd's answer changing.
		n.statusAt = time.Time{}
	}
	r := podnet.NewReclaimer(cfg, n.opts.CacheDir, n.opts.ExecRoot, n.rt.PeerPID)
	n.mu.Lock()
	n.reclaimer = r
	n.mu.Unlock()
	return nil
}

// sameNetnsDir checks that network.netns_dir, when set, is the netns dir
// containerd reports, however spelt (/var/run/netns and /run/netns are one
// dir where /var/run links to /run). Another dir would make containerd's
// records name no namespace listed, and the namespace of a sandbox whose
// ADD is still running would look unused.
func sameNetnsDir(configured, reported string) error {
	if configured == "" || reported == "" {
		return nil
	}
	resolve := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	if resolve(configured) != resolve(reported) {
		return fmt.Errorf("network.netns_dir %s is not the netns dir containerd reports, %s: set it to that dir as mounted here, or to \"\" to use containerd's", configured, reported)
	}
	return nil
}

// netnsUnseen is podnet.NetnsMountsUnseen for containerd's process, asked
// now (one that cannot be found is no answer: unseen).
func (n *Network) netnsUnseen(ctx context.Context, netnsDir string) string {
	return podnet.NetnsUnseenBy(ctx, n.rt.PeerPID, netnsDir)
}

// errCNIConfigChanged: the configuration a pass listed the network with is
// not containerd's now.
var errCNIConfigChanged = errors.New("containerd's CNI configuration changed since the network was listed with it")

// confirm asks containerd for its CNI configuration again, for a pass
// that listed the network with an earlier answer and found something
// suspect: the pass may plan a step only on what containerd uses now.
// errCNIConfigChanged when it changed (the next pass uses the new one).
func (n *Network) confirm(ctx context.Context, now time.Time) error {
	st, err := n.rt.NetworkStatus(ctx)
	if err != nil {
		n.statusAt = time.Time{}
		return err
	}
	if st == n.status {
		n.statusAt = now
		return nil
	}
	if err := n.use(st, now); err != nil {
		n.statusAt = time.Time{}
		return err
	}
	return errCNIConfigChanged
}

// recheckUnowned checks, right before a CNI DEL or a reservation release,
// that no source knows the owner now: no NRI report of a sandbox with that
// ID since the listing, and no record of it in containerd's sandbox or
// container stores (any namespace) or CRI.
func (l *Loop) recheckUnowned(ctx context.Context, id string) error {
	if id == "" || l.opts.Network == nil {
		return errors.New("the action names no owner to check, or the network side is off")
	}
	for _, s := range l.state.NRISandboxes() {
		if s.ID == id {
			return fmt.Errorf("NRI reported sandbox %s: it is not unowned", short(id))
		}
	}
	exists, err := l.opts.Network.rt.RecordExists(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("cannot ask containerd for %s again: %w", short(id), err)
	case exists:
		return fmt.Errorf("containerd knows %s again: it is not unowned", short(id))
	}
	return nil
}

// recheckNetnsUnused checks, right before a netns removal, that no sandbox
// record names the netns now (podnet.RemoveNetns then checks the mount and
// that no process is in it).
func (l *Loop) recheckNetnsUnused(ctx context.Context, path string) error {
	if l.opts.Network == nil {
		return errors.New("the network side is off")
	}
	recs, err := l.opts.Network.rt.Records(ctx)
	if err != nil {
		return fmt.Errorf("cannot list containerd's sandbox records again: %w", err)
	}
	if len(recs.Unreadable) > 0 {
		return fmt.Errorf("containerd has sandbox records whose netns cannot be read (%s)", recs.Unreadable[0])
	}
	for id, s := range recs.Sandboxes {
		if s.NetNSPath == path {
			return fmt.Errorf("sandbox %s of containerd names the netns now", short(id))
		}
	}
	return nil
}

// noteIPAMNotInConfList says, once while it lasts, of each network of cfg
// whose IPAM is not in its conflist (podnet.Network.IPAMNotInConfList),
// what is not done there: its reservations are never listed, which would
// otherwise go unsaid. Info: nothing is wrong, and its attachments'
// DELs release what their IPAM holds.
func (l *Loop) noteIPAMNotInConfList(cfg podnet.Config) {
	for _, n := range cfg.Networks {
		if n.IPAMNotInConfList && l.firstSeen("ipam-not-in-conflist "+n.Name) {
			l.log.WithField("network", n.Name).Infof("network %s: address reservations without a cache entry are not looked at: "+
				"its IPAM is not a host-local ipam section of the conflist (a meta plugin such as flannel delegates it)", n.Name)
		}
	}
}

// listNetwork reads the network's objects for a pass; errNetworkOff when
// the network side is off.
func (l *Loop) listNetwork(ctx context.Context, now time.Time) (networkListing, error) {
	if l.opts.Network == nil {
		return networkListing{}, errNetworkOff
	}
	return l.opts.Network.list(ctx, now)
}

// errNetworkOff: network.enabled = false.
var errNetworkOff = errors.New("network.enabled is false")

// networkInput completes the network side of a plan with what only the
// suspects need (gc.NetworkSuspects): containerd's records, read now, after
// the CRI listing, when an owner or a namespace is not explained by the CRI
// listing and NRI; and what each still unexplained namespace is (the mount
// table, every thread on the node). A node with no leak pays for neither.
// A failure leaves the network out of the plan this pass, said once while
// it lasts.
func (l *Loop) networkInput(ctx context.Context, in gc.Input, listing networkListing, err error) *gc.NetworkInput {
	if errors.Is(err, errNetworkOff) {
		return nil
	}
	if err == nil {
		n := &gc.NetworkInput{Listing: listing.Listing, NetnsDir: listing.netnsDir}
		in.Network = n
		owners, netns := gc.NetworkSuspects(in)
		if (owners || len(netns) > 0) && !listing.statusRead {
			err = l.opts.Network.confirm(ctx, listing.listedAt)
		}
		if err == nil && (owners || len(netns) > 0) {
			if n.Records, err = l.opts.Network.rt.Records(ctx); err == nil {
				_, netns = gc.NetworkSuspects(in)
			}
		}
		if err == nil && owners {
			// An unowned attachment's DEL rests on its namespace being
			// gone when it is not mounted here: only where this process
			// sees what containerd mounts.
			n.NetnsUnseen = l.opts.Network.netnsUnseen(ctx, listing.netnsDir)
		}
		if err == nil && len(netns) > 0 {
			var unreadable []podnet.Unreadable
			if n.Listing.Netns, unreadable, err = l.opts.Network.inspect(ctx, listing.netnsDir, netns); err == nil {
				n.Listing.Unreadable = append(slices.Clip(n.Listing.Unreadable), unreadable...)
			}
		}
		if err == nil {
			l.setDegraded(PartNetwork, false)
			l.sayWhileItLasts("network", "", "", "network leaks are looked for again")
			for _, u := range n.Listing.Unreadable {
				l.noteSkipped([]nodefs.Skipped{{Path: u.Path, Reason: "cannot be read: " + u.Reason}})
			}
			l.noteIPAMNotInConfList(l.opts.Network.cfg)
			return n
		}
	}
	if errors.Is(err, errCNIConfigChanged) {
		// Nothing wrong: the new configuration is used from the next pass.
		l.log.Info("network leaks are not looked for this pass: containerd's CNI configuration changed since the network was listed; the next pass lists it with the new one")
		l.notLooked("network", "containerd's CNI configuration changed while it was listed")
		return nil
	}
	if errors.Is(err, podnet.ErrNoNetwork) {
		// A node with host-network pods only: nothing to look at, and
		// nothing wrong. Said once.
		l.setDegraded(PartNetwork, false)
		if l.firstSeen(err.Error()) {
			l.log.WithError(err).Info("network leaks are not looked for: containerd has no CNI network")
		}
		return nil
	}
	if !l.stopping() {
		l.setDegraded(PartNetwork, true)
	}
	l.notLooked("network", err.Error())
	l.sayWhileItLasts("network", err.Error(), "network leaks are not looked for this pass", "network leaks are looked for again")
	return nil
}
