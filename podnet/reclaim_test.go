package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nri-housekeeper/nri-housekeeper/regularfile/regularfiletest"
)

// onlyAttachment lists and returns the one attachment of id.
func onlyAttachment(t *testing.T, cfg Config, n node, id string) Attachment {
	t.Helper()
	for _, a := range mustList(t, cfg, n).Attachments {
		if a.ContainerID == id {
			return a
		}
	}
	t.Fatalf("no attachment of %s listed", id)
	return Attachment{}
}

func TestDeleteAttachment(t *testing.T) {
	ctx := context.Background()
	id := containerID(1)
	const ns = "/var/run/netns/cni-0b3c2a7e-54a4-4a4d-9b1e-0c6f8f1e2a3b"

	t.Run("DEL runs through the whole chain, last plugin first, with the cached values, and the entry goes", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		ns := newNetns(t, netnsPath(n.netnsDir, 3), false).Path // still there: the DEL gets it
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a); err != nil {
			t.Fatal(err)
		}
		calls := n.pluginCalls(t)
		if len(calls) != 4 {
			t.Fatalf("plugin calls:\n%s", strings.Join(calls, "\n"))
		}
		// ADD: veth then portmap; DEL: portmap then veth, each
		// exactly as its ADD (id, interface, namespace, CNI_ARGS,
		// runtimeConfig from the capability args).
		for i, want := range []struct{ add, del string }{{calls[0], calls[3]}, {calls[1], calls[2]}} {
			if !strings.HasPrefix(want.add, "ADD "+id+" eth0 "+ns+" ") || strings.TrimPrefix(want.add, "ADD ") != strings.TrimPrefix(want.del, "DEL ") {
				t.Errorf("pair %d: ADD %q, DEL %q", i, want.add, want.del)
			}
		}
		if !strings.Contains(calls[2], " "+fakePortmap+" ") || !strings.Contains(calls[3], " "+fakeVeth+" ") {
			t.Errorf("DEL order:\n%s", strings.Join(calls, "\n"))
		}
		if !strings.Contains(calls[2], "K8S_POD_INFRA_CONTAINER_ID="+id) || !strings.Contains(calls[2], `"portMappings":[{"containerPort":80`) {
			t.Errorf("DEL without the cached args: %s", calls[2])
		}
		if exists(t, a.CacheFile) {
			t.Errorf("%s is still there", a.CacheFile)
		}
	})

	for _, tc := range []struct {
		rule  string
		netns func(n node) string
	}{
		{"DEL of an attachment whose namespace is gone gets no namespace, as containerd's own teardown",
			func(node) string { return ns }}, // ns: no such path
		// What a teardown that unmounted the namespace and died before it
		// removed the mount point leaves.
		{"DEL of an attachment whose namespace path is no longer a mount gets no namespace", func(n node) string {
			unmounted := netnsPath(n.netnsDir, 3)
			writeFile(t, unmounted, "")
			return unmounted
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			n.add(t, cfg, "pods", id, tc.netns(n))
			a := onlyAttachment(t, cfg, n, id)
			if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a); err != nil {
				t.Fatal(err)
			}
			calls := n.pluginCalls(t)
			if len(calls) != 4 || !strings.HasPrefix(calls[2], "DEL "+id+" eth0 - ") || !strings.HasPrefix(calls[3], "DEL "+id+" eth0 - ") {
				t.Fatalf("plugin calls, want both DELs without a namespace:\n%s", strings.Join(calls, "\n"))
			}
		})
	}

	t.Run("an attachment whose namespace path cannot be looked at is an error, without a DEL", func(t *testing.T) {
		// Whether a namespace is mounted there, with threads in it, cannot
		// be told: not the same as gone.
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		loop := filepath.Join(n.netnsDir, "loop")
		mkdirAll(t, n.netnsDir)
		if err := os.Symlink(loop, loop); err != nil {
			t.Fatal(err)
		}
		n.add(t, cfg, "pods", id, netnsPath(loop, 3))
		a := onlyAttachment(t, cfg, n, id)
		err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a)
		var r *RefusedError
		if err == nil || errors.As(err, &r) || !strings.Contains(err.Error(), "cannot tell whether its namespace") {
			t.Fatalf("err = %v, want an error saying whether its namespace is there cannot be told", err)
		}
		if calls := n.pluginCalls(t); len(calls) != 2 || !exists(t, a.CacheFile) {
			t.Fatalf("a DEL ran, or the entry went:\n%s", strings.Join(calls, "\n"))
		}
	})

	t.Run("an entry that is gone is nothing to do: no DEL", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		if err := os.Remove(a.CacheFile); err != nil {
			t.Fatal(err)
		}
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a); err != nil {
			t.Fatal(err)
		}
		if calls := n.pluginCalls(t); len(calls) != 2 {
			t.Fatalf("plugin calls after the ADDs:\n%s", strings.Join(calls[2:], "\n"))
		}
	})

	t.Run("a plugin's failure is an error, not a refusal, and keeps the entry for a retry", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "fake-portmap", "failDel": true`, 1)})
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a)
		var r *RefusedError
		if err == nil || errors.As(err, &r) || !strings.Contains(err.Error(), "DEL fails, as configured") || !strings.Contains(err.Error(), a.CacheFile) {
			t.Fatalf("err = %v, want the plugin's error naming %s", err, a.CacheFile)
		}
		if !exists(t, a.CacheFile) {
			t.Fatal("the cache entry is gone")
		}
	})

	t.Run("a DEL that hangs is cut off after the step timeout: an error, and the entry kept for a retry", func(t *testing.T) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "fake-portmap", "hangDel": true`, 1)})
		n.add(t, cfg, "pods", id, ns)
		a := onlyAttachment(t, cfg, n, id)
		r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
		r.stepTimeout = 200 * time.Millisecond
		start := time.Now()
		err := r.DeleteAttachment(ctx, a)
		if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "did not finish within 200ms") || took > 10*time.Second {
			t.Fatalf("err = %v after %v, want the DEL cut off after 200ms", err, took)
		}
		if !exists(t, a.CacheFile) {
			t.Fatal("the cache entry is gone")
		}
	})

	refusals := []struct {
		rule   string
		change func(t *testing.T, n node, cfg *Config, a *Attachment)
		want   string
		// changed: a change since the listing (an abort), not a
		// refusal that lasts until the operator or the node changes
		// something (a failure, backed off from).
		changed bool
	}{
		{"an entry now in another namespace is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			n.add(t, *cfg, "pods", id, "/var/run/netns/cni-other")
		}, `namespace "/var/run/netns/cni-other"`, true},
		{"an entry with other CNI_ARGS is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			rewriteEntry(t, a.CacheFile, func(m map[string]any) { m["cniArgs"] = [][2]string{{"K8S_POD_NAME", "other"}} })
		}, "CNI_ARGS", true},
		{"an entry with other capability args is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			rewriteEntry(t, a.CacheFile, func(m map[string]any) { delete(m, "capabilityArgs") })
		}, "capability args", true},
		{"an entry libcni can no longer read is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			writeFile(t, a.CacheFile, "{")
		}, "can no longer be read", true},
		{"a network containerd no longer uses is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			*cfg = n.config(t, map[string]string{"10-pods.conflist": n.netConfList("other", nil)})
		}, `containerd no longer uses network "pods"`, false},
		{"a network that sets disableGC is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			*cfg = n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", map[string]any{"disableGC": true})})
		}, "disableGC", false},
		{"a cache file that is not libcni's for the attachment is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			a.CacheFile = filepath.Join(n.root, "elsewhere")
		}, "libcni's cache entry for", false},
		{"an attachment whose interface was changed is refused", func(t *testing.T, n node, cfg *Config, a *Attachment) {
			a.IfName = "eth1"
		}, "libcni's cache entry for", false},
	}
	for _, tt := range refusals {
		t.Run(tt.rule+", without a DEL", func(t *testing.T) {
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			n.add(t, cfg, "pods", id, ns)
			a := onlyAttachment(t, cfg, n, id)
			path := a.CacheFile
			tt.change(t, n, &cfg, &a)
			before := len(n.pluginCalls(t))
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).DeleteAttachment(ctx, a)
			wantRefused(t, err, a.CacheFile, tt.want, tt.changed)
			if calls := n.pluginCalls(t); len(calls) != before {
				t.Errorf("plugins ran: %s", strings.Join(calls[before:], "\n"))
			}
			if !exists(t, path) {
				t.Errorf("%s is gone", path)
			}
		})
	}
}

