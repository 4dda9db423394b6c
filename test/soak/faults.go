package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

// NRIRequestTimeout reads plugin_request_timeout from the lab's containerd
// config (containerd v2.4.2's default, and the lab's, is 2s).
func NRIRequestTimeout(l *lab.Lab) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(l.Dir, "containerd.toml"))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^\s*plugin_request_timeout\s*=\s*"([^"]+)"`).FindSubmatch(b)
	if m == nil {
		return 2 * time.Second, nil // containerd's default (internal/nri/config.go)
	}
	return time.ParseDuration(string(m[1]))
}

// FaultRecord is one injected fault.
type FaultRecord struct {
	Kind       FaultKind
	Planned    time.Time
	Start, End time.Time
	Param      time.Duration
	Err        error
}

// Injector injects the plan's faults at their times: one at a time, except
// the disk-full ones, which are a condition of their own and may overlap the
// others.
type Injector struct {
	Lab    *lab.Lab
	Plugin *PluginProc
	Disk   *LogDisk
	Logf   func(format string, args ...any)

	mu      sync.Mutex
	records []FaultRecord
	paused  int // containerd pid while SIGSTOPped
}

// Run injects faults (in time order) from start on, until ctx ends.
func (inj *Injector) Run(ctx context.Context, start time.Time, faults []Fault) {
	var disk, other []Fault
	for _, f := range faults {
		if f.Kind == FaultDiskFull {
			disk = append(disk, f)
		} else {
			other = append(other, f)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { inj.sequence(ctx, start, disk) })
	inj.sequence(ctx, start, other)
	wg.Wait()
}

func (inj *Injector) sequence(ctx context.Context, start time.Time, faults []Fault) {
	for _, f := range faults {
		planned := start.Add(f.At)
		if !sleepUntil(ctx, planned) {
			return
		}
		r := FaultRecord{Kind: f.Kind, Planned: planned, Param: f.Param, Start: time.Now()}
		r.Err = inj.inject(ctx, f)
		r.End = time.Now()
		inj.mu.Lock()
		inj.records = append(inj.records, r)
		inj.mu.Unlock()
		if r.Err != nil {
			inj.Logf("fault %s: %v", f.Kind, r.Err)
		} else {
			inj.Logf("fault %s (%s) done in %s", f.Kind, f.Param.Round(time.Millisecond), r.End.Sub(r.Start).Round(time.Millisecond))
		}
	}
}

func (inj *Injector) inject(ctx context.Context, f Fault) error {
	switch f.Kind {
	case FaultContainerdKill:
		if err := inj.Lab.KillContainerd(); err != nil {
			return err
		}
		sleepUntil(ctx, time.Now().Add(f.Param))
		return inj.restartContainerd(context.WithoutCancel(ctx))
	case FaultPluginKill:
		if err := inj.Plugin.Kill9(); err != nil {
			return err
		}
		sleepUntil(ctx, time.Now().Add(f.Param))
		return inj.Plugin.Start()
	case FaultContainerdPause:
		pid := inj.Lab.ContainerdPID()
		if pid <= 0 {
			return errors.New("no containerd pid")
		}
		inj.mu.Lock()
		inj.paused = pid
		inj.mu.Unlock()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP %d: %w", pid, err)
		}
		sleepUntil(ctx, time.Now().Add(f.Param))
		return inj.resume()
	case FaultPluginPause:
		if err := inj.Plugin.Pause(); err != nil {
			return err
		}
		sleepUntil(ctx, time.Now().Add(f.Param))
		return inj.Plugin.Resume()
	case FaultDiskFull:
		if err := inj.Disk.Fill(); err != nil {
			_ = inj.Disk.Free()
			return err
		}
		sleepUntil(ctx, time.Now().Add(f.Param))
		return inj.Disk.Free()
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// restartContainerd starts containerd again, trying a few times: a restart
// that keeps failing leaves the soak without a runtime.
func (inj *Injector) restartContainerd(ctx context.Context) error {
	var err error
	for try := range 5 {
		if _, err = inj.Lab.RestartContainerd(ctx); err == nil {
			return nil
		}
		inj.Logf("containerd restart %d failed: %v", try+1, err)
		time.Sleep(2 * time.Second)
	}
	return fmt.Errorf("containerd does not start again: %w", err)
}

// resume sends SIGCONT to a paused containerd (also at cleanup).
func (inj *Injector) resume() error {
	inj.mu.Lock()
	pid := inj.paused
	inj.paused = 0
	inj.mu.Unlock()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT %d: %w", pid, err)
	}
	return nil
}

// Cleanup undoes a fault the soak was stopped in the middle of.
func (inj *Injector) Cleanup() {
	_ = inj.resume()
	_ = inj.Plugin.Resume()
	if inj.Disk != nil {
		_ = inj.Disk.Free()
	}
}

// Records returns the faults injected so far.
func (inj *Injector) Records() []FaultRecord {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return append([]FaultRecord(nil), inj.records...)
}

// LogDisk is the small file system mounted as the lab's pod log root, so
// that a disk-full fault fills only it: ext4 on a loop device (directories
// need a block there, so kubelet's mkdir of a new pod's log dir fails while
// it is full), or tmpfs where loop devices cannot be used.
type LogDisk struct {
	Dir  string
	Kind string // "ext4 on a loop device, 16 MiB" or "tmpfs, 16 MiB"
	fill string
	mu   sync.Mutex
}

const logDiskSize = 16 << 20

// MountLogDisk mounts a fresh file system on dir (which must be empty),
// its image in img.
func MountLogDisk(dir, img string) (*LogDisk, error) {
	d := &LogDisk{Dir: dir, fill: filepath.Join(dir, ".soak-fill")}
	err := func() error {
		f, err := os.Create(img)
		if err != nil {
			return err
		}
		if err := f.Truncate(logDiskSize); err != nil {
			f.Close()
			return err
		}
		f.Close()
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "1024", "-N", "16384", "-O", "^has_journal", img).CombinedOutput(); err != nil {
			return fmt.Errorf("mkfs.ext4: %v: %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop,nodev,nosuid", img, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("mount -o loop: %v: %s", err, out)
		}
		d.Kind = "ext4 on a loop device, 16 MiB"
		return nil
	}()
	if err != nil {
		_ = os.Remove(img)
		if out, err2 := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m,nodev,nosuid", "tmpfs", dir).CombinedOutput(); err2 != nil {
			return nil, fmt.Errorf("%v; tmpfs instead: %v: %s", err, err2, out)
		}
		d.Kind = "tmpfs, 16 MiB (" + err.Error() + ")"
	}
	return d, nil
}

// Fill writes a file until the file system is full.
func (d *LogDisk) Fill() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(d.fill, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 64 << 10, 4 << 10, 1 << 10, 64} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return err
			}
		}
	}
	return nil
}

// Free removes the fill.
func (d *LogDisk) Free() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Remove(d.fill); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Unmount unmounts the file system (the loop device goes with it).
func (d *LogDisk) Unmount() error {
	_ = d.Free()
	out, err := exec.Command("umount", d.Dir).CombinedOutput()
	if err != nil {
		out2, err2 := exec.Command("umount", "-l", d.Dir).CombinedOutput()
		if err2 != nil {
			return fmt.Errorf("umount %s: %v: %s; lazily: %v: %s", d.Dir, err, strings.TrimSpace(string(out)), err2, out2)
		}
	}
	return nil
}
