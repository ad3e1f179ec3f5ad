package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/volume"
)

func newMkfsCommand() *cobra.Command {
	var f mkfsFlags
	cmd := &cobra.Command{
		Use:   "mkfs VOLUME --size SIZE [--data BLOCKDEV] [--meta etcd://HOST:PORT,.../PREFIX --data PATH] [--block-size 4096] [--io-unit 512] [--data-checksums] [--prealloc] [--force]",
		Short: "create a volume",
		Long: `Create the volume directory VOLUME: a data image of --size bytes, sparse unless
--prealloc (or, with --data, a link to a whole block device), its metadata, and
its lock file. Sizes are bytes with an optional K, M, G or T suffix (binary
units; KiB and KB mean the same).

With --data-checksums (off by default) the volume keeps the CRC-32C of every
file block and verifies every read from the device: a block that does not match
fails its read with EIO instead of returning what the device corrupted, and
sluice scrub and sluice fsck find such blocks. It costs every overwrite a new
block (no block holding data is written twice in place, so that a block and its
checksum always agree), appends that do not run in parallel, and blocks of at
most 4 KiB (--block-size 4096 or less); see docs/ARCHITECTURE.md, Data checksums.
It is chosen at mkfs and cannot be changed later.

With --meta, the metadata goes to etcd under the URL's prefix (which must be
empty, or --force deletes what it holds) and --data names the data device
every host reaches: a block device, or an image file (created with --size if
it does not exist). VOLUME then keeps only what is local to this host: the
lock file, the link VOLUME/data and the pointer VOLUME/etcd.json, from which
mount, stat and fsck find the metadata. The etcd members must run with
--max-txn-ops=16384 --max-request-bytes=4194304 (mkfs checks).`,
		Example: `  sluice mkfs /var/lib/vol --size 16G
  sluice mkfs /var/lib/vol --data /dev/nvme0n1 --block-size 4096 --io-unit 512
  sluice mkfs /var/lib/vol --size 16G --data-checksums
  sluice mkfs /var/lib/vol --meta etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/sluice/vol1 --data /shared/vol1.img --size 16G`,
		Args: wantArgs(1, "one VOLUME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMkfs(args[0], &f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.size, "size", "", "`SIZE` of the data image (4096, 512K, 64M, 16G, 1T); required without --data")
	fl.StringVar(&f.data, "data", "", "use the block device `BLOCKDEV` instead of an image file VOLUME/data")
	fl.StringVar(&f.blockSize, "block-size", "4096", "file-system block `SIZE`: a power of two from 512 B to 64 KiB")
	fl.StringVar(&f.ioUnit, "io-unit", "512", "device I/O unit (`SIZE`): a power of two from 512 B up to the block size")
	fl.BoolVar(&f.dataChecksums, "data-checksums", false, "checksum every file block (CRC-32C) and verify every read; overwrites go out of place, blocks of at most 4 KiB")
	fl.BoolVar(&f.prealloc, "prealloc", false, "allocate the whole image up front instead of creating it sparse")
	fl.BoolVar(&f.force, "force", false, "overwrite an existing volume directory (not one in use), or a block device holding a volume")
	addEtcdFlags(fl, &f.etcd, true)
	return cmd
}

// mkfsFlags are the flags of mkfs.
type mkfsFlags struct {
	size, data, blockSize, ioUnit  string
	prealloc, force, dataChecksums bool
	etcd                           etcdFlags
}

// Geometry limits the engine relies on (volume.Mkfs checks them too; they
// are checked here first so that the messages name the flags).
const (
	minBlockSize = 512
	maxBlockSize = 64 << 10
	minIOUnit    = 512
	maxIOUnit    = 1 << 20
	// maxChecksumBlockSize is the largest block size of a volume with data
	// checksums (a page must hold whole blocks; the engine refuses to open
	// one with larger blocks).
	maxChecksumBlockSize = 4096
)

// runMkfs creates a volume with volume.Mkfs, after checking the flags
// itself so that each refusal names the flag and a value that works, and
// prints one summary line read back from the new volume.
func runMkfs(dir string, f *mkfsFlags, stdout io.Writer) error {
	eo, err := f.etcd.options()
	if err != nil {
		return err
	}
	if eo != nil && eo.URL == "" {
		return &usageError{"the --etcd-* flags need --meta etcd://HOST:PORT,.../PREFIX"}
	}
	var o volume.MkfsOptions
	if eo != nil {
		o, err = mkfsEtcdOptions(f)
	} else {
		o, err = mkfsOptions(f.size, f.data, f.blockSize, f.ioUnit, f.force)
	}
	if err != nil {
		return err
	}
	if f.dataChecksums && o.BlockSize > maxChecksumBlockSize {
		return fmt.Errorf("--data-checksums needs a block size of at most 4 KiB, not --block-size %s; pass --block-size 4096 (or less), or omit --data-checksums", f.blockSize)
	}
	o.Prealloc, o.Force, o.Etcd, o.DataChecksums = f.prealloc, f.force, eo, f.dataChecksums

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

	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Etcd: eo})
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
	extra := ""
	if in.DataChecksums {
		extra = ", data checksums"
	}
	if v.MetaURL != "" {
		extra += ", metadata " + v.MetaURL
	}
	fmt.Fprintf(stdout, "created volume %s: uuid %s, %s, block size %d B, I/O unit %d B, data %s (%s), %s%s\n",
		dir, in.UUID, bytesIEC(in.DeviceBytes), in.BlockSize, in.IOUnit, dataDevicePath(dir), kind, ioMode(in), extra)
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

// mkfsEtcdOptions parses the geometry flags of a volume whose metadata is
// in etcd: --data is required and may be an image file (created with
// --size if missing) as well as a block device.
func mkfsEtcdOptions(f *mkfsFlags) (volume.MkfsOptions, error) {
	o, err := mkfsOptions("1M", "", f.blockSize, f.ioUnit, f.force)
	if err != nil {
		return o, err
	}
	o.Size = 0
	if f.data == "" {
		return o, &usageError{"--meta needs --data PATH: the data device or image file every host reaches"}
	}
	if f.size != "" {
		size, err := volume.ParseSize(f.size)
		if err != nil {
			return o, &usageError{"--size: " + err.Error()}
		}
		if size%int64(o.BlockSize) != 0 {
			return o, fmt.Errorf("--size %s (%d B) is not a multiple of the %d B block size", f.size, size, o.BlockSize)
		}
		o.Size = size
	}
	if h, err := readDataHeader(f.data); err == nil && !f.force {
		return o, fmt.Errorf("--data %s already holds sluice volume %s; pass --force to overwrite it", f.data, volume.UUIDString(h.UUID))
	}
	o.Data = f.data
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