// TestADELRereadsTheThreadsOfItsNamespaceRightBefore: the plan saw the
// attachment's namespace unused when its pass began; network steps run
// last, after the pass's CRI steps. A DEL whose namespace a thread is in
// now, or of which that cannot be told, is refused before any plugin runs.
func TestADELRereadsTheThreadsOfItsNamespaceRightBefore(t *testing.T) {
	ctx := context.Background()
	id := containerID(1)
	cases := []struct {
		rule    string
		change  func(t *testing.T, r *Reclaimer, netns string)
		want    string
		changed bool // see TestDeleteAttachment
	}{
		{"a namespace a process entered since the listing is refused", func(t *testing.T, r *Reclaimer, netns string) {
			enterNetns(t, netns)
		}, "a thread is in its namespace", true},
		{"a namespace whose threads cannot be told is refused", func(t *testing.T, r *Reclaimer, netns string) {
			r.threads.read = func(context.Context) (map[uint64]bool, error) {
				return nil, errors.New("cannot tell whether a thread is in it: this process is in PID namespace pid:[1], not the node's")
			}
		}, "cannot tell whether a thread is in it", false},
	}
	for _, tt := range cases {
		t.Run(tt.rule+", without a DEL", func(t *testing.T) {
			n := newNode(t)
			cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
			netns := newNetns(t, netnsPath(n.netnsDir, 3), false).Path
			n.add(t, cfg, "pods", id, netns)
			a := onlyAttachment(t, cfg, n, id)
			r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
			tt.change(t, r, netns)
			before := len(n.pluginCalls(t))
			wantRefused(t, r.DeleteAttachment(ctx, a), a.CacheFile, tt.want, tt.changed)
			if calls := n.pluginCalls(t); len(calls) != before {
				t.Errorf("plugins ran: %s", strings.Join(calls[before:], "\n"))
			}
			if !exists(t, a.CacheFile) {
				t.Errorf("%s is gone", a.CacheFile)
			}
		})
	}
}

// TestDELsShareARecentReadOfTheThreads: reading every thread costs ~13 µs
// each; the DELs of one second share one read, and none rests on an older
// one, a failed one, or one from a clock that went back.
func TestDELsShareARecentReadOfTheThreads(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	cases := []struct {
		rule      string
		secondAt  time.Duration // after the first get
		firstFail bool
		wantReads int
	}{
		{"a read less than maxAge old is shared", 999 * time.Millisecond, false, 1},
		{"a read maxAge old is read again", time.Second, false, 2},
		{"a read from the future (the clock went back) is read again", -time.Millisecond, false, 2},
		{"a failed read is not kept", time.Millisecond, true, 2},
	}
	for _, tt := range cases {
		t.Run(tt.rule, func(t *testing.T) {
			now, reads := start, 0
			th := recentThreads{maxAge: time.Second, now: func() time.Time { return now },
				read: func(context.Context) (map[uint64]bool, error) {
					reads++
					if tt.firstFail && reads == 1 {
						return nil, errors.New("cannot tell")
					}
					return map[uint64]bool{uint64(reads): true}, nil
				}}
			_, err := th.get(ctx, time.Time{})
			if (err != nil) != tt.firstFail {
				t.Fatalf("first get: %v", err)
			}
			now = now.Add(tt.secondAt)
			got, err := th.get(ctx, time.Time{})
			if err != nil || reads != tt.wantReads || !got[uint64(reads)] {
				t.Fatalf("second get %v later: %v, %v after %d reads; want the result of read %d", tt.secondAt, got, err, reads, tt.wantReads)
			}
		})
	}
}

