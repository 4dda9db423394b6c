package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
)

// PreRegistered reports whether containerd launched this process from its
// NRI plugin directory: it then passes the connection as an inherited fd.
func PreRegistered() bool { return os.Getenv(api.PluginSocketEnvVar) != "" }

// LaunchedAs is the name and index containerd gave a plugin it launched,
// from the plugin's file name (NN-name): the stub registers with these.
func LaunchedAs() (name, index string) {
	return os.Getenv(api.PluginNameEnvVar), os.Getenv(api.PluginIdxEnvVar)
}

// ConnectOptions says how to reach the runtime in external mode.
type ConnectOptions struct {
	SocketPath  string
	PluginName  string
	PluginIndex string
	// MinBackoff and MaxBackoff bound the wait between connection attempts.
	// MaxBackoff stays at or under 1s so the plugin is back within 2s of
	// containerd's NRI socket reappearing. Zero means 100ms and 1s.
	MinBackoff, MaxBackoff time.Duration
	// Dial connects to SocketPath; nil means a plain unix-socket dial.
	Dial func(socketPath string) (net.Conn, error)
	// ConfigureWithin bounds the wait for the runtime's Configure on a new
	// connection (see configureWithin, its default when zero).
	ConfigureWithin time.Duration
}

// Run serves NRI until ctx ends. Pre-registered (launched by containerd), it
// returns when the connection is lost: the inherited fd cannot be redialled
// and containerd relaunches its plugins when it restarts; nil once the
// plugin had registered, an error when it never did. External, it
// reconnects with backoff for as long as ctx lives; every new connection
// starts with a Synchronize, which triggers a fresh listing.
func (p *Plugin) Run(ctx context.Context, opts ConnectOptions) error {
	// The handlers' last lines are written before the caller goes on to
	// exit; a log that does not take them within the bound loses them.
	defer p.log.flush(handlerLogFlush)
	if PreRegistered() {
		c := p.newConnection()
		s, err := stub.New(c, stub.WithOnClose(c.lost), stub.WithLogger(stubLogger{p.log}))
		if err != nil {
			return fmt.Errorf("create NRI stub from the connection containerd passed: %w", err)
		}
		err = p.runStub(ctx, s, c.configured.Load, configureWithin, nil)
		c.lost()
		switch {
		case ctx.Err() != nil:
			return nil
		case p.stats.Registrations.Load() == 0:
			return fmt.Errorf("registering over the NRI connection containerd passed: %w", err)
		}
		// containerd closing the connection it passed is how a launched
		// plugin's life ends (containerd going away; it launches the plugin
		// again when it starts): no error, but said, since a containerd
		// that dropped the plugin and runs on (a request past its NRI
		// timeout) leaves the node without housekeeping until it restarts.
		p.log.log.WithField("reason", fmt.Sprint(err)).Warn("containerd closed the NRI connection it passed: exiting. " +
			"containerd launches the plugin again when it starts; if containerd is still running, it dropped the plugin (see its log), and housekeeping stops until containerd restarts")
		return nil
	}

	stubOpts := []stub.Option{
		stub.WithPluginName(opts.PluginName),
		stub.WithPluginIdx(opts.PluginIndex),
		stub.WithSocketPath(opts.SocketPath),
		stub.WithLogger(stubLogger{p.log}),
	}
	dial := opts.Dial
	if dial == nil {
		dial = func(path string) (net.Conn, error) { return net.Dial("unix", path) }
	}
	// A new stub for every attempt: nri's stub (v0.12.5) keeps its
	// connection when registration fails on it (its close is a no-op
	// until it has started), and every later Run reuses the dead
	// connection: "ttrpc: closed" forever. The chaos soak found it: a
	// plugin paused past containerd's NRI timeout, resumed while
	// containerd restarted, never reconnected.
	newStub := func() (stub.Stub, *connection, *dialedConn, error) {
		c, d := p.newConnection(), &dialedConn{dial: dial}
		s, err := stub.New(c, append(stubOpts, stub.WithOnClose(c.lost), stub.WithDialer(d.Dial))...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("create NRI stub %s-%s: %w", opts.PluginIndex, opts.PluginName, err)
		}
		return s, c, d, nil
	}
	if _, _, _, err := newStub(); err != nil {
		return err // a bad name or index: no attempt can succeed
	}
	within := opts.ConfigureWithin
	if within <= 0 {
		within = configureWithin
	}
	minWait, maxWait := opts.MinBackoff, opts.MaxBackoff
	if minWait <= 0 {
		minWait = 100 * time.Millisecond
	}
	if maxWait < minWait {
		maxWait = max(minWait, time.Second)
	}
	log := p.log.log.WithField("socket", opts.SocketPath)
	wait := minWait
	failures := 0
	for {
		s, c, conn, err := newStub()
		if err != nil {
			return err
		}
		err = p.runStub(ctx, s, c.configured.Load, within, func() bool {
			if !c.configure.CompareAndSwap(configureAwaited, configureLeftBehind) {
				return false // the runtime's Configure is being handled
			}
			if made := conn.Close(); made {
				releaseStub(s)
			} // else the dial fails: Start ends without a wait to release
			return true
		})
		c.lost()
		if ctx.Err() != nil {
			return nil
		}
		if c.configured.Load() {
			// A session ran; it ended because the runtime went away.
			log.WithError(err).Warn("NRI connection lost, reconnecting")
			wait, failures = minWait, 0
		} else {
			failures++
			fields := log.WithError(err).WithField("attempts", failures)
			switch {
			case failures == 1 && p.stats.Registrations.Load() == 0:
				fields.Warn("cannot connect to NRI yet: is containerd running with NRI enabled " +
					"(containerd 2.x: on by default; 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false)? retrying")
			case failures%60 == 0:
				fields.Warn("still cannot connect to NRI, retrying")
			default:
				fields.Debug("NRI connection attempt failed")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxWait)
	}
}

// configureWithin is how long a connection may go without containerd's
// Configure. containerd sends it as soon as it has answered RegisterPlugin,
// and drops a plugin that has not registered within its registration
// timeout (5 s by default). nri's stub (v0.12.5) waits for Configure holding
// its lock and ignoring ctx, and its close callback needs that lock: a
// runtime that closes the connection in between (containerd restarting, or
// its registration timeout firing as it answers) leaves the stub waiting
// for ever (containerd/nri#298), and with it the plugin's reconnects and
// its shutdown. The watchdog leaves such a stub behind and releases it
// (releaseStub).
const configureWithin = 15 * time.Second

// runStub runs s until it returns or ctx ends, or, when its connection was
// not configured within within, leaves it behind after abandon (if set)
// closes its connection and releases it. abandon says false when the
// runtime's Configure is being handled: the watchdog then waits on.
func (p *Plugin) runStub(ctx context.Context, s stub.Stub, configured func() bool, within time.Duration, abandon func() bool) error {
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	watchdog := time.NewTimer(within)
	defer watchdog.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-watchdog.C:
			if configured() {
				continue // the session runs until it ends
			}
			if abandon != nil && !abandon() {
				watchdog.Reset(within)
				continue
			}
			return fmt.Errorf("the runtime sent no Configure within %s of the connection: left it and its stub behind", within)
		}
	}
}

