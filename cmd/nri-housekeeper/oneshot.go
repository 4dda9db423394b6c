package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/cri"
	"github.com/nri-housekeeper/nri-housekeeper/executor"
	"github.com/nri-housekeeper/nri-housekeeper/housekeeping"
	"github.com/nri-housekeeper/nri-housekeeper/logging"
	"github.com/nri-housekeeper/nri-housekeeper/podstate"
	"github.com/nri-housekeeper/nri-housekeeper/report"
)

// oneShot is the report and once commands: one fresh listing and plan,
// printed (report) or executed (once). Neither connects to NRI and neither
// has grace clocks (the state file keeps only the pods the plugin saw torn
// down and the budgeted steps of the last hour), so leak_grace counts
// from now: with the default grace they
// show what would be due, not act; --leak-grace 0s acts on the listing as
// it is (once) or shows it all as due (report).
func oneShot(cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	configPath := fs.String("config", "", "the TOML configuration `FILE`; built-in defaults when not given")
	grace := fs.String("leak-grace", "", "override housekeeping.leak_grace with `D`, a duration (e.g. 0s: no history is kept between runs, so grace counts from now)")
	asJSON, dryRun := false, false
	if cmd == "report" {
		fs.BoolVar(&asJSON, "json", false, "print JSON instead of tables")
	}
	if cmd == "once" {
		fs.BoolVar(&dryRun, "dry-run", false, "take no step, whatever the configuration says: log and count what would be done (as dry_run = true)")
	}
	if code, done := parseFlags(fs, args, stdout, stderr); done {
		return code
	}
	cfg := config.Default()
	if *configPath != "" {
		c, err := config.Load(*configPath)
		if err != nil {
			fmt.Fprintf(stderr, "nri-housekeeper %s: %v\n", cmd, err)
			return 2
		}
		cfg = c
	}
	if *grace != "" {
		d, err := time.ParseDuration(*grace)
		if err != nil || d < 0 {
			fmt.Fprintf(stderr, "nri-housekeeper %s: --leak-grace %q: want a duration such as 0s or 5m\n", cmd, *grace)
			return 2
		}
		cfg.Housekeeping.LeakGrace = d
	}
	if dryRun {
		cfg.DryRun = true // only ever on: a flag cannot make a dry-run configuration act
	}
	// The commands print to stdout; logs (and once's action lines) go to stderr.
	logOpts := logOptions(cfg, stderr)
	logOpts.Target = logging.TargetStderr
	// report acts on nothing: a 2>/dev/null is its user's choice. once
	// acts, and what it does is logged to the log file then.
	logOpts.StderrAsGiven = cmd == "report"
	log, closeLog, err := logging.New(logOpts)
	if err != nil {
		fmt.Fprintf(stderr, "nri-housekeeper %s: %v\n", cmd, err)
		return 2
	}
	defer func() { _ = closeLog() }()
	for _, n := range cfg.Notices { // deprecated keys, and what they do here
		log.Warn(n)
	}
	// Stopped after Close (deferred below, so run first) wrote the state
	// file: a second signal while it writes still exits at once.
	ctx, stop := stopOnSignal(context.Background(), "nri-housekeeper "+cmd, log, stderr, os.Exit)
	defer stop()

	client, err := cri.Dial(cfg.Runtime.Endpoint, cfg.Runtime.RPCTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "nri-housekeeper %s: %v\n", cmd, err)
		return 2
	}
	defer client.Close()
	opts := housekeeping.OptionsFromConfig(cfg)
	opts.StartupDelay = 0
	opts.Network = housekeeping.NetworkFromConfig(cfg, client)
	opts.PodDirMountsUnseen = housekeeping.PodDirMountsUnseenBy(client.PeerPID, cfg.Pods.KubeletRoot)
	if cmd == "once" {
		if opts.Executor, err = newExecutor(cfg, client, opts.Network, log); err != nil {
			fmt.Fprintf(stderr, "nri-housekeeper once: %v\n", err)
			return 2
		}
	}
	// The state file's pods seen torn down and hour of budgeted steps count
	// here too. report and a dry run take no step: they read the file and
	// never write it. A once that acts is one more housekeeper on the node:
	// it takes the file's lock and adds its budgeted steps to the file, so
	// that runs of once (a cron job, an operator) cannot take more than
	// max_per_hour between them; beside a running plugin, which holds the
	// lock, it takes no budgeted step and says why (the plugin takes them).
	opts.StateReadOnly = cmd == "report" || cfg.DryRun
	opts.OneShot = true
	loop := housekeeping.New(podstate.New(0), client, opts, log)
	loop.Restore(ctx)
	defer func() { _ = loop.Close() }()
	r := loop.Pass(ctx)
	stopped := ctx.Err() != nil // by SIGTERM, SIGINT or SIGHUP, before the pass ended
	if r.Err != nil {
		hint := listingFailedHint(r.Err, cfg.Runtime, os.Geteuid())
		if stopped {
			hint = fmt.Sprintf("; stopped by a signal (%v) while the runtime was listed: nothing was done", context.Cause(ctx))
		}
		fmt.Fprintf(stderr, "nri-housekeeper %s: %v%s\n", cmd, r.Err, hint)
		return 1
	}
	rep := report.Build(r.Started, r.Snapshot, r.Plan, r.Blocked)
	rep.Command = cmd
	rep.AddNotLookedFor(r.NotLookedFor)
	if asJSON {
		err = report.JSON(stdout, rep)
	} else {
		err = report.Text(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nri-housekeeper %s: %v\n", cmd, err)
		return 1
	}
	failed := 0
	if cmd == "once" {
		failed = onceSummary(stdout, r.Outcomes, cfg.DryRun)
	}
	if stopped {
		// A signal during the pass: what it had not reached (a step
		// skipped, a check cut short, a source read half) is not done,
		// whatever the steps taken before did.
		fmt.Fprintf(stderr, "nri-housekeeper %s: stopped by a signal (%v) before the pass ended: what it had not reached is not done\n",
			cmd, context.Cause(ctx))
		return 1
	}
	if failed > 0 {
		return 1
	}
	if cmd == "once" && r.Blocked != "" {
		fmt.Fprintf(stderr, "nri-housekeeper once: nothing was done: %s\n", r.Blocked)
		return 1
	}
	if cmd == "once" && rep.LeaksNotLooked != "" {
		// The rest was done, but a clean exit would read as a node with
		// no leak left: a cron job or a runbook must see that part of it
		// was not looked at.
		fmt.Fprintf(stderr, "nri-housekeeper once: not every leak was looked for: %s\n", rep.LeaksNotLooked)
		return 1
	}
	_ = os.Stdout.Sync()
	return 0
}