// rewriteEntry changes a libcni cache entry in place.
func rewriteEntry(t *testing.T, path string, change func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	change(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

// reservationNode is a node with network "pods" using host-local and one
// reservation of 10.22.0.2 by id on eth0.
func reservationNode(t *testing.T, id string) (node, Config, Reservation) {
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	dir := filepath.Join(n.dataDir, "pods")
	writeFile(t, filepath.Join(dir, "10.22.0.2"), id+"\r\neth0")
	writeFile(t, filepath.Join(dir, "last_reserved_ip.0"), "10.22.0.2")
	writeFile(t, filepath.Join(dir, "lock"), "")
	l := mustList(t, cfg, n)
	if len(l.Reservations) != 1 {
		t.Fatalf("reservations = %+v", l.Reservations)
	}
	return n, cfg, l.Reservations[0]
}

func TestReleaseReservation(t *testing.T) {
	ctx := context.Background()
	id := containerID(1)

	tests := []struct {
		rule    string
		change  func(t *testing.T, n node, cfg *Config, r *Reservation)
		refused string // "" when the release succeeds
		changed bool   // a refusal of a change since the listing (see TestDeleteAttachment)
	}{
		{"a reservation that still names its owner is removed", func(t *testing.T, n node, cfg *Config, r *Reservation) {}, "", false},
		{"an old one-line reservation that still names its owner is removed", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, id)
			r.IfName = ""
		}, "", false},
		{"a reservation that is gone is nothing to do", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			os.Remove(r.Path)
		}, "", false},
		{"a reservation of another owner is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, containerID(2)+"\r\neth0")
		}, "now reserves the IP for " + containerID(2), true},
		{"a reservation of another interface is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, id+"\r\neth1")
		}, `(interface "eth1")`, true},
		{"a reservation rewritten in the old format is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, id)
		}, `(interface "")`, true},
		{"a file that is no longer host-local's format is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, "not/an id\r\neth0")
		}, "no longer a reservation host-local made", true},
		{"host-local's lock file is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.Path, r.IP = filepath.Join(filepath.Dir(r.Path), "lock"), "lock"
		}, "bookkeeping", false},
		{"host-local's last_reserved_ip file is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.Path, r.IP = filepath.Join(filepath.Dir(r.Path), "last_reserved_ip.0"), "last_reserved_ip.0"
		}, "bookkeeping", false},
		{"a path outside the network's host-local dir is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.Path = filepath.Join(n.root, "10.22.0.2")
			writeFile(t, r.Path, id+"\r\neth0")
		}, "not a file directly in host-local dir", false},
		{"a path below the host-local dir is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.Path = filepath.Join(filepath.Dir(r.Path), "sub", "10.22.0.2")
			writeFile(t, r.Path, id+"\r\neth0")
		}, "not a file directly in host-local dir", false},
		{"a path whose name is not the IP is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.IP = "10.22.0.3"
		}, "not the reservation's IP address", false},
		{"a network containerd no longer uses is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			*cfg = n.config(t, map[string]string{"10-pods.conflist": n.netConfList("other", nil)})
		}, `containerd no longer uses network "pods"`, false},
		{"a network that no longer uses host-local is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			*cfg = n.config(t, map[string]string{"10-pods.conflist": `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"fake-veth"}]}`})
		}, "does not use host-local", false},
		{"a network that sets disableGC is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			*cfg = n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", map[string]any{"disableGC": true})})
		}, "disableGC", false},
		{"a reservation whose attachment libcni still caches is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			n.add(t, *cfg, "pods", id, "/var/run/netns/cni-a")
		}, "libcni still caches attachment", true},
		{"an old-format reservation whose owner libcni caches on any interface is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			writeFile(t, r.Path, id)
			r.IfName = ""
			writeFile(t, filepath.Join(n.cacheDir, "results", "pods-"+id+"-net1"), "{}")
		}, "libcni still caches attachment", true},
		{"an invalid owner is refused", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			r.Owner = "../x"
		}, "container ID", false},
		{"a reservation in a host-local dir without its lock file is removed under a lock made as host-local makes it", func(t *testing.T, n node, cfg *Config, r *Reservation) {
			if err := os.Remove(filepath.Join(filepath.Dir(r.Path), "lock")); err != nil {
				t.Fatal(err)
			}
		}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			n, cfg, r := reservationNode(t, id)
			tt.change(t, n, &cfg, &r)
			before, _ := os.ReadFile(r.Path)
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(ctx, r)
			if tt.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				if exists(t, r.Path) {
					t.Fatalf("%s is still there", r.Path)
				}
			} else {
				wantRefused(t, err, r.Path, tt.refused, tt.changed)
				if after, _ := os.ReadFile(r.Path); string(after) != string(before) {
					t.Fatalf("%s changed: %q, was %q", r.Path, after, before)
				}
			}
			dir := filepath.Join(n.dataDir, "pods")
			for _, keep := range []string{"lock", "last_reserved_ip.0"} {
				if !exists(t, filepath.Join(dir, keep)) {
					t.Errorf("host-local's %s is gone", keep)
				}
			}
		})
	}
}

// TestReleaseReservationWhenLibcnisCacheCannotBeRead: whether libcni still
// caches the owner's attachment (whose DEL releases the IP) cannot be told,
// so nothing is released.
// The results dir may also be a FIFO (another agent's, or a misconfigured
// cache_dir): looking into it must not wait for a writer for ever.
func TestReleaseReservationWhenLibcnisCacheCannotBeRead(t *testing.T) {
	id := containerID(1)
	for _, results := range []struct {
		what string
		make func(t *testing.T, path string)
	}{
		{"a file", func(t *testing.T, path string) { writeFile(t, path, "") }},
		{"a FIFO", func(t *testing.T, path string) {
			mkdirAll(t, filepath.Dir(path))
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, ifName := range []string{"eth0", ""} {
			t.Run("results dir "+results.what+", interface "+strconv.Quote(ifName), func(t *testing.T) {
				n, cfg, r := reservationNode(t, id)
				if ifName == "" {
					writeFile(t, r.Path, id)
				}
				r.IfName = ifName
				// Every look into the results dir fails, and not with
				// "does not exist".
				path := filepath.Join(n.cacheDir, "results")
				if err := os.RemoveAll(path); err != nil {
					t.Fatal(err)
				}
				results.make(t, path)
				var err error
				regularfiletest.ReturnsWithin(t, func() {
					err = NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(context.Background(), r)
				})
				if err == nil {
					t.Fatal("released, though libcni's cache could not be read")
				}
				t.Logf("error as wanted: %v", err)
				if !exists(t, r.Path) {
					t.Fatalf("%s was removed", r.Path)
				}
			})
		}
	}
}

// holdHostLocalLock takes host-local's lock on dir as host-local does
// (go-filemutex: open <dir>/lock O_CREAT|O_RDONLY 0750, flock LOCK_EX).
func holdHostLocalLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, "lock"), unix.O_CREAT|unix.O_RDONLY|unix.O_CLOEXEC, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			unix.Flock(fd, unix.LOCK_UN)
			unix.Close(fd)
		})
	}
	t.Cleanup(release)
	return release
}

