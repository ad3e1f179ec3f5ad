package faultdev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
)

// Fail the second write, then heal the device.
func Example() {
	mem, _ := memdev.New(1<<20, memdev.Options{})
	d := faultdev.New(mem)
	defer d.Close()

	fault := d.Inject(faultdev.OnNth(faultdev.Writes, 2))
	p := device.AlignedBuf(4096)
	for i := range 3 {
		err := device.WriteAt(d, p, int64(i)*4096)
		fmt.Printf("write %d: %v (EIO: %v)\n", i+1, err, errors.Is(err, syscall.EIO))
	}
	fault.Remove()
	fmt.Println(fault)
	fmt.Println(d.Stats().Write)
	// Output:
	// write 1: <nil> (EIO: false)
	// write 2: device write [4096, +4096): input/output error (EIO: true)
	// write 3: <nil> (EIO: false)
	// input/output error on the 2nd writes (disabled, 1 injected)
	// 3 submitted, 3 completed, 1 failed, 1 injected, 8192 bytes, in flight 0 (max 1)
}

// Hold reads at a gate to observe, without sleeping, that four were in
// flight at once.
func ExampleGate() {
	mem, _ := memdev.New(1<<20, memdev.Options{})
	d := faultdev.New(mem)
	defer d.Close()

	gate := d.NewGate(faultdev.Reads)
	done := make(chan error, 4)
	for i := range 4 {
		r := &device.Request{Op: device.OpRead, Off: int64(i) * 4096, Buf: device.AlignedBuf(4096),
			Done: func(_ *device.Request, err error) { done <- err }}
		_ = d.Submit(r)
	}
	_ = gate.WaitHeld(context.Background(), 4)
	fmt.Println("held:", gate.Held(), "in flight:", d.Stats().Read.InFlight)

	gate.Open()
	for range 4 {
		<-done
	}
	s := d.Stats().Read
	fmt.Println("completed:", s.Completed, "max in flight:", s.MaxInFlight)
	// Output:
	// held: 4 in flight: 4
	// completed: 4 max in flight: 4
}

// Corrupt one block silently, on the way from the device and then on it.
func ExampleCorruption() {
	mem, _ := memdev.New(1<<20, memdev.Options{})
	d := faultdev.New(mem)
	defer d.Close()

	good := device.AlignedBuf(3 * 4096)
	for i := range good {
		good[i] = byte(i)
	}
	_ = device.WriteAt(d, good, 0)
	differs := func() {
		p := device.AlignedBuf(len(good))
		err := device.ReadAt(d, p, 0)
		var blocks []bool
		for b := 0; b < len(p); b += 4096 {
			blocks = append(blocks, !bytes.Equal(p[b:b+4096], good[b:b+4096]))
		}
		fmt.Println("error:", err, "blocks corrupted:", blocks)
	}

	corrupt := d.Inject(faultdev.CorruptRange(4096, 4096))
	differs()
	corrupt.Remove() // the stored data is good
	differs()
	_ = d.CorruptStored(faultdev.Range{Off: 8192, Len: 4096}, 0, 1)
	differs()
	fmt.Println(corrupt)
	fmt.Println(d.Stats().Read)
	// Output:
	// error: <nil> blocks corrupted: [false true false]
	// error: <nil> blocks corrupted: [false false false]
	// error: <nil> blocks corrupted: [false false true]
	// corrupt reads of [4096, +4096): one bit, seed 0 (disabled, 1 corrupted)
	// 3 submitted, 3 completed, 0 failed, 0 injected, 1 corrupted, 36864 bytes, in flight 0 (max 1)
}
