package iolock_test

import (
	"fmt"

	"github.com/sluicefs/sluice/iolock"
)

// inode stands for the engine's in-core inode, which embeds both.
type inode struct {
	ioLock iolock.Lock
	dio    iolock.DIO
	size   int64
}

// An aligned direct write that starts past EOF (xfs_file_write_checks): take
// the lock exclusive, drain in-flight direct I/O so that no completion can
// still move EOF, zero the gap, then demote and do the I/O shared.
func Example_writePastEOF() {
	var ip inode
	pos := int64(8192)
	zeroRange := func(from, to int64) { /* write zeroes to [from, to) */ }

	ip.ioLock.Lock(iolock.Exclusive)
	ip.dio.Wait()
	if pos > ip.size { // checked again under Exclusive, after the drain
		zeroRange(ip.size, pos)
	}
	ip.ioLock.Demote()

	ip.dio.Begin()
	// ... submit the write; its completion publishes the size and calls
	// ip.dio.End() ...
	ip.size = pos + 4096
	ip.dio.End()

	ip.ioLock.Unlock(iolock.Shared)
	st := ip.ioLock.Stats()
	fmt.Println("exclusive:", st.ExclusiveAcquired, "demoted:", st.Demoted, "max in flight:", ip.dio.Max())
	// Output: exclusive: 1 demoted: 1 max in flight: 1
}

// A sub-block direct write within EOF (xfs_file_dio_write_unaligned): try
// under shared in overwrite-only mode; if the range needs allocation or
// conversion, there is no upgrade: unlock, lock exclusive, redo every check,
// drain, and complete synchronously.
func Example_noUpgrade() {
	var ip inode
	ip.size = 1 << 20
	singleWrittenExtent := func() bool { return false } // say the block is unwritten

	ip.ioLock.Lock(iolock.Shared)
	if singleWrittenExtent() {
		// ... overwrite under shared ...
		ip.ioLock.Unlock(iolock.Shared)
		return
	}
	ip.ioLock.Unlock(iolock.Shared)

	ip.ioLock.Lock(iolock.Exclusive)
	// Redo every check: size, mapping, privileges may have changed.
	ip.dio.Wait()
	// ... write, wait for completion and conversion ...
	ip.ioLock.Unlock(iolock.Exclusive)

	st := ip.ioLock.Stats()
	fmt.Println("shared:", st.SharedAcquired, "exclusive:", st.ExclusiveAcquired)
	// Output: shared: 1 exclusive: 1
}

// A NOWAIT caller never blocks: TryLock, or EAGAIN.
func ExampleLock_TryLock() {
	var l iolock.Lock
	l.Lock(iolock.Exclusive) // say a truncate holds it

	if !l.TryLock(iolock.Shared) {
		fmt.Println("EAGAIN")
	}
	l.Unlock(iolock.Exclusive)
	fmt.Println("trylock failures:", l.Stats().SharedTryFailed)
	// Output:
	// EAGAIN
	// trylock failures: 1
}