func TestReleaseReservationTakesHostLocalsLock(t *testing.T) {
	id := containerID(1)

	t.Run("while host-local holds the lock the release waits, bounded by ctx, and changes nothing", func(t *testing.T) {
		n, cfg, r := reservationNode(t, id)
		holdHostLocalLock(t, filepath.Dir(r.Path))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(ctx, r)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "host-local's lock") {
			t.Fatalf("err = %v, want the deadline while waiting for host-local's lock", err)
		}
		if waited := time.Since(start); waited < 150*time.Millisecond || waited > 10*time.Second {
			t.Fatalf("returned after %v, not at ctx's deadline (200ms)", waited)
		}
		if !exists(t, r.Path) {
			t.Fatal("the reservation was removed under host-local's lock")
		}
	})

	t.Run("the release goes ahead once host-local lets go of the lock", func(t *testing.T) {
		n, cfg, r := reservationNode(t, id)
		release := holdHostLocalLock(t, filepath.Dir(r.Path))
		const held = 150 * time.Millisecond
		time.AfterFunc(held, release)
		start := time.Now()
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < held {
			t.Fatalf("released after %v, while the lock was held for %v", waited, held)
		}
		if exists(t, r.Path) {
			t.Fatal("the reservation is still there")
		}
	})

	t.Run("without a deadline of its own, the wait ends after the step timeout", func(t *testing.T) {
		n, cfg, r := reservationNode(t, id)
		holdHostLocalLock(t, filepath.Dir(r.Path))
		rc := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
		rc.stepTimeout = 200 * time.Millisecond
		err := rc.ReleaseReservation(context.Background(), r)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "host-local's lock") || !exists(t, r.Path) {
			t.Fatalf("err = %v (reservation there: %v), want the step timeout while waiting for host-local's lock", err, exists(t, r.Path))
		}
	})

	t.Run("a FIFO in place of host-local's lock is refused without waiting for a writer, and changes nothing", func(t *testing.T) {
		n, cfg, r := reservationNode(t, id)
		lock := filepath.Join(filepath.Dir(r.Path), "lock")
		if err := os.Remove(lock); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(lock, 0o600); err != nil {
			t.Fatal(err)
		}
		var err error
		regularfiletest.ReturnsWithin(t, func() {
			err = NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(context.Background(), r)
		})
		if err == nil || !strings.Contains(err.Error(), lock+" is a FIFO, not a regular file") || !exists(t, r.Path) {
			t.Fatalf("err = %v (reservation there: %v), want a refusal of the FIFO %s", err, exists(t, r.Path), lock)
		}
	})

	t.Run("the content is re-read under the lock: a change made while waiting is refused", func(t *testing.T) {
		n, cfg, r := reservationNode(t, id)
		release := holdHostLocalLock(t, filepath.Dir(r.Path))
		time.AfterFunc(100*time.Millisecond, func() {
			// What host-local does under its lock: release the IP
			// and give it to another container.
			os.WriteFile(r.Path, []byte(containerID(2)+"\r\neth0"), 0o600)
			release()
		})
		err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(context.Background(), r)
		wantRefused(t, err, r.Path, "now reserves the IP for "+containerID(2), true)
	})
}

// hostLocalCanLock reports whether host-local could take its lock on dir
// now, without waiting.
func hostLocalCanLock(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, "lock"), unix.O_CREAT|unix.O_RDONLY|unix.O_CLOEXEC, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	unix.Flock(fd, unix.LOCK_UN)
	return true
}

// TestAReleaseHoldsHostLocalsLockUntilTheReservationIsGone: the re-read and
// the removal happen under host-local's lock, so that no ADD gives the IP
// to another container in between; the lock is let go after.
func TestAReleaseHoldsHostLocalsLockUntilTheReservationIsGone(t *testing.T) {
	n, cfg, r := reservationNode(t, containerID(1))
	dir := filepath.Dir(r.Path)
	rc := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	letGo := false
	rc.lock = func(ctx context.Context, dir string) (func(), error) {
		unlock, err := lockHostLocal(ctx, dir)
		if err != nil {
			return nil, err
		}
		return func() {
			letGo = true
			if exists(t, r.Path) {
				t.Errorf("host-local's lock is let go while %s is still there", r.Path)
			}
			if hostLocalCanLock(t, dir) {
				t.Error("host-local could take its lock while the release held it")
			}
			unlock()
		}, nil
	}
	if err := rc.ReleaseReservation(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if !letGo || exists(t, r.Path) {
		t.Fatalf("lock let go: %v, %s there: %v", letGo, r.Path, exists(t, r.Path))
	}
	if !hostLocalCanLock(t, dir) {
		t.Fatal("host-local cannot take its lock after the release")
	}
}

// TestHostLocalCanTakeItsLockAfterARelease: a lock kept after a release, or
// after a refusal under it, would block host-local, and every ADD on the
// network, for as long as the plugin runs.
func TestHostLocalCanTakeItsLockAfterARelease(t *testing.T) {
	id := containerID(1)
	for _, tc := range []struct {
		rule   string
		change func(t *testing.T, r Reservation)
	}{
		{"after a release", func(t *testing.T, r Reservation) {}},
		{"after a refusal under the lock", func(t *testing.T, r Reservation) {
			writeFile(t, r.Path, containerID(2)+"\r\neth0")
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			n, cfg, r := reservationNode(t, id)
			tc.change(t, r)
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).ReleaseReservation(context.Background(), r)
			t.Logf("ReleaseReservation: %v", err)
			if !hostLocalCanLock(t, filepath.Dir(r.Path)) {
				t.Fatal("host-local cannot take its lock after ReleaseReservation returned")
			}
		})
	}
}

