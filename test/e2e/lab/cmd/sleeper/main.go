// Command sleeper is a tiny static "pause"-style process for the nri-housekeeper e2e lab.
//
// It sleeps until SIGTERM or SIGINT, reaps zombies when it runs as PID 1 (like
// the Kubernetes pause container) and, when given -interval, prints a line to
// stdout periodically so that CRI container logs have content. With -exit-after
// it exits by itself (with -exit-code): a completing or crashing container. The
// same binary is used for the sandbox (pause) image and for the workload image.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	name := flag.String("name", "sleeper", "name printed in log lines")
	interval := flag.Duration("interval", 0, "print a heartbeat line at this interval (0 = never)")
	exitAfter := flag.Duration("exit-after", 0, "exit by itself after this long (0 = never)")
	exitCode := flag.Int("exit-code", 0, "exit status of -exit-after")
	flag.Parse()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)

	fmt.Printf("%s: started pid=%d\n", *name, os.Getpid())
	var tick <-chan time.Time
	if *interval > 0 {
		t := time.NewTicker(*interval)
		defer t.Stop()
		tick = t.C
	}
	var exit <-chan time.Time
	if *exitAfter > 0 {
		exit = time.After(*exitAfter)
	}
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				reap()
				continue
			}
			fmt.Printf("%s: got %v, exiting\n", *name, s)
			os.Exit(0)
		case <-exit:
			fmt.Printf("%s: exiting with %d after %v\n", *name, *exitCode, *exitAfter)
			os.Exit(*exitCode)
		case now := <-tick:
			fmt.Printf("%s: alive %s\n", *name, now.UTC().Format(time.RFC3339))
		}
	}
}

// reap collects exited children (only relevant when running as PID 1).
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
