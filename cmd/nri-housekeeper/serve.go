package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/metrics"
	"github.com/nri-housekeeper/nri-housekeeper/nodefs"
	"github.com/nri-housekeeper/nri-housekeeper/plugin"
	"github.com/nri-housekeeper/nri-housekeeper/podnet"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
)

// preRegisteredSource names the configuration containerd passes to Configure.
const preRegisteredSource = "containerd plugin config"

// serve wires the plugin together and runs it until ctx ends, a signal
// stops it (stopOnSignal, whose second signal exits through exit) or, when
// containerd launched it, until containerd goes away.
func serve(ctx context.Context, cfg config.Config, source string, stderr io.Writer, exit func(code int)) int {
	preRegistered := plugin.PreRegistered()
	var log *logrus.Logger
	closeLog := func() error { return nil }
	defer func() { _ = closeLog() }()
	var held *logging.Held
	if preRegistered {
		// Its [log] section comes from containerd, after registering: until
		// then its lines are kept, and go where that section says.
		log, held = logging.NewHeld()
	} else {
		// Assigned only once it worked: a failed New returns no closer,
		// and the deferred call would panic.
		l, closer, err := logging.New(logOptions(cfg, stderr))
		if err != nil {
			fmt.Fprintf(stderr, "nri-housekeeper: %v\n", err)
			return 2
		}
		log, closeLog = l, closer
	}
	// Here, once there is a log to say the signal in; stopped after Close
	// (deferred below, so run first) wrote the state file.
	ctx, stop := stopOnSignal(ctx, "nri-housekeeper", log, stderr, exit)
	defer stop()

	state := podstate.New(0)
	waker := &loopWaker{}
	configured := make(chan config.Config, 1)
	var rejected atomic.Bool // the configuration containerd passed could not be used, and was refused
	initial := cfg           // a launched plugin's: what it logs with until it is configured
	// release points a launched plugin's held logger at its target (the
	// configured one, or nil: the initial one) once, from the NRI
	// handler's goroutine (reject) or this one.
	var releaseOnce sync.Once
	release := func(configured *logging.Options) {
		releaseOnce.Do(func() { closeLog = releaseHeld(log, held, configured, logOptions(initial, stderr)) })
	}
	var configure plugin.ConfigFunc
	if preRegistered {
		// reject says why before the refusal goes back to containerd: it
		// kills a launched plugin right after a Configure failed (nri
		// v0.12.5 adaptation, plugin.start), and nri's stub closes the
		// connection as it answers (containerd may log only "ttrpc:
		// closed"), so a line said later, or held, dies with the process.
		reject := func(err error) error {
			rejected.Store(true)
			release(nil)
			log.WithError(err).Error("the configuration containerd passed cannot be used, and is refused: containerd runs on without this plugin until it restarts; fix the plugin's conf.d file")
			return err
		}
		configure = func(text string) error {
			c := config.Default()
			if strings.TrimSpace(text) != "" {
				var err error
				if c, err = config.Parse([]byte(text), preRegisteredSource); err != nil {
					return reject(err)
				}
			}
			// The log target is tried here, where a refusal still reaches
			// containerd: found unusable once the plugin runs, it would
			// leave the plugin logging elsewhere than configured, acting
			// (run in external mode exits 2 on it). Only journald and file
			// can fail; auto and stderr fall back, saying so (once, when
			// set up for real).
			if t := c.Log.Target; t == config.TargetJournald || t == config.TargetFile {
				_, closeTried, err := logging.New(logOptions(c, stderr))
				if err != nil {
					return reject(fmt.Errorf("%s: [log]: %w", preRegisteredSource, err))
				}
				_ = closeTried()
			}
			select {
			case configured <- c:
			default: // containerd configures a launched plugin once
			}
			return nil
		}
	}
	nri := plugin.New(state, waker, log, configure)
	// Metrics exist from the start so no NRI event goes uncounted; they are
	// served once the configuration (with metrics.address) is known.
	m := metrics.New(metrics.BuildInfo{Version: version, GoVersion: goruntime.Version(), NRIVersion: moduleVersion("github.com/containerd/nri")})
	nri.SetObserver(m)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nriDone := make(chan error, 1)
	go func() {
		nriDone <- nri.Run(ctx, plugin.ConnectOptions{
			SocketPath: cfg.NRI.Socket, PluginName: cfg.NRI.PluginName, PluginIndex: cfg.NRI.PluginIndex,
		})
	}()

	mode := "external"
	if preRegistered {
		mode = "pre-registered"
		select {
		case cfg = <-configured:
			source = preRegisteredSource
		case err := <-nriDone:
			release(nil) // a no-op after reject's; waits for it to end
			switch {
			case rejected.Load():
				return 2 // said by reject
			case err == nil:
				return 0 // registered, then containerd closed the connection: said by Run
			}
			log.WithError(err).Error("NRI registration with containerd failed")
			return 1
		case <-ctx.Done():
			release(nil)
			return 0
		}
		opts := logOptions(cfg, stderr)
		release(&opts)
	}
	m.SetPeriod(cfg.Housekeeping.Period)
	log.WithFields(logrus.Fields{
		"version": version, "mode": mode, "config": source, "dry_run": cfg.DryRun,
		"period": cfg.Housekeeping.Period.String(), "runtime": cfg.Runtime.Endpoint,
	}).Info("nri-housekeeper starting")
	for _, n := range cfg.Notices {
		log.Warn(n)
	}
	if preRegistered {
		name, index := plugin.LaunchedAs()
		for _, n := range unusedNameKeys(cfg, name, index) {
			log.Warn(n)
		}
	}

	if cfg.Cgroups.Enabled && os.Getpid() == 1 {
		// PID 1 means a PID namespace of our own (a pod without hostPID):
		// the processes in pod cgroups have host PIDs we cannot signal.
		log.Warn("running as PID 1, so not in the host PID namespace: processes in orphaned pod cgroups cannot be killed " +
			"(run the DaemonSet with hostPID: true, or set cgroups.enabled = false)")
	}
	if cfg.Network.Enabled {
		if problem := execRootProblem(cfg.Network.ExecRoot, os.Getpid(), canChroot()); problem != "" {
			log.Warn(problem)
		}
	}
	client, err := cri.Dial(cfg.Runtime.Endpoint, cfg.Runtime.RPCTimeout, cri.WithObserver(m.ObserveCRICall))
	if err != nil {
		log.WithError(err).Error("cannot use the CRI endpoint; check runtime.endpoint")
		return 2
	}
	defer client.Close()
	if name, ver, err := client.Version(ctx); err != nil {
		entry := log.WithError(err).WithField("endpoint", cfg.Runtime.Endpoint)
		switch {
		case ctx.Err() != nil:
			// Stopped while asking: the stop, said already, not a fault.
		case preRegistered:
			// containerd launches its plugins before its CRI serves: expected.
			entry.Info("CRI runtime not reachable yet (containerd is still starting); housekeeping retries")
		default:
			entry.Warn("CRI runtime not reachable yet: containerd may still be starting, or runtime.endpoint is not its socket; housekeeping retries")
		}
	} else {
		log.WithFields(logrus.Fields{"runtime_name": name, "runtime_version": ver}).Info("CRI runtime reachable")
	}

	network := housekeeping.NetworkFromConfig(cfg, client)
	exec, err := newExecutor(cfg, client, network, log)
	if err != nil {
		log.WithError(err).Error("cannot set up housekeeping")
		return 2
	}
	opts := housekeeping.OptionsFromConfig(cfg)
	opts.Synchronized, opts.Executor, opts.Observer, opts.Network = nri.Synchronized, exec, m, network
	opts.PodDirMountsUnseen = housekeeping.PodDirMountsUnseenBy(client.PeerPID, cfg.Pods.KubeletRoot)
	loop := housekeeping.New(state, client, opts, log)
	loop.Restore(ctx) // takes the state file's lock: one plugin per state file
	defer func() { _ = loop.Close() }()
	waker.loop.Store(loop)
	go watchTaskExits(ctx, func(ctx context.Context) error { return client.WatchTaskExits(ctx, cfg.Runtime.Namespace, loop.Wake) }, log, time.After)
	if cfg.Metrics.Address != "" {
		srv, err := m.Listen(ctx, cfg.Metrics.Address, metrics.Health{
			LastPass: loop.LastProgress, Period: cfg.Housekeeping.Period, StartupDelay: cfg.Housekeeping.StartupDelay,
			LongestStep: longestStep(cfg),
			Ready:       func() error { return readiness(nri, loop) },
		})
		if err != nil {
			log.WithError(err).Error("cannot serve metrics; set metrics.address to a free address, or \"\" to disable")
			return 2
		}
		log.WithField("address", srv.Addr().String()).Info("serving /metrics, /healthz and /readyz")
		go func() {
			if err := srv.Serve(ctx); err != nil && ctx.Err() == nil {
				log.WithError(err).Error("metrics server stopped: /metrics, /healthz and /readyz are not served until the plugin restarts")
			}
		}()
	}
	loopDone := make(chan error, 1)
	go func() { loopDone <- loop.Run(ctx) }()

	select {
	case err := <-nriDone:
		cancel()
		<-loopDone
		if err != nil {
			log.WithError(err).Error("exiting")
			return 1
		}
	case <-ctx.Done():
		<-nriDone
		<-loopDone
	}
	log.Info("nri-housekeeper stopped")
	return 0
}