func TestRemoveNetns(t *testing.T) {
	ctx := context.Background()

	setup := func(t *testing.T, inUse bool) (node, Config, *testNetns, Netns) {
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		tn := newNetns(t, netnsPath(n.netnsDir, 1), inUse)
		l := mustList(t, cfg, n)
		if len(l.Netns) != 1 {
			t.Fatalf("netns = %+v, unreadable %+v", l.Netns, l.Unreadable)
		}
		return n, cfg, tn, l.Netns[0]
	}

	t.Run("a namespace mount no thread is in is unmounted and removed", func(t *testing.T) {
		n, cfg, tn, ns := setup(t, false)
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, ns); err != nil {
			t.Fatal(err)
		}
		if isMounted(t, tn.Path) || exists(t, tn.Path) {
			t.Fatalf("%s is still there (mounted: %v)", tn.Path, isMounted(t, tn.Path))
		}
	})

	t.Run("a namespace mount that is gone is nothing to do", func(t *testing.T) {
		n, cfg, tn, ns := setup(t, false)
		if err := unix.Unmount(tn.Path, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		os.Remove(tn.Path)
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, ns); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a namespace under a netns dir reached through a symlink is removed", func(t *testing.T) {
		// containerd's /var/run/netns is /run/netns on most nodes: the
		// mount table names the real dir.
		n := newNode(t)
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		tn := newNetns(t, netnsPath(n.netnsDir, 1), false)
		link := filepath.Join(n.root, "var-run-netns")
		if err := os.Symlink(n.netnsDir, link); err != nil {
			t.Fatal(err)
		}
		l := mustInspect(t, link, mustListNames(t, cfg, n.cacheDir, link))
		if len(l.Netns) != 1 || l.Netns[0].Path != filepath.Join(link, filepath.Base(tn.Path)) {
			t.Fatalf("netns = %+v, unreadable %+v; want the namespace under %s", l.Netns, l.Unreadable, link)
		}
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, l.Netns[0]); err != nil {
			t.Fatal(err)
		}
		if isMounted(t, tn.Path) || exists(t, tn.Path) {
			t.Fatalf("%s is still there (mounted: %v)", tn.Path, isMounted(t, tn.Path))
		}
	})

	t.Run("a namespace shown on every mount of a netns dir bind-mounted on itself is one namespace, and removed", func(t *testing.T) {
		// What `ip netns add` leaves on a node: /run/netns bind-mounted on
		// itself, shared with /run, so that a mount made in it shows on both.
		n := newNode(t)
		if err := os.MkdirAll(n.netnsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			src, fstype string
			flags       uintptr
		}{
			{"tmpfs", "tmpfs", 0}, {"", "", unix.MS_SHARED}, // the node's /run
		} {
			if err := unix.Mount(step.src, n.root, step.fstype, step.flags, ""); err != nil {
				t.Skipf("mounting not permitted: %v", err)
			}
		}
		t.Cleanup(func() { _ = unix.Unmount(n.root, unix.MNT_DETACH) })
		if err := os.MkdirAll(n.netnsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(n.netnsDir, n.netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(n.netnsDir, unix.MNT_DETACH) })
		if err := unix.Mount("", n.netnsDir, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
		cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
		tn := newNetns(t, netnsPath(n.netnsDir, 2), false)
		mounts, err := mountsIn(n.netnsDir)
		if err != nil || len(mounts[filepath.Base(tn.Path)]) != 2 {
			t.Fatalf("the mount table shows %d mounts at %s (%v), want one on each mount of the dir: the test proves nothing",
				len(mounts[filepath.Base(tn.Path)]), tn.Path, err)
		}
		l := mustList(t, cfg, n)
		if len(l.Netns) != 1 || l.Netns[0].Inode != tn.Inode || len(l.Unreadable) > 0 {
			t.Fatalf("netns = %+v, unreadable %+v; want the one namespace", l.Netns, l.Unreadable)
		}
		if err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, l.Netns[0]); err != nil {
			t.Fatal(err)
		}
		if mounts, err := mountsIn(n.netnsDir); err != nil || len(mounts[filepath.Base(tn.Path)]) > 0 || exists(t, tn.Path) {
			t.Fatalf("after the removal: %d mounts there (%v), file there %v", len(mounts[filepath.Base(tn.Path)]), err, exists(t, tn.Path))
		}
	})

	refusals := []struct {
		rule    string
		inUse   bool
		change  func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns)
		want    string
		changed bool // a refusal of a change since the listing (see TestDeleteAttachment)
	}{
		{"a namespace a thread is in is refused", true, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {}, "a thread is in the namespace", true},
		{"a namespace a process entered since the listing is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			enterNetns(t, tn.Path)
		}, "a thread is in the namespace", true},
		{"another namespace mounted on the path is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			if err := unix.Unmount(tn.Path, unix.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
			other := newNetns(t, netnsPath(n.root, 9), false)
			bindMount(t, other.Path, tn.Path)
		}, "another namespace is mounted there", true},
		{"a mount point that is no longer mounted is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			if err := unix.Unmount(tn.Path, unix.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
		}, "no longer a mount point", true},
		{"stacked mounts are refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			bindMount(t, tn.Path, tn.Path)
		}, "stacked", true},
		{"a namespace a cached attachment names is refused: DEL comes first", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			n.add(t, cfg, "pods", containerID(1), tn.Path)
		}, "CNI DEL that attachment first", false},
		{"a namespace a cache entry names under another spelling of its dir is refused: DEL comes first", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			// containerd's /var/run/netns is /run/netns on most nodes.
			writeFile(t, filepath.Join(n.cacheDir, "results", "pods-"+containerID(1)+"-eth0"),
				`{"kind":"cniCacheV1","netns":"/var/run/netns/`+filepath.Base(tn.Path)+`"}`)
		}, "CNI DEL that attachment first", false},
		{"a path not named like containerd's is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			ns.Path = filepath.Join(filepath.Dir(tn.Path), "mine")
		}, "not named like containerd's", false},
		{"a relative path is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			ns.Path = filepath.Base(tn.Path)
		}, "not a clean absolute path", false},
		{"a path that is not clean is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			ns.Path = filepath.Dir(tn.Path) + "/./" + filepath.Base(tn.Path)
		}, "not a clean absolute path", false},
		{"a path whose mount the mount table lists but a stat does not find is refused", false, func(t *testing.T, n node, cfg Config, tn *testNetns, ns *Netns) {
			// A mount on the netns dir hides the namespace mount: the
			// mount table still lists it at the path, while the path
			// itself is the file on top, which is no namespace.
			if err := unix.Mount("tmpfs", n.netnsDir, "tmpfs", 0, ""); err != nil {
				t.Skipf("mounting not permitted: %v", err)
			}
			t.Cleanup(func() { _ = unix.Unmount(n.netnsDir, unix.MNT_DETACH) }) // before newNetns's own
			writeFile(t, tn.Path, "not a namespace")
		}, "a stat says otherwise", true},
	}
	for _, tt := range refusals {
		t.Run(tt.rule+", and stays mounted", func(t *testing.T) {
			n, cfg, tn, ns := setup(t, tt.inUse)
			tt.change(t, n, cfg, tn, &ns)
			mounted := isMounted(t, tn.Path)
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, ns)
			wantRefused(t, err, ns.Path, tt.want, tt.changed)
			if isMounted(t, tn.Path) != mounted || !exists(t, tn.Path) {
				t.Fatalf("%s changed", tn.Path)
			}
		})
	}

	// Whether a cached attachment names the namespace (its DEL comes
	// first) cannot be told: the namespace stays.
	cannotTell := []struct {
		rule   string
		change func(t *testing.T, n node, tn *testNetns)
	}{
		{"libcni's cache dir cannot be read", func(t *testing.T, n node, tn *testNetns) {
			results := filepath.Join(n.cacheDir, "results")
			if err := os.RemoveAll(results); err != nil {
				t.Fatal(err)
			}
			writeFile(t, results, "")
		}},
		{"a cache entry cannot be read", func(t *testing.T, n node, tn *testNetns) {
			// Bigger than libcni ever writes, and naming the namespace
			// past what may be read of it.
			big := strings.Repeat(" ", maxCacheEntrySize) + tn.Path
			writeFile(t, filepath.Join(n.cacheDir, "results", "pods-"+containerID(1)+"-eth0"), big)
		}},
	}
	for _, tt := range cannotTell {
		t.Run("when "+tt.rule+", the namespace is not removed", func(t *testing.T) {
			n, cfg, tn, ns := setup(t, false)
			tt.change(t, n, tn)
			err := NewReclaimer(cfg, n.cacheDir, "", thisProcess).RemoveNetns(ctx, ns)
			if err == nil {
				t.Fatal("removed, though libcni's cache could not be read")
			}
			t.Logf("error as wanted: %v", err)
			if !isMounted(t, tn.Path) || !exists(t, tn.Path) {
				t.Fatalf("%s changed", tn.Path)
			}
		})
	}
}

