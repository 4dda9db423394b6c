// Package regularfiletest helps the tests of the packages that read node
// files show that no read blocks on a FIFO put in a file's place.
package regularfiletest

import (
	"testing"
	"time"
)

// ReturnsWithin fails t when f has not returned after 5s: a read that
// waits for a FIFO's writer would hold the pass for ever. f runs on a
// goroutine of its own, which is left blocked when it does not return.
func ReturnsWithin(t testing.TB, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("blocked for 5s")
	}
}
