package ring_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/ring"
	"github.com/sluicefs/sluice/volume"
)

// memFS makes a file system on a memory device (a real program calls
// sluice.Open on a volume directory).
func memFS() (*sluice.FS, func()) {
	mem, _ := memdev.New(16<<20, memdev.Options{})
	kv, _ := meta.OpenPebble("meta", meta.PebbleOptions{FS: vfs.NewMem(), CreateIfMissing: true})
	volume.Format(mem, kv, volume.FormatOptions{})
	v, _ := volume.Attach(mem, kv)
	fs, _ := sluice.OpenVolume(v, nil)
	return fs, func() { fs.Close(); kv.Close(); mem.Close() }
}

// Submit writes, an fsync and a read, then reap their completions.
func Example() {
	fs, done := memFS()
	defer done()
	f, _ := fs.Create("/log")
	defer f.Close()

	r, _ := ring.New(8, nil)
	defer r.Close()
	r.Write(f, []byte("hello, "), 0, 0, 1)
	r.Write(f, []byte("ring"), 7, 0, 2)
	cqes := make([]ring.CQE, 8)
	n, _ := r.Wait(context.Background(), 2, cqes)
	r.Fsync(f, 3)
	buf := make([]byte, 16)
	r.Read(f, buf, 0, 0, 4)
	m, _ := r.Wait(context.Background(), 2, cqes[n:])
	got := cqes[:n+m]
	sort.Slice(got, func(i, j int) bool { return got[i].Tag < got[j].Tag })
	for _, c := range got {
		fmt.Printf("tag %d: %d bytes, err %v, punted %t\n", c.Tag, c.Res, c.Err, c.Flags&ring.CQEPunted != 0)
	}
	fmt.Printf("%q\n", buf[:got[3].Res])
	// Output:
	// tag 1: 7 bytes, err <nil>, punted false
	// tag 2: 4 bytes, err <nil>, punted false
	// tag 3: 0 bytes, err <nil>, punted true
	// tag 4: 11 bytes, err <nil>, punted false
	// "hello, ring"
}

// Completions delivered to a callback, which submits the next operation.
func ExampleOptions_callback() {
	fs, done := memFS()
	defer done()
	f, _ := fs.Create("/data")
	defer f.Close()

	var r *ring.Ring
	total := 0
	last := make(chan struct{})
	r, _ = ring.New(4, &ring.Options{Callback: func(c ring.CQE) {
		total += c.Res
		if c.Tag < 9 {
			r.Write(f, []byte("0123456789"), int64(c.Tag+1)*10, 0, c.Tag+1)
		} else {
			close(last)
		}
	}})
	r.Write(f, []byte("0123456789"), 0, 0, 0)
	<-last
	r.Close() // every callback has returned
	fmt.Println("bytes written:", total)
	// Output:
	// bytes written: 100
}