// onceSummary prints what once did and returns how many steps failed. Only
// a step tried and failed is a failure: one aborted (checked again right
// before it, the pod is back) or skipped (a step it depends on did not
// succeed) was not tried.
func onceSummary(w io.Writer, outcomes []executor.Outcome, dryRun bool) (failed int) {
	n := map[executor.Result]int{}
	for _, o := range outcomes {
		n[o.Result]++
	}
	tried := n[executor.Success] + n[executor.Error] + n[executor.Would]
	fmt.Fprintf(w, "\nexecuted %d action(s), %d failed (dry_run = %v)", tried, n[executor.Error], dryRun)
	for _, not := range []struct {
		result executor.Result
		why    string
	}{
		{executor.Aborted, "checked again right before it, what the plan saw no longer held"},
		{executor.Skipped, "a step it depends on did not succeed, or the run was stopped"},
		{executor.Backoff, "backing off after an earlier failure"},
	} {
		if n[not.result] > 0 {
			fmt.Fprintf(w, "; not tried: %d %s (%s)", n[not.result], not.result, not.why)
		}
	}
	fmt.Fprintln(w)
	return n[executor.Error]
}

// listingFailedHint is what to do about a pass whose runtime listing
// failed with err, for a user of UID uid: "" when there is nothing to add.
func listingFailedHint(err error, rt config.Runtime, uid int) string {
	switch {
	case status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "permission denied"):
		return fmt.Sprintf("; runtime.endpoint (%s) refuses this user (UID %d): run this as root, as the plugin runs", rt.Endpoint, uid)
	case status.Code(err) == codes.Unavailable:
		return fmt.Sprintf("; is containerd running, and is runtime.endpoint (%s) its socket?", rt.Endpoint)
	case status.Code(err) == codes.DeadlineExceeded:
		// Each call waits its own rpc_timeout: the network side's (the
		// runtime's CNI status) comes before the listing.
		return fmt.Sprintf("; containerd did not answer within runtime.rpc_timeout (%s, each call): is it hung, or is runtime.endpoint (%s) another server's socket?",
			rt.RPCTimeout, rt.Endpoint)
	}
	return ""
}
