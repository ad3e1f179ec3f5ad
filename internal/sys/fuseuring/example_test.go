package fuseuring_test

import (
	"encoding/binary"
	"errors"
	"log"
	"os"

	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// Example shows the shape of a server loop: fd is a mounted /dev/fuse
// descriptor whose INIT was answered with FlagOverIOURing, max_write
// 1 MiB and max_pages 256. It answers every request with ENOSYS.
func Example() {
	var fd int // from open("/dev/fuse") and mount(2); INIT answered
	qs, err := fuseuring.Start(fuseuring.Config{
		Fd:          fd,
		PayloadSize: fuseuring.MaxPayload(1<<20, 256, os.Getpagesize()),
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range qs {
		go func() {
			var es []*fuseuring.Entry
			for {
				var err error
				es, err = q.Wait(es[:0])
				for _, e := range es {
					go answer(q, e) // any goroutine may Commit
				}
				if errors.Is(err, fuseuring.ErrStopped) {
					q.Close() // unmounted or aborted
					return
				}
			}
		}()
	}
}

// answer replies ENOSYS: a fuse_out_header {len, error, unique} in the
// in_out area, no out-arguments.
func answer(q *fuseuring.Queue, e *fuseuring.Entry) {
	h := e.InHeader()
	unique := binary.NativeEndian.Uint64(h[8:16]) // fuse_in_header.unique
	binary.NativeEndian.PutUint32(h[0:4], 16)
	status := int32(-38) // -ENOSYS
	binary.NativeEndian.PutUint32(h[4:8], uint32(status))
	binary.NativeEndian.PutUint64(h[8:16], unique)
	if err := q.Commit(e, 0); err != nil {
		log.Print(err)
	}
}