// TestNetnsOutsideTheNodesPIDNamespace runs List and RemoveNetns in a child
// of this test in a new PID namespace: there /proc does not show every
// thread, so no namespace may look unused.
func TestNetnsOutsideTheNodesPIDNamespace(t *testing.T) {
	if dir := os.Getenv("PODNET_TEST_CHILD_NETNS_DIR"); dir != "" {
		childListAndRemove(t, dir)
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip(err)
	}
	n := newNode(t)
	tn := newNetns(t, netnsPath(n.netnsDir, 1), false)
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestNetnsOutsideTheNodesPIDNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), "PODNET_TEST_CHILD_NETNS_DIR="+n.netnsDir)
	out, err := cmd.CombinedOutput()
	t.Logf("child:\n%s", out)
	if err != nil {
		t.Fatalf("the child failed: %v", err)
	}
	// The child ran the test, not nothing (a -test.run that matched no
	// test exits 0 too).
	if !strings.Contains(string(out), "--- PASS: TestNetnsOutsideTheNodesPIDNamespace") {
		t.Fatal("the child did not run the test: the test proves nothing")
	}
	if !isMounted(t, tn.Path) {
		t.Fatal("the namespace was unmounted")
	}
}

// childListAndRemove is the child's side of
// TestNetnsOutsideTheNodesPIDNamespace.
func childListAndRemove(t *testing.T, netnsDir string) {
	l, err := List(context.Background(), Config{}, t.TempDir(), netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	netns, unreadable, err := InspectNetns(context.Background(), netnsDir, l.NetnsPaths)
	if err != nil {
		t.Fatal(err)
	}
	l.Netns, l.Unreadable = netns, append(l.Unreadable, unreadable...)
	if len(l.Netns) != 0 || len(l.Unreadable) != 1 || !strings.Contains(l.Unreadable[0].Reason, "not the node's") {
		t.Fatalf("listing = %+v, want the namespace unreadable", l)
	}
	t.Logf("unreadable as wanted: %+v", l.Unreadable[0])
	var st unix.Stat_t
	path := l.Unreadable[0].Path
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	r := NewReclaimer(Config{}, t.TempDir(), "", thisProcess)
	wantRefused(t, r.RemoveNetns(context.Background(), Netns{Path: path, Inode: st.Ino}), path, "not the node's", false)
}

// TestADELRefusesANamespaceMountedAgainWhileItsThreadsWereRead: the
// threads are read for the namespace a stat of the path found; the DEL
// hands the plugins the path. Another namespace mounted there meanwhile
// (the read may wait for another DEL's, and costs tens of milliseconds on
// a big node) is one whose threads were not looked for: refused, no
// plugin run.
func TestADELRefusesANamespaceMountedAgainWhileItsThreadsWereRead(t *testing.T) {
	ctx := context.Background()
	id := containerID(1)
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	netns := newNetns(t, netnsPath(n.netnsDir, 3), false).Path
	other := newNetns(t, netnsPath(t.TempDir(), 4), true) // a thread is in it
	n.add(t, cfg, "pods", id, netns)
	a := onlyAttachment(t, cfg, n, id)
	r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	read := r.threads.read
	r.threads.read = func(ctx context.Context) (map[uint64]bool, error) {
		if err := unix.Mount(other.Path, netns, "", unix.MS_BIND, ""); err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = unix.Unmount(netns, unix.MNT_DETACH) }) // before newNetns's own
		return read(ctx)
	}
	before := len(n.pluginCalls(t))
	err := r.DeleteAttachment(ctx, a)
	if calls := n.pluginCalls(t); len(calls) != before {
		t.Fatalf("the DEL ran in net:[%d], mounted on %s while the threads of the namespace listed there were read, with a thread in it (err %v):\n%s",
			other.Inode, netns, err, strings.Join(calls[before:], "\n"))
	}
	wantRefused(t, err, a.CacheFile, "is mounted on", true)
}

// TestADELRestsOnAReadOfTheThreadsAtMostASecondOld: the README promises
// the threads are read at most a second before a DEL. A Reclaimer's
// second DEL a second after its first reads them again, and sees a thread
// that entered the second DEL's namespace since.
func TestADELRestsOnAReadOfTheThreadsAtMostASecondOld(t *testing.T) {
	ctx := context.Background()
	n := newNode(t)
	cfg := n.config(t, map[string]string{"10-pods.conflist": n.netConfList("pods", nil)})
	first, second := containerID(1), containerID(2)
	n.add(t, cfg, "pods", first, newNetns(t, netnsPath(n.netnsDir, 3), false).Path)
	secondNetns := newNetns(t, netnsPath(n.netnsDir, 4), false).Path
	n.add(t, cfg, "pods", second, secondNetns)
	a, b := onlyAttachment(t, cfg, n, first), onlyAttachment(t, cfg, n, second)
	r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	now := time.Now()
	r.threads.now = func() time.Time { return now }
	if err := r.DeleteAttachment(ctx, a); err != nil {
		t.Fatalf("first DEL: %v", err)
	}
	enterNetns(t, secondNetns)
	now = now.Add(time.Second)
	wantRefused(t, r.DeleteAttachment(ctx, b), b.CacheFile, "a thread is in its namespace", true)
}

