//go:build soak

package soak

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSoak runs the chaos soak: SOAK_DURATION (default 2m) of pods, leaks
// and faults from SOAK_SEED (default: a random seed, printed first), then
// the checks. make soak DURATION=30m [SEED=n]; make soak-smoke runs 2m.
func TestSoak(t *testing.T) {
	seed, err := seedFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	// First thing: the seed, so that any failure replays.
	fmt.Printf("soak: seed %d\n", seed)
	duration := 2 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		if duration, err = time.ParseDuration(v); err != nil || duration < 30*time.Second {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 30s", v)
		}
	}
	fmt.Printf("soak: duration %s (replay: make soak DURATION=%s SEED=%d)\n", duration, duration, seed)
	if os.Geteuid() != 0 {
		t.Fatal("the soak drives a real containerd and needs root")
	}
	// Setup (lab, build) and the settle phase come on top of the duration.
	need := duration + 15*time.Minute
	ctx := context.Background()
	if dl, ok := t.Deadline(); ok {
		if time.Until(dl) < need {
			t.Fatalf("go test -timeout leaves %s, the soak needs up to %s: raise SOAK_TIMEOUT", time.Until(dl).Round(time.Second), need)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Minute))
		defer cancel()
	}
	name := "nrihk"
	if v := os.Getenv("NRIHK_E2E_LAB"); v != "" {
		name = v
	}
	began := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("soak %7s  %s\n", time.Since(began).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
	}
	s, err := Run(ctx, Config{Seed: seed, Duration: duration, Name: name, Binary: os.Getenv("NRIHK_E2E_BINARY"),
		LogLevel: os.Getenv("SOAK_LOG_LEVEL"), Logf: logf})
	fmt.Print(s.String())
	fmt.Printf("soak: work dir %s (plugin.log, schedule.txt, summary.txt, summary.json)\n", WorkDir(name))
	if err != nil {
		t.Fatalf("soak (seed %d) did not run to its end: %v", seed, err)
	}
	if s.Verdict != "PASS" {
		t.Fatalf("soak failed (seed %d): %d failure(s), see the summary above", seed, len(s.Failures))
	}
}

func seedFromEnv() (uint64, error) {
	if v := os.Getenv("SOAK_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("SOAK_SEED=%q: want an unsigned integer", v)
		}
		return seed, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1, nil
}