// execRootProblem says why network.exec_root will not give CNI plugins the
// node's root ("" when nothing is wrong that can be seen at start).
func execRootProblem(execRoot string, pid int, chroot bool) string {
	if execRoot == "" {
		return ""
	}
	if !chroot {
		return fmt.Sprintf("network.exec_root %s cannot be used: CNI plugins are chrooted into it, and this process lacks CAP_SYS_CHROOT "+
			"(the systemd unit drops it and filters chroot(2): it runs in the node's root already), so every CNI DEL fails; "+
			"set network.exec_root = \"\", or grant CAP_SYS_CHROOT", execRoot)
	}
	if pid == 1 && filepath.Clean(execRoot) == "/proc/1/root" {
		return "network.exec_root /proc/1/root is this process's own root, not the node's: it runs as PID 1, so not in the host PID " +
			"namespace, and CNI plugins run in the image, without the node's iptables (run the DaemonSet with hostPID: true)"
	}
	if fi, err := os.Stat(execRoot); err != nil {
		return fmt.Sprintf("network.exec_root %s cannot be used (%v): every CNI DEL fails until it can "+
			"(/proc/1/root needs hostPID and CAP_SYS_PTRACE), or set network.exec_root = \"\"", execRoot, err)
	} else if !fi.IsDir() {
		return fmt.Sprintf("network.exec_root %s is not a directory: every CNI DEL fails until it is, or set network.exec_root = \"\"", execRoot)
	}
	return ""
}