// TestASharedReadOfTheThreadsAgesFromItsStart: a read that takes a while
// (rereads of unreadable threads, a big node) is as old as its start: a
// thread may have entered a namespace it had already read past.
func TestASharedReadOfTheThreadsAgesFromItsStart(t *testing.T) {
	ctx := context.Background()
	now, reads := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC), 0
	th := recentThreads{maxAge: time.Second, now: func() time.Time { return now },
		read: func(context.Context) (map[uint64]bool, error) {
			reads++
			now = now.Add(600 * time.Millisecond) // the read takes 600 ms
			return map[uint64]bool{}, nil
		}}
	if _, err := th.get(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(400 * time.Millisecond) // a second after the read started
	if _, err := th.get(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if reads != 2 {
		t.Fatalf("%d reads: a get a second after a read started rested on it", reads)
	}
}

// TestConcurrentDELsShareOneReadOfTheThreads: DELs run up to max_parallel
// at once; under -race, their gets share one read.
func TestConcurrentDELsShareOneReadOfTheThreads(t *testing.T) {
	ctx := context.Background()
	reads := 0
	th := recentThreads{maxAge: time.Hour, now: time.Now,
		read: func(context.Context) (map[uint64]bool, error) {
			reads++
			time.Sleep(10 * time.Millisecond)
			return map[uint64]bool{7: true}, nil
		}}
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			got, err := th.get(ctx, time.Time{})
			if err == nil && !got[7] {
				err = errors.New("the read's result is not the one returned")
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if reads != 1 {
		t.Errorf("%d reads, want 1", reads)
	}
}

// twoNetworksInOneNamespace makes a pod (containerID(1)) on two networks
// in one namespace, as every pod is on its network and containerd's
// loopback: "pods", whose DEL spends 400 ms in the namespace (delInNetns),
// and "storage".
func twoNetworksInOneNamespace(t *testing.T) (n node, cfg Config, ns *testNetns, pods, storage Attachment) {
	t.Helper()
	n = newNode(t)
	slow := strings.Replace(n.netConfList("pods", nil), `"type": "fake-portmap"`, `"type": "fake-portmap", "delInNetns": 400`, 1)
	cfg = n.config(t, map[string]string{"10-pods.conflist": slow, "20-storage.conflist": n.netConfList("storage", nil)})
	id := containerID(1)
	ns = newNetns(t, netnsPath(n.netnsDir, 3), false)
	n.add(t, cfg, "pods", id, ns.Path)
	n.add(t, cfg, "storage", id, ns.Path)
	for _, a := range mustList(t, cfg, n).Attachments {
		switch a.Network {
		case "pods":
			pods = a
		case "storage":
			storage = a
		}
	}
	if pods.CacheFile == "" || storage.CacheFile == "" {
		t.Fatalf("want an attachment on each network, listed %+v and %+v", pods, storage)
	}
	return n, cfg, ns, pods, storage
}

// waitInNetns waits until a DEL's plugin is in the namespace (delInNetns).
func waitInNetns(t *testing.T, n node) {
	t.Helper()
	inNetns := n.log + ".in-netns"
	for deadline := time.Now().Add(10 * time.Second); !exists(t, inNetns); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first DEL's plugin never entered the namespace (%s)", inNetns)
		}
	}
}

// TestTheDELsOfOneNamespaceRunOneAtATime: every pod has two attachments in
// its namespace (its network's and containerd's loopback), due in one
// wave, and the plugins of a DEL enter the namespace (loopback sets lo
// down from a thread in it). A DEL must not take the plugins of another
// DEL in its namespace for a workload: it waits for that DEL, and rests on
// a read of the threads begun after it ended.
func TestTheDELsOfOneNamespaceRunOneAtATime(t *testing.T) {
	ctx := context.Background()
	n, cfg, _, pods, storage := twoNetworksInOneNamespace(t)
	r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	// A clock a second on at each look: no DEL shares a read by age alone.
	r.threads.now = (&lockedClock{now: time.Now(), step: time.Second}).look
	first := make(chan error, 1)
	go func() { first <- r.DeleteAttachment(ctx, pods) }()
	waitInNetns(t, n)
	if err := r.DeleteAttachment(ctx, storage); err != nil {
		t.Fatalf("the second DEL in the namespace, while the first's plugin was in it: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first DEL: %v", err)
	}
	var order []string
	for _, call := range n.pluginCalls(t) {
		if f := strings.Fields(call); f[0] == "DEL" {
			order = append(order, f[2])
		}
	}
	if want := []string{"eth0", "eth0", "eth1", "eth1"}; !slices.Equal(order, want) {
		t.Errorf("DELs ran on %v, want %v: the second began before the first ended", order, want)
	}
}

// TestADELThatWaitedForItsNamespaceChecksItsEntryAfterTheWait: a DEL may
// wait for another in its namespace as long as that DEL takes (up to
// network.step_timeout). Its entry and the addresses of its cached result
// are checked right before it runs, so after the wait: an entry changed,
// an address given to another container, or another namespace mounted on
// its path meanwhile is refused, and no plugin of its network runs.
func TestADELThatWaitedForItsNamespaceChecksItsEntryAfterTheWait(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		change  func(t *testing.T, n node, storage Attachment)
		want    string
		changed bool // see TestDeleteAttachment
	}{
		{"an entry changed during the wait is refused", func(t *testing.T, n node, storage Attachment) {
			rewriteEntry(t, storage.CacheFile, func(m map[string]any) { m["cniArgs"] = [][2]string{{"K8S_POD_NAME", "other"}} })
		}, "the cache entry changed since it was listed", true},
		{"an address reserved by another container during the wait is refused", func(t *testing.T, n node, storage Attachment) {
			writeFile(t, filepath.Join(n.dataDir, "storage", "10.22.0.5"), containerID(2)+"\r\neth0")
		}, "is reserved by " + containerID(2), false},
		{"another namespace mounted on its path during the wait is refused", func(t *testing.T, n node, storage Attachment) {
			other := newNetns(t, netnsPath(t.TempDir(), 4), false)
			bindMount(t, other.Path, storage.NetNS)
		}, "another namespace is mounted on", true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			ctx := context.Background()
			n, cfg, ns, pods, storage := twoNetworksInOneNamespace(t)
			if !slices.Contains(storage.IPs, "10.22.0.5") {
				t.Fatalf("want the storage attachment with 10.22.0.5; listed %+v", storage)
			}
			r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
			first := make(chan error, 1)
			go func() { first <- r.DeleteAttachment(ctx, pods) }()
			waitInNetns(t, n)
			second := make(chan error, 1)
			go func() { second <- r.DeleteAttachment(ctx, storage) }()
			// Changed once the second DEL waits for the namespace.
			waiting := func() bool {
				r.delsIn.mu.Lock()
				defer r.delsIn.mu.Unlock()
				turn := r.delsIn.turns[ns.Inode]
				return turn != nil && turn.users == 2
			}
			for deadline := time.Now().Add(10 * time.Second); !waiting(); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the second DEL never waited for the first")
				}
			}
			tc.change(t, n, storage)
			if err := <-first; err != nil {
				t.Fatalf("the first DEL: %v", err)
			}
			err := <-second
			for _, call := range n.pluginCalls(t) {
				if strings.HasPrefix(call, "DEL ") && strings.Contains(call, " eth1 ") {
					t.Errorf("a plugin of the second DEL ran: %s", call)
				}
			}
			wantRefused(t, err, storage.CacheFile, tc.want, tc.changed)
		})
	}
}

