// Package bootclock reads the kernel's boot ID and the time since boot
// (CLOCK_BOOTTIME). Together they date an event in a way a wall clock set
// forward or back cannot change: two readings with the same boot ID are
// apart by exactly the difference of their times since boot. The state
// file dates the budgeted steps of the last hour with them, so that a
// restart under a wall clock hours ahead (an RTC not yet corrected by NTP)
// does not forget the steps taken in the real hour.
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
	// Since is the time since boot, suspend included.
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
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return Reading{}, fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	return Reading{BootID: id, Since: time.Duration(ts.Nano())}, nil
}