// canChroot reports whether this process has CAP_SYS_CHROOT in its
// effective set (/proc/self/status CapEff); true when that cannot be read,
// so that nothing is said on a guess.
func canChroot() bool {
	const capSysChroot = 18
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || caps&(1<<capSysChroot) != 0
		}
	}
	return true
}

// newExecutor builds the executor over the CRI client, the log roots and
// the network side (nil when network.enabled is false).
func newExecutor(cfg config.Config, client *cri.Client, network *housekeeping.Network, log logrus.FieldLogger) (*executor.Executor, error) {
	podLogs, err := nodefs.NewRemover(cfg.Logs.PodLogsDir)
	if err != nil {
		return nil, fmt.Errorf("logs.pod_logs_dir: %w", err)
	}
	links, err := nodefs.NewRemover(cfg.Logs.ContainerLogsDir)
	if err != nil {
		return nil, fmt.Errorf("logs.container_logs_dir: %w", err)
	}
	node := executor.Node{PodLogs: podLogs, Links: links, KubeletRoot: cfg.Pods.KubeletRoot}
	if network != nil {
		node.Network = network
	}
	return executor.New(client, node, executor.Options{MaxParallel: cfg.Housekeeping.MaxParallel, DryRun: cfg.DryRun}, log), nil
}

// taskExitFailuresSaid is how many subscriptions in a row that end within
// a minute are a failure worth a warning (one containerd restart ends one).
const taskExitFailuresSaid = 3

