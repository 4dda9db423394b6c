// Package bootclock reads the kernel's boot ID and its monotonic clock
// (CLOCK_MONOTONIC: the time since boot, a suspend not counted). Together
// they date an event in a way a wall clock set forward or back cannot
// change: two readings with the same boot ID are apart by exactly the
// difference of their clock readings. The state file dates the budgeted
// steps of the last hour with them, so that a restart under a wall clock
// hours ahead (an RTC not yet corrected by NTP) does not forget the steps
// taken in the real hour.
//
// CLOCK_MONOTONIC, not CLOCK_BOOTTIME: it is the clock Go's times carry
// (their monotonic reading), so a time a run took maps onto it exactly.
// CLOCK_BOOTTIME runs on through a suspend while Go's monotonic reading
// stops, and a step taken after a suspend would be dated as long before as
// the suspend lasted. A suspend not counted only makes a step count longer.
package bootclock

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// BootIDPath is where Linux says which boot this is; it changes at every
// boot and never within one.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// Reading is one look at the boot clock.
type Reading struct {
	BootID string
	// Since is the time since boot, a suspend not counted.
	Since time.Duration
}

// Read returns the boot ID and the time since boot now.
func Read() (Reading, error) {
	data, err := os.ReadFile(BootIDPath)
	if err != nil {
		return Reading{}, fmt.Errorf("read the boot ID: %w", err)
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return Reading{}, fmt.Errorf("read the boot ID: %s is empty", BootIDPath)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return Reading{}, fmt.Errorf("read CLOCK_MONOTONIC: %w", err)
	}
	return Reading{BootID: id, Since: time.Duration(ts.Nano())}, nil
}
