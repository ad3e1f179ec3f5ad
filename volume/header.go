package volume

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Magic opens every sluice data device.
var Magic = [8]byte{'S', 'L', 'U', 'I', 'C', 'E', 'F', 'S'}

// HeaderFormat is the version of the header layout written by this code.
const HeaderFormat = 1

// HeaderSize is the encoded size of a header; it fits in one 512 B sector.
const HeaderSize = 64

// ErrBadHeader is wrapped by every header decoding error.
var ErrBadHeader = errors.New("bad volume header")

// Header is the self-describing record in block 0 of a data device. It
// must agree with the metadata's superblock: a data device paired with the
// wrong metadata is refused.
type Header struct {
	Format uint32
	UUID   [16]byte
	// BlockSize is the file-system block size in bytes.
	BlockSize uint32
	// IOUnit is the device's I/O unit (sector size) in bytes.
	IOUnit uint32
	// DeviceBytes is the size of the data device.
	DeviceBytes uint64
	// DataStart is the first block that holds file data; the blocks before
	// it hold this header.
	DataStart uint64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the HeaderSize-byte encoding of h.
//
//	0  magic "SLUICEFS"     8
//	8  format               4
//	12 uuid                 16
//	28 block size           4
//	32 I/O unit             4
//	36 device bytes         8
//	44 data start block     8
//	52 reserved (zero)      8
//	60 CRC-32C of bytes 0-59
func (h *Header) Encode() []byte {
	b := make([]byte, 0, HeaderSize)
	b = append(b, Magic[:]...)
	b = binary.BigEndian.AppendUint32(b, h.Format)
	b = append(b, h.UUID[:]...)
	b = binary.BigEndian.AppendUint32(b, h.BlockSize)
	b = binary.BigEndian.AppendUint32(b, h.IOUnit)
	b = binary.BigEndian.AppendUint64(b, h.DeviceBytes)
	b = binary.BigEndian.AppendUint64(b, h.DataStart)
	b = append(b, make([]byte, 8)...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeHeader parses and checks the header at the start of b.
func DecodeHeader(b []byte) (*Header, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, need %d", ErrBadHeader, len(b), HeaderSize)
	}
	b = b[:HeaderSize]
	if !bytes.Equal(b[:8], Magic[:]) {
		return nil, fmt.Errorf("%w: no sluice magic (not a sluice data device, or its first block was overwritten)", ErrBadHeader)
	}
	if crc32.Checksum(b[:60], castagnoli) != binary.BigEndian.Uint32(b[60:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (the header is damaged)", ErrBadHeader)
	}
	h := &Header{}
	h.Format = binary.BigEndian.Uint32(b[8:])
	copy(h.UUID[:], b[12:28])
	h.BlockSize = binary.BigEndian.Uint32(b[28:])
	h.IOUnit = binary.BigEndian.Uint32(b[32:])
	h.DeviceBytes = binary.BigEndian.Uint64(b[36:])
	h.DataStart = binary.BigEndian.Uint64(b[44:])
	if h.Format != HeaderFormat {
		return nil, fmt.Errorf("%w: format %d, this sluice reads format %d", ErrBadHeader, h.Format, HeaderFormat)
	}
	if err := validGeometry(int(h.BlockSize), int(h.IOUnit)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHeader, err)
	}
	if h.DeviceBytes%uint64(h.BlockSize) != 0 || h.DataStart == 0 || h.DataStart >= h.DeviceBytes/uint64(h.BlockSize) {
		return nil, fmt.Errorf("%w: inconsistent geometry (%d bytes, data from block %d)", ErrBadHeader, h.DeviceBytes, h.DataStart)
	}
	return h, nil
}

// UUIDString formats a volume UUID in the usual 8-4-4-4-12 form.
func UUIDString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func validGeometry(blockSize, ioUnit int) error {
	if blockSize < 512 || blockSize > 64<<10 || blockSize&(blockSize-1) != 0 {
		return fmt.Errorf("block size %d is not a power of two between 512 B and 64 KiB", blockSize)
	}
	if ioUnit < 512 || ioUnit > 1<<20 || ioUnit&(ioUnit-1) != 0 {
		return fmt.Errorf("I/O unit %d is not a power of two between 512 B and 1 MiB", ioUnit)
	}
	if ioUnit > blockSize {
		// Every block must be writable on its own: a device unit shared
		// by two blocks (two files) would need read-modify-write races.
		return fmt.Errorf("I/O unit %d is larger than the %d B block size; use a block size of at least the I/O unit", ioUnit, blockSize)
	}
	return nil
}
