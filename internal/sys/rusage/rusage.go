// Package rusage reads this process's resource usage (getrusage(2)
// RUSAGE_SELF), for the CPU time and context switches per I/O that the
// benchmarks report.
package rusage

import (
	"time"

	"golang.org/x/sys/unix"
)

// Usage is the process's resource usage so far.
type Usage struct {
	CPU      time.Duration // user + system
	Switches int64         // voluntary + involuntary context switches
}

// Self returns the process's usage so far (the zero Usage if getrusage
// fails).
func Self() Usage {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw}
}

// Sub returns u - v: the usage between two readings.
func (u Usage) Sub(v Usage) Usage { return Usage{u.CPU - v.CPU, u.Switches - v.Switches} }