// releaseStub ends the wait of a stub left behind for its Configure
// (containerd/nri#298), which otherwise keeps its Start, its close
// callback and its ttrpc server's goroutines for the life of the process,
// one set per connection left behind. The stub's own Configure method,
// called as the runtime would call it, hands Start the answer it waits
// for (the connection's handler, marked left behind, accepts nothing);
// Start returns, the close callback gets the stub's lock and closes what
// is left, and the stub's Run returns.
func releaseStub(s stub.Stub) {
	r, ok := s.(interface {
		Configure(context.Context, *api.ConfigureRequest) (*api.ConfigureResponse, error)
	})
	if !ok {
		return
	}
	// An NRI version set: the stub infers none (and warns of none).
	go func() {
		_, _ = r.Configure(context.Background(), &api.ConfigureRequest{RuntimeName: "none (left behind)", NRIVersion: "left-behind"})
	}()
}

// dialedConn dials the NRI socket for one stub and keeps the connection, so
// that a stub left behind can be cut off from the runtime.
type dialedConn struct {
	dial   func(string) (net.Conn, error)
	mu     sync.Mutex
	conn   net.Conn
	closed bool // left behind: a dial that ends after it is refused
}

func (d *dialedConn) Dial(path string) (net.Conn, error) {
	c, err := d.dial(path)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = c.Close()
		return nil, errors.New("connected after the connection attempt was left behind")
	}
	d.conn = c
	return c, nil
}

// Close closes the connection, and any made later; made says whether one
// was made before.
func (d *dialedConn) Close() (made bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.conn != nil {
		_ = d.conn.Close()
	}
	return d.conn != nil
}

// stubLogger routes the NRI stub's own messages into our logger, without
// waiting for it (the stub logs on its request path too); its informational
// chatter (one line per connection step) goes to debug.
type stubLogger struct{ log *handlerLog }

func (l stubLogger) Debugf(_ context.Context, format string, args ...any) {
	l.log.say(logrus.DebugLevel, nil, nil, fmt.Sprintf("nri: "+format, args...))
}

func (l stubLogger) Infof(_ context.Context, format string, args ...any) {
	l.log.say(logrus.DebugLevel, nil, nil, fmt.Sprintf("nri: "+format, args...))
}

func (l stubLogger) Warnf(_ context.Context, format string, args ...any) {
	l.log.say(logrus.WarnLevel, nil, nil, fmt.Sprintf("nri: "+format, args...))
}

func (l stubLogger) Errorf(_ context.Context, format string, args ...any) {
	l.log.say(logrus.ErrorLevel, nil, nil, fmt.Sprintf("nri: "+format, args...))
}
