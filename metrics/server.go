package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server timeouts. A scrape gathers in milliseconds; the limits only stop
// a slow or stuck client from holding a connection (and a goroutine) open.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	gatherTimeout     = 20 * time.Second // below writeTimeout: the client gets a 503, not a cut connection
	shutdownTimeout   = 5 * time.Second
	maxHeaderBytes    = 16 << 10
	maxScrapes        = 4 // concurrent /metrics requests; more get a 503
)

// Health is what /healthz and /readyz ask, on each request. The functions
// must be cheap and safe for concurrent use.
type Health struct {
	// LastPass returns the end of the last finished housekeeping pass (any
	// result), or the start of the latest step of the pass under way if
	// later (a pass reclaiming a mass leak takes minutes, and makes
	// progress); zero if none yet.
	LastPass func() time.Time
	// Period is housekeeping.period. /healthz fails when no pass finished,
	// and no step started, within 3 periods.
	Period time.Duration
	// StartupDelay is housekeeping.startup_delay: before the first pass,
	// /healthz fails only once the process is older than StartupDelay plus
	// 3 periods, since the first pass waits that long by design.
	StartupDelay time.Duration
	// LongestStep is the longest one step may take by its own timeouts
	// (an orphan stop: orphans.stop_timeout and runtime.rpc_timeout; a CNI
	// DEL waiting for another in its namespace, then running): a
	// pass waiting on it makes no progress, yet is not stuck, so it is
	// added to the 3 periods.
	LongestStep time.Duration
	// Ready returns nil when the sources are ready and NRI is connected,
	// else why not.
	Ready func() error
}

// stalePeriods is how many periods without a finished pass make the loop
// count as dead: one slow pass or a missed wake-up is not enough.
const stalePeriods = 3

// alive is /healthz's verdict at now for a process started at started.
func (h Health) alive(now, started time.Time) error {
	// Saturated, not overflowed: any period of at least a second is valid,
	// and three of a huge one would wrap to a negative limit.
	limit := h.LongestStep
	for range stalePeriods {
		limit = saturatingAdd(limit, h.Period)
	}
	last := h.LastPass()
	if last.IsZero() {
		limit = saturatingAdd(limit, h.StartupDelay)
		if age := now.Sub(started); age > limit {
			return fmt.Errorf("no housekeeping pass finished since start-up %s ago (limit %s)", age.Round(time.Millisecond), limit)
		}
		return nil
	}
	if since := now.Sub(last); since > limit {
		return fmt.Errorf("no housekeeping pass finished, and no step of one started, for %s (limit %s: %d periods and the longest step)", since.Round(time.Millisecond), limit, stalePeriods)
	}
	return nil
}

// saturatingAdd is a+b for non-negative durations, at most the longest
// duration.
func saturatingAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Server is a bound, not yet serving, metrics endpoint (Listen). Binding
// first lets start-up fail at once on a bad or busy address.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (metrics.address) and prepares the /metrics, /healthz
// and /readyz handlers; every other path is 404. An empty addr is an error:
// it means metrics are disabled, and net.Listen would otherwise bind a
// random port on every interface.
func (m *Metrics) Listen(ctx context.Context, addr string, h Health) (*Server, error) {
	if addr == "" {
		return nil, errors.New("metrics: empty metrics.address (metrics are disabled)")
	}
	if h.LastPass == nil || h.Ready == nil || h.Period <= 0 {
		return nil, errors.New("metrics: Health needs LastPass, Ready and a positive Period")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: metrics.address %q: %w", addr, err)
	}

	mux := http.NewServeMux()
	// "GET " patterns also match HEAD; other methods get 405.
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: maxScrapes,
		Timeout:             gatherTimeout,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeCheck(w, h.alive(time.Now(), m.started))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		writeCheck(w, h.Ready())
	})

	return &Server{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}}, nil
}

// writeCheck answers a health check: 200 "ok", or 503 with the reason.
func writeCheck(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Addr is the bound address (the actual port when addr asked for port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends, then shuts down gracefully (in-flight
// requests get a few seconds) and returns nil. It returns an error if
// serving fails. Call it once.
func (s *Server) Serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()

	select {
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil // Close was called
		}
		return fmt.Errorf("metrics: serving on %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}

	// ctx is done: shut down with a fresh deadline, not ctx's.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close() // the shutdown error is the one worth returning
		<-served
		return fmt.Errorf("metrics: shutting down %s: %w", s.Addr(), err)
	}
	<-served // http.ErrServerClosed
	return nil
}

// Close stops the server at once, or releases the address of a Server that
// was never served (start-up failed after Listen).
func (s *Server) Close() error {
	err := s.srv.Close()
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("metrics: closing %s: %w", s.Addr(), err)
	}
	return nil
}

// Serve listens on addr and serves /metrics, /healthz and /readyz until ctx
// ends. An empty addr (metrics disabled) returns nil at once. Use Listen
// and Server.Serve to fail start-up on a busy address before anything
// else starts.
func (m *Metrics) Serve(ctx context.Context, addr string, h Health) error {
	if addr == "" {
		return nil
	}
	s, err := m.Listen(ctx, addr, h)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}
