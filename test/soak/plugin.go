package soak

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PluginProc is the plugin binary, run as a process of its own in external
// mode, so that it can be killed with SIGKILL and started again; every run
// appends to the same log file (log.target = "file") and stderr file.
type PluginProc struct {
	Exe, Config string
	Stderr      string // stdout and stderr of every run
	Addr        string // metrics.address
	Logf        func(format string, args ...any)

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{}
	run        int
	starts     []time.Time
	expecting  bool // a kill or stop is on its way: the exit is ours
	stopped    bool // no automatic restart any more
	kills      int
	paused     *exec.Cmd // the run SIGSTOPped by Pause
	unexpected []string
}

// FreeAddr returns a free 127.0.0.1 port.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start starts a new run of the plugin.
func (p *PluginProc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("plugin run %d still running", p.run)
	}
	out, err := os.OpenFile(p.Stderr, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Exe, "run", "--config", p.Config)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and killed if the soak dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	p.run++
	p.starts = append(p.starts, time.Now())
	p.cmd, p.done, p.expecting, p.stopped = cmd, make(chan struct{}), false, false
	run, done := p.run, p.done
	go func() {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		expected, stopped := p.expecting, p.stopped
		if !expected {
			msg := fmt.Sprintf("plugin run %d (pid %d) exited by itself at %s: %v", run, cmd.Process.Pid, stamp(time.Now()), err)
			p.unexpected = append(p.unexpected, msg)
			p.Logf("%s", msg)
		}
		p.cmd = nil
		close(done)
		p.mu.Unlock()
		if !expected && !stopped {
			// Keep the soak going (the exit already fails it).
			time.Sleep(time.Second)
			if err := p.Start(); err != nil {
				p.Logf("restarting the plugin: %v", err)
			}
		}
	}()
	return nil
}

// Kill9 kills the running plugin with SIGKILL and waits until it is gone.
func (p *PluginProc) Kill9() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return fmt.Errorf("plugin not running")
	}
	p.expecting = true
	p.kills++
	p.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-done
	return nil
}

// Pause stops the running plugin with SIGSTOP.
func (p *PluginProc) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("plugin not running")
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.paused = p.cmd
	return nil
}

// Resume continues a paused plugin (SIGCONT); nothing when none is paused.
func (p *PluginProc) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := p.paused
	p.paused = nil
	if cmd == nil || cmd != p.cmd {
		return nil
	}
	return cmd.Process.Signal(syscall.SIGCONT)
}

// Stop stops the plugin with SIGTERM (SIGKILL after 15 s) and does not
// restart it.
func (p *PluginProc) Stop() {
	_ = p.Resume()
	p.mu.Lock()
	p.stopped = true
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.expecting = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Run is the number of the current run (1 for the first), 0 if not running.
func (p *PluginProc) Run() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.run
}

// Starts are the start times of every run.
func (p *PluginProc) Starts() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.starts...)
}

// Unexpected lists the runs that exited by themselves.
func (p *PluginProc) Unexpected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unexpected...)
}

// Kills is how many SIGKILLs the soak sent.
func (p *PluginProc) Kills() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kills
}

// Get fetches a path of the metrics server: the status and body (0 and the
// error when nothing answers).
func (p *PluginProc) Get(path string) (int, string) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + p.Addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Sample is one scrape of the plugin's /metrics and /healthz.
type Sample struct {
	At         time.Time
	Run        int
	RSS        float64 // bytes
	Goroutines float64
	CPU        float64            // seconds
	Passes     map[string]float64 // by result
	PassSum    float64            // seconds spent in passes
	PassCount  float64
	Healthz    int
}

// TotalPasses sums the passes of every result.
func (s Sample) TotalPasses() float64 {
	n := 0.0
	for _, v := range s.Passes {
		n += v
	}
	return n
}

// Scrape samples the running plugin; ok is false when it is not running or
// was restarted during the scrape.
func (p *PluginProc) Scrape() (Sample, bool) {
	run := p.Run()
	if run == 0 {
		return Sample{}, false
	}
	s := Sample{At: time.Now(), Run: run, Passes: map[string]float64{}}
	code, body := p.Get("/metrics")
	if code != http.StatusOK {
		return Sample{}, false
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return Sample{}, false
	}
	gauge := func(name string) float64 {
		f := families[name]
		if f == nil || len(f.GetMetric()) == 0 {
			return -1
		}
		m := f.GetMetric()[0]
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		}
		return -1
	}
	s.RSS = gauge("process_resident_memory_bytes")
	s.Goroutines = gauge("go_goroutines")
	s.CPU = gauge("process_cpu_seconds_total")
	if f := families["nri_housekeeper_passes_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					s.Passes[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if f := families["nri_housekeeper_pass_duration_seconds"]; f != nil && len(f.GetMetric()) > 0 {
		h := f.GetMetric()[0].GetHistogram()
		s.PassSum, s.PassCount = h.GetSampleSum(), float64(h.GetSampleCount())
	}
	s.Healthz, _ = p.Get("/healthz")
	if p.Run() != run {
		return Sample{}, false
	}
	return s, true
}

// WaitReady waits until /readyz answers 200.
func (p *PluginProc) WaitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		code, body := p.Get("/readyz")
		if code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz is %d after %s: %s", code, within, strings.TrimSpace(body))
		}
		if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
			return ctx.Err()
		}
	}
}