// TestADELAfterAnotherInItsNamespaceDoesNotShareAReadMadeWhileItsPluginsWereThere:
// a DEL elsewhere reads the threads while the plugins of a DEL are in the
// namespace, and that read is shared for a second. The next DEL in the
// namespace, started within that second, rests on a read begun after the
// DEL before it ended, not on the shared one, which would refuse it as
// "something runs there again".
func TestADELAfterAnotherInItsNamespaceDoesNotShareAReadMadeWhileItsPluginsWereThere(t *testing.T) {
	ctx := context.Background()
	n, cfg, ns, pods, storage := twoNetworksInOneNamespace(t)
	r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	// A clock that moves only when the test moves it: every read is
	// young enough to be shared by age.
	clock := &lockedClock{now: time.Now()}
	r.threads.now = clock.look
	first := make(chan error, 1)
	go func() { first <- r.DeleteAttachment(ctx, pods) }()
	waitInNetns(t, n)
	// The read a DEL in another namespace makes now, the first DEL's own
	// too old to share.
	clock.move(threadsMaxAge)
	seen, err := r.threads.get(ctx, time.Time{})
	if err != nil || !seen[ns.Inode] {
		t.Fatalf("a read while the first DEL's plugin is in net:[%d]: %v, %v; want it seen there", ns.Inode, seen, err)
	}
	clock.move(100 * time.Millisecond)
	if err := <-first; err != nil {
		t.Fatalf("the first DEL: %v", err)
	}
	if err := r.DeleteAttachment(ctx, storage); err != nil {
		t.Fatalf("the second DEL in the namespace, after the first ended: %v", err)
	}
}

// TestADELAfterAnotherInItsNamespaceRestsOnAReadBegunAfterIt: a read of
// the threads made for a DEL elsewhere while another DEL's plugins were in
// a namespace sees them there. The next DEL in that namespace, even one
// that starts after the other ended, rests on a later read; and the turns
// of namespaces whose last DEL is older than any read still shared are
// let go.
func TestADELAfterAnotherInItsNamespaceRestsOnAReadBegunAfterIt(t *testing.T) {
	ctx := context.Background()
	const ns, elsewhere = 7, 8
	now, reads := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC), 0
	clock := func() time.Time { return now }
	th := recentThreads{maxAge: threadsMaxAge, now: clock,
		read: func(context.Context) (map[uint64]bool, error) {
			reads++
			return map[uint64]bool{ns: reads == 1}, nil // the first read sees the plugins in ns
		}}
	var turns netnsTurns
	_, release, err := turns.take(ctx, ns, clock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.get(ctx, time.Time{}); err != nil { // for a DEL elsewhere
		t.Fatal(err)
	}
	now = now.Add(100 * time.Millisecond)
	release()
	now = now.Add(100 * time.Millisecond)
	after, release, err := turns.take(ctx, ns, clock)
	if err != nil {
		t.Fatal(err)
	}
	got, err := th.get(ctx, after)
	release()
	if err != nil || got[ns] || reads != 2 {
		t.Fatalf("the next DEL in the namespace got %v, %v after %d read(s): it rested on the read made while the DEL before was in it", got, err, reads)
	}
	// Turns do not pile up: once its last DEL is older than a shared read
	// can be, a namespace's turn goes.
	for i := range uint64(100) {
		now = now.Add(threadsMaxAge)
		_, release, err := turns.take(ctx, elsewhere+i, clock)
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if len(turns.turns) > 1 {
		t.Errorf("%d turns kept after 100 DELs a second apart, want at most 1", len(turns.turns))
	}
}

// TestAWaitForAnotherDELInItsNamespaceEndsWithItsContext: the DEL that
// holds a namespace can take up to network.step_timeout; a pass that is
// stopped does not wait for it. A wait that ended so does not keep the
// namespace's turn once its last DEL is older than a shared read can be.
func TestAWaitForAnotherDELInItsNamespaceEndsWithItsContext(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var turns netnsTurns
	_, release, err := turns.take(context.Background(), 7, clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := turns.take(ctx, 7, clock); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a namespace another DEL holds: %v, want the context's deadline", err)
	}
	if _, release, err := turns.take(context.Background(), 8, clock); err != nil {
		t.Fatalf("another namespace: %v", err)
	} else {
		release()
	}
	release()
	now = now.Add(threadsMaxAge)
	if _, release, err := turns.take(context.Background(), 9, clock); err != nil {
		t.Fatalf("a third namespace: %v", err)
	} else {
		release()
	}
	if turns.turns[7] != nil {
		t.Errorf("the turn of net:[7] is kept a second after its last DEL: the wait that ended with its context still counts as a user (%d)", turns.turns[7].users)
	}
}

// lockedClock is a fake clock that the DELs of a test read from their own
// goroutines: each look moves it on by step (with none, only move does).
type lockedClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *lockedClock) look() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *lockedClock) move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// thisProcess is a runtime in the test's own mount namespace: a namespace
// not mounted here is gone.
func thisProcess(context.Context) (int, error) { return os.Getpid(), nil }

// TestTheWaitForANamespacesTurnIsBoundedAsADELIs: a DEL waits for another
// in its namespace at most as long as a DEL may run, however many wait, so
// a step takes at most two of those (what /healthz allows a step). The
// wait was bounded by the pass only: the last of k DELs in one namespace
// waited k-1 of them.
func TestTheWaitForANamespacesTurnIsBoundedAsADELIs(t *testing.T) {
	ctx := context.Background()
	n, cfg, ns, _, storage := twoNetworksInOneNamespace(t)
	r := NewReclaimer(cfg, n.cacheDir, "", thisProcess)
	r.stepTimeout = 200 * time.Millisecond
	_, release, err := r.delsIn.take(ctx, ns.Inode, time.Now) // another DEL, hanging
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	start := time.Now()
	err = r.DeleteAttachment(ctx, storage)
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "another DEL held it for more than 200ms") || took > 5*time.Second {
		t.Fatalf("after %v: %v; want the wait given up after the step timeout", took, err)
	}
	for _, call := range n.pluginCalls(t) {
		if strings.HasPrefix(call, "DEL ") {
			t.Errorf("a plugin ran without the namespace's turn: %s", call)
		}
	}
}
