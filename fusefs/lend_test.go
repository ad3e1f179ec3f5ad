package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/fuseserver"
	"github.com/sluicefs/sluice/internal/sys/fuseuring"
	"github.com/sluicefs/sluice/volume"
)

// TestDeviceIOOnQueueRings: on a volume whose device is directdev (an
// image file), the O_DIRECT reads and writes an io_uring owner starts
// travel on the owner's own ring (Stats.URingBorrowed) with their data
// intact, from several threads at once, and the unmount and the engine's
// close find nothing left in flight (fsck clean); with URingNoLend none
// does.
func TestDeviceIOOnQueueRings(t *testing.T) {
	if err := fuseuring.Supported(); err != nil || os.Geteuid() != 0 {
		t.Skipf("FUSE over io_uring needs root and a kernel with it (%v)", err)
	}
	requireFUSE(t)
	for _, noLend := range []bool{false, true} {
		t.Run(fmt.Sprintf("nolend=%v", noLend), func(t *testing.T) {
			vol := filepath.Join(t.TempDir(), "vol")
			if err := volume.Mkfs(vol, volume.MkfsOptions{Size: 64 << 20}); err != nil {
				t.Fatal(err)
			}
			v, err := volume.Open(vol, volume.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := sluice.OpenVolume(v, &sluice.Options{})
			if err != nil {
				v.Close()
				t.Fatal(err)
			}
			mnt := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			srv, err := Mount(eng, mnt, &Options{Transport: fuseserver.TransportURing, URingNoLend: noLend})
			if err != nil {
				eng.Close()
				v.Close()
				t.Fatal(err)
			}
			const unit, n, workers = 4096, 256, 4
			want := pattern(n*unit, 11)
			fd, err := unix.Open(filepath.Join(mnt, "f"), unix.O_CREAT|unix.O_RDWR|unix.O_DIRECT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			// Allocate, then overwrite in place: the overwrites are
			// the WRITEs an owner starts.
			buf := device.AlignedBuf(n * unit)
			if _, err := unix.Pwrite(fd, buf, 0); err != nil {
				t.Fatal(err)
			}
			copy(buf, want)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n; i += workers {
						if _, err := unix.Pwrite(fd, buf[i*unit:(i+1)*unit], int64(i)*unit); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			got := device.AlignedBuf(n * unit)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n; i += workers {
						if _, err := unix.Pread(fd, got[i*unit:(i+1)*unit], int64(i)*unit); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := unix.Fsync(fd); err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			if !bytes.Equal(got, want) {
				t.Error("data read back differs from what was written")
			}
			borrowed := srv.Stats().URingBorrowed
			t.Logf("%+v", srv.Stats())
			if err := srv.Unmount(); err != nil {
				t.Fatal(err)
			}
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			checkVolume(t, vol)
			switch {
			case noLend && borrowed != 0:
				t.Errorf("%d device I/Os on the queues' rings with URingNoLend", borrowed)
			case !noLend && borrowed < n:
				t.Errorf("%d device I/Os on the queues' rings for %d O_DIRECT reads and %d writes", borrowed, n, n)
			}
		})
	}
}
