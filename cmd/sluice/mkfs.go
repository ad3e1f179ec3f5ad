package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluicefs/sluice/volume"
)

func init() {
	register(&command{
		name:    "mkfs",
		usage:   "VOLUME --size SIZE [--data BLOCKDEV] [--block-size 4096] [--io-unit 512] [--prealloc] [--force]",
		summary: "create a volume",
		run:     runMkfs,
	})
}

// Geometry limits the engine relies on (volume.Mkfs checks them too; they
// are checked here first so that the messages name the flags).
const (
	minBlockSize = 512
	maxBlockSize = 64 << 10
	minIOUnit    = 512
	maxIOUnit    = 1 << 20
)

// runMkfs creates a volume with volume.Mkfs, after checking the flags
// itself so that each refusal names the flag and a value that works, and
// prints one summary line read back from the new volume.
func runMkfs(args []string, stdout io.Writer) error {
	fs := newFlags("mkfs")
	sizeFlag := fs.String("size", "", "size of the data image (4096, 512K, 64M, 16G, 1T)")
	data := fs.String("data", "", "use this block device instead of an image file VOLUME/data")
	blockFlag := fs.String("block-size", "4096", "file-system block size: a power of two from 512 B to 64 KiB")
	ioFlag := fs.String("io-unit", "512", "device I/O unit: a power of two from 512 B up to the block size")
	prealloc := fs.Bool("prealloc", false, "allocate the whole image up front instead of creating it sparse")
	force := fs.Bool("force", false, "overwrite an existing volume directory (not one in use)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{"expected one VOLUME"}
	}
	dir := pos[0]
	o, err := mkfsOptions(*sizeFlag, *data, *blockFlag, *ioFlag, *force)
	if err != nil {
		return err
	}
	o.Prealloc, o.Force = *prealloc, *force

	// A failed mkfs must not leave a half-made volume behind that the next
	// attempt would refuse as "not empty": remove the directory if this
	// mkfs created it.
	_, statErr := os.Lstat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := volume.Mkfs(dir, o); err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return volumeOpenError(dir, err)
	}

	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("created volume %s, but reopening it failed: %w", dir, volumeOpenError(dir, err))
	}
	defer v.Close()
	in, err := v.Stat()
	if err != nil {
		return fmt.Errorf("created volume %s, but reading it back failed: %w", dir, err)
	}
	describeDevice(v, in)
	kind := deviceKind(dir)
	if o.Prealloc {
		kind = "preallocated image file"
	}
	fmt.Fprintf(stdout, "created volume %s: uuid %s, %s, block size %d B, I/O unit %d B, data %s (%s), %s\n",
		dir, in.UUID, bytesIEC(in.DeviceBytes), in.BlockSize, in.IOUnit, dataDevicePath(dir), kind, ioMode(in))
	return nil
}

// mkfsOptions parses and checks the geometry flags. Syntax errors are usage
// errors; values the engine cannot use are refused with a message that
// names the flag and a value that would work.
func mkfsOptions(sizeFlag, data, blockFlag, ioFlag string, force bool) (volume.MkfsOptions, error) {
	var o volume.MkfsOptions
	parse := func(flag, s string) (int64, error) {
		n, err := volume.ParseSize(s)
		if err != nil {
			return 0, &usageError{"--" + flag + ": " + err.Error()}
		}
		return n, nil
	}
	bs, err := parse("block-size", blockFlag)
	if err != nil {
		return o, err
	}
	iou, err := parse("io-unit", ioFlag)
	if err != nil {
		return o, err
	}
	if bs < minBlockSize || bs > maxBlockSize || !isPow2(bs) {
		return o, fmt.Errorf("--block-size %s: the block size must be a power of two between 512 B and 64 KiB (e.g. --block-size 4096)", blockFlag)
	}
	if iou < minIOUnit || iou > maxIOUnit || !isPow2(iou) {
		return o, fmt.Errorf("--io-unit %s: the I/O unit must be a power of two between 512 B and 1 MiB (e.g. --io-unit 512)", ioFlag)
	}
	if iou > bs {
		return o, fmt.Errorf("--io-unit %s is larger than the %d B block size: the engine needs block size >= I/O unit; pass --block-size %d or a smaller --io-unit", ioFlag, bs, iou)
	}
	o.BlockSize, o.IOUnit = int(bs), int(iou)

	if data != "" {
		fi, err := os.Stat(data)
		if err != nil {
			return o, fmt.Errorf("--data %s: %w", data, unwrapPathError(err))
		}
		if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
			return o, fmt.Errorf("--data %s is not a block device; omit --data to use an image file VOLUME/data", data)
		}
		// volume.Mkfs ignores Size for a block device and uses the whole
		// device: refuse a size rather than silently not honouring it.
		if sizeFlag != "" {
			return o, fmt.Errorf("--size cannot be combined with --data: the whole block device %s is used; omit --size", data)
		}
		// The directory check does not protect a block device: refuse to
		// format over another sluice volume without --force.
		if h, err := readDataHeader(data); err == nil && !force {
			return o, fmt.Errorf("--data %s already holds sluice volume %s; pass --force to overwrite it", data, volume.UUIDString(h.UUID))
		}
		o.Data = data
		return o, nil
	}

	if sizeFlag == "" {
		return o, &usageError{"--size is required (e.g. --size 16G)"}
	}
	size, err := parse("size", sizeFlag)
	if err != nil {
		return o, err
	}
	switch {
	case size < volume.MinSize:
		return o, fmt.Errorf("--size %s is smaller than the minimum of %d B (1 MiB); pass --size 1M or more", sizeFlag, volume.MinSize)
	case size%bs != 0:
		up := (size + bs - 1) / bs * bs
		return o, fmt.Errorf("--size %s (%d B) is not a multiple of the %d B block size; pass --size %d", sizeFlag, size, bs, up)
	}
	o.Size = size
	return o, nil
}

func isPow2(n int64) bool { return n > 0 && n&(n-1) == 0 }

// unwrapPathError drops the operation and path of an *os.PathError when the
// caller names the path itself ("--data /x: no such file or directory").
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readDataHeader reads the volume header at the start of a data device.
func readDataHeader(path string) (*volume.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, volume.HeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return volume.DecodeHeader(b)
}
