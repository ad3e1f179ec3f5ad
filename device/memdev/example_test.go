package memdev_test

import (
	"bytes"
	"fmt"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/memdev"
)

// A write survives a crash for certain only once a Flush covers it.
func Example() {
	d, err := memdev.New(1<<20, memdev.Options{})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	buf := device.AlignedBuf(512)
	copy(buf, "flushed")
	_ = device.WriteAt(d, buf, 0)
	_ = device.Flush(d)
	copy(buf, "unflushed")
	_ = device.WriteAt(d, buf, 512)

	for _, w := range d.Pending() {
		fmt.Printf("pending: %d bytes at %d\n", len(w.Data), w.Off)
	}

	// The worst case: every pending write lost.
	crashed := d.CrashImageWith(func(memdev.PendingWrite) memdev.Fate {
		return memdev.Fate{Kind: memdev.Drop}
	})
	show := func(dev device.Device) {
		p := device.AlignedBuf(1024)
		_ = device.ReadAt(dev, p, 0)
		fmt.Printf("%q %q\n", bytes.TrimRight(p[:512], "\x00"), bytes.TrimRight(p[512:], "\x00"))
	}
	show(d)
	show(crashed)

	// A seeded crash: reproducible, keeping, dropping or tearing each
	// pending write.
	fmt.Println(bytes.Equal(read(d.CrashImage(42)), read(d.CrashImage(42))))
	// Output:
	// pending: 512 bytes at 512
	// "flushed" "unflushed"
	// "flushed" ""
	// true
}

func read(d device.Device) []byte {
	p := device.AlignedBuf(int(d.Size()))
	_ = device.ReadAt(d, p, 0)
	return p
}