// watchTaskExits wakes the loop on every containerd task exit: a sandbox's
// pause process dying produces no NRI event. It resubscribes with backoff
// when containerd restarts, and says so when it keeps failing.
func watchTaskExits(ctx context.Context, subscribe func(context.Context) error, log logrus.FieldLogger, after func(time.Duration) <-chan time.Time) {
	wait, failing := time.Second, 0
	for {
		start := time.Now()
		err := subscribe(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			// It served: a containerd restart ends it, and that is no news.
			if failing >= taskExitFailuresSaid {
				log.Info("containerd task-exit subscription works again: task exits wake housekeeping early again")
			}
			wait, failing = time.Second, 0
		} else {
			failing++
		}
		entry := log.WithError(err).WithField("attempts", failing)
		if failing == taskExitFailuresSaid {
			entry.Warn("containerd task-exit subscription keeps failing: a task exit no longer starts a pass early (passes still run every housekeeping.period); retrying every 10s")
		} else {
			entry.Debug("containerd task-exit subscription ended; resubscribing")
		}
		select {
		case <-ctx.Done():
			return
		case <-after(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// readiness is /readyz: NRI connected and every housekeeping source ready.
func readiness(nri *plugin.Plugin, loop *housekeeping.Loop) error {
	if !nri.Connected() {
		return errors.New("not connected to containerd over NRI")
	}
	if why := loop.NotReady(); why != "" {
		return errors.New(why)
	}
	return nil
}

// loopWaker forwards NRI wake-ups to the loop once it exists: in
// pre-registered mode NRI synchronizes before the configuration that the
// loop needs has been read. The loop's first pass covers anything missed.
type loopWaker struct {
	loop atomic.Pointer[housekeeping.Loop]
}

func (w *loopWaker) Resync() {
	if l := w.loop.Load(); l != nil {
		l.Resync()
	}
}

func (w *loopWaker) Wake() {
	if l := w.loop.Load(); l != nil {
		l.Wake()
	}
}

// longestStep is the longest one step may take by its own timeouts, with
// nothing else started meanwhile: a container stop (the orphan stop's
// timeout or an UNKNOWN container's, and the RPC), a sandbox removal, or a
// CNI DEL or reservation release, which may first wait its turn behind
// another in the same namespace (or for host-local's lock), each bounded by
// podnet.StepTimeout.
func longestStep(cfg config.Config) time.Duration {
	d := max(max(cfg.Orphans.StopTimeout, gc.UnknownStopMaxGrace)+cfg.Runtime.RPCTimeout, cri.RemoveSandboxTimeout(cfg.Runtime.RPCTimeout))
	if cfg.Network.Enabled {
		d = max(d, 2*podnet.StepTimeout)
	}
	return d
}

func logOptions(cfg config.Config, stderr io.Writer) logging.Options {
	return logging.Options{Level: cfg.Log.Level, Target: cfg.Log.Target, File: cfg.Log.File, Stderr: stderr}
}

// releaseHeld points the held logger at the configured target (nil: none
// came), or at the default one when that cannot be set up or none came,
// then writes there what was held, and returns what closes the target.
func releaseHeld(log *logrus.Logger, held *logging.Held, configured *logging.Options, fallback logging.Options) func() error {
	var configErr error
	if configured != nil {
		closeFn, err := reconfigureLogger(log, *configured)
		if err == nil {
			held.Release(log)
			return closeFn
		}
		configErr = err
	}
	closeFn, err := reconfigureLogger(log, fallback)
	if err != nil {
		// Nothing better is possible than stderr, even discarded.
		log.ReplaceHooks(logrus.LevelHooks{})
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
		out := fallback.Stderr
		if out == nil {
			out = os.Stderr
		}
		log.SetOutput(out)
		log.SetLevel(logrus.InfoLevel)
		closeFn = func() error { return nil }
	}
	held.Release(log)
	if err != nil {
		log.WithError(err).Error("cannot set up logging; logging to stderr")
	}
	if configErr != nil {
		log.WithError(configErr).Error("cannot set up logging as configured; keeping the default target")
	}
	return closeFn
}

// reconfigureLogger points an existing logger (already handed to the NRI
// side) at the configured target.
func reconfigureLogger(log *logrus.Logger, opts logging.Options) (func() error, error) {
	configured, closeFn, err := logging.New(opts)
	if err != nil {
		return nil, err
	}
	// Output first, hooks last: a line logged meanwhile (an NRI handler's)
	// still finds the hook that holds lines, or the new hooks; with the
	// hooks replaced first it went to the held logger's discarded output.
	// At worst it is written twice (here, and again when held lines are
	// released), never lost.
	log.SetLevel(configured.GetLevel())
	log.SetFormatter(configured.Formatter)
	log.SetOutput(configured.Out)
	log.ReplaceHooks(configured.Hooks)
	return closeFn, nil
}

// unusedNameKeys says which of nri.plugin_name and nri.plugin_index a
// launched plugin's configuration sets to no effect: containerd names a
// plugin it launches after its file (NN-name), and that is what registers.
// A key left at its default is not said (the file may be 20-nri-housekeeper
// with the defaults): only a value someone chose that is not the file's.
func unusedNameKeys(cfg config.Config, name, index string) []string {
	def := config.Default().NRI
	file := index + "-" + name
	var out []string
	if v := cfg.NRI.PluginName; v != def.PluginName && v != name {
		out = append(out, fmt.Sprintf("nri.plugin_name = %q is not used: containerd launched this plugin from its file %s, whose name it registers with; "+
			"rename the file (and its conf.d file with it) to change it", v, file))
	}
	if v := cfg.NRI.PluginIndex; v != def.PluginIndex && v != index {
		out = append(out, fmt.Sprintf("nri.plugin_index = %q is not used: containerd launched this plugin from its file %s, whose index it registers with; "+
			"rename the file (and its conf.d file with it) to change it", v, file))
	}
	return out
}
