package bootclock

import (
	"testing"
	"time"
)

// TestTheBootClockAdvancesWithinOneBoot: two readings name the same boot,
// and the time since boot moves on as much as the monotonic clock does.
func TestTheBootClockAdvancesWithinOneBoot(t *testing.T) {
	start := time.Now()
	first, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	second, err := Read()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.BootID) != 36 || first.BootID != second.BootID {
		t.Fatalf("boot IDs %q and %q: want one UUID", first.BootID, second.BootID)
	}
	if d := second.Since - first.Since; d < 50*time.Millisecond || d > elapsed {
		t.Fatalf("the boot clock moved %v over a %v sleep (%v elapsed in all)", d, 50*time.Millisecond, elapsed)
	}
	if first.Since <= 0 {
		t.Fatalf("time since boot %v", first.Since)
	}
}
