// Package meta is sluice's metadata schema over an ordered key-value engine
// (KV; Pebble by default).
//
// # Records
//
// Every record is one key and one value. Keys start with a one-byte kind
// and continue with big-endian integers (and, for names, raw bytes), so the
// records of one inode, one directory or one file's extents are contiguous:
//
//	"S"                          superblock (format, volume UUID, geometry, next inode number)
//	"I" ino                      inode (type+mode, uid, gid, size, nlink, times, generation, parent dir)
//	"D" parent name              directory entry -> child inode, file type
//	"E" ino fileBlock            file extent -> device block, length, state (written/unwritten)
//	"L" ino                      symlink target
//	"X" ino name                 extended attribute value
//	"O" ino                      orphan: unlinked while open, freed at the next open
//	"F" start                    free device extent -> length
//	"R" start                    shared device blocks (reflink) -> length, references (>= 2)
//	"C" start                    copy-on-write staging blocks -> length
//	"K" chunk                    data checksums of device blocks [chunk*64, chunk*64+64): presence mask, CRC-32C each
//
// A missing extent record for a file block is a hole.
//
// # Encoding
//
// Every value starts with a format byte (ValueVersion) and ends with a
// CRC-32C of everything before it. A value whose version is unknown, whose
// length is wrong or whose checksum does not match decodes to an error that
// wraps ErrCorrupt — never a panic, never a silently wrong record.
//
// # Concurrency
//
// The functions here are stateless encoders and typed accessors; the caller
// (the engine) orders transactions. Every multi-record change is one Txn.
package meta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Ino is an inode number. Zero is never a valid inode.
type Ino uint64

// RootIno is the inode number of the root directory.
const RootIno Ino = 1

// ValueVersion is the format byte of every value written by this code.
const ValueVersion = 1

// FormatVersion is the version of the whole metadata layout, stored in the
// superblock. A volume with another version is refused.
const FormatVersion = 1

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt metadata record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key kinds.
const (
	kindSuper   = 'S'
	kindInode   = 'I'
	kindDirent  = 'D'
	kindExtent  = 'E'
	kindSymlink = 'L'
	kindXattr   = 'X'
	kindOrphan  = 'O'
	kindFree    = 'F'
	kindShared  = 'R'
	kindStaged  = 'C'
	kindSums    = 'K'
)

// seal appends the checksum to a value that already starts with its
// version byte.
func seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// open checks the version and checksum of v and returns its payload (between
// the version byte and the checksum).
func open(what string, v []byte) ([]byte, error) {
	if len(v) < 5 {
		return nil, fmt.Errorf("%s: %d-byte value: %w", what, len(v), ErrCorrupt)
	}
	body, sum := v[:len(v)-4], binary.BigEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch: %w", what, ErrCorrupt)
	}
	if body[0] != ValueVersion {
		return nil, fmt.Errorf("%s: unknown value version %d: %w", what, body[0], ErrCorrupt)
	}
	return body[1:], nil
}

func key1(kind byte, a uint64) []byte {
	k := make([]byte, 9)
	k[0] = kind
	binary.BigEndian.PutUint64(k[1:], a)
	return k
}

func key2(kind byte, a, b uint64) []byte {
	k := make([]byte, 17)
	k[0] = kind
	binary.BigEndian.PutUint64(k[1:], a)
	binary.BigEndian.PutUint64(k[9:], b)
	return k
}

func keyName(kind byte, a uint64, name string) []byte {
	k := make([]byte, 9, 9+len(name))
	k[0] = kind
	binary.BigEndian.PutUint64(k[1:], a)
	return append(k, name...)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// Superblock describes the volume; it is written once at mkfs and updated
// as inode numbers are handed out.
type Superblock struct {
	Format      uint32
	UUID        [16]byte
	BlockSize   uint32
	SectorSize  uint32
	DeviceBytes uint64
	// DataStart is the first device block that holds file data (blocks
	// before it hold the volume header).
	DataStart uint64
	// NextIno is the next inode number to hand out.
	NextIno Ino
	// Features are the volume's optional features (Feature*), chosen at
	// mkfs. A volume made before features existed has none; its record
	// is superLen bytes, one with features superLen+4.
	Features uint32
}

// FeatureDataChecksums: every file block's data is checksummed (CRC-32C,
// "K" records) and verified when read from the device.
const FeatureDataChecksums uint32 = 1 << 0

// knownFeatures are the features this code understands; a volume with
// others is refused.
const knownFeatures = FeatureDataChecksums

const superLen = 4 + 16 + 4 + 4 + 8 + 8 + 8

// SuperKey is the key of the superblock record.
func SuperKey() []byte { return []byte{kindSuper} }

// EncodeSuperblock returns the value of s.
func EncodeSuperblock(s *Superblock) []byte {
	b := make([]byte, 1, 1+superLen+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint32(b, s.Format)
	b = append(b, s.UUID[:]...)
	b = binary.BigEndian.AppendUint32(b, s.BlockSize)
	b = binary.BigEndian.AppendUint32(b, s.SectorSize)
	b = binary.BigEndian.AppendUint64(b, s.DeviceBytes)
	b = binary.BigEndian.AppendUint64(b, s.DataStart)
	b = binary.BigEndian.AppendUint64(b, uint64(s.NextIno))
	if s.Features != 0 {
		b = binary.BigEndian.AppendUint32(b, s.Features)
	}
	return seal(b)
}

// DecodeSuperblock parses a superblock value.
func DecodeSuperblock(v []byte) (*Superblock, error) {
	p, err := open("superblock", v)
	if err != nil {
		return nil, err
	}
	if len(p) != superLen && len(p) != superLen+4 {
		return nil, fmt.Errorf("superblock: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	s := &Superblock{}
	s.Format = binary.BigEndian.Uint32(p)
	copy(s.UUID[:], p[4:20])
	s.BlockSize = binary.BigEndian.Uint32(p[20:])
	s.SectorSize = binary.BigEndian.Uint32(p[24:])
	s.DeviceBytes = binary.BigEndian.Uint64(p[28:])
	s.DataStart = binary.BigEndian.Uint64(p[36:])
	s.NextIno = Ino(binary.BigEndian.Uint64(p[44:]))
	if len(p) == superLen+4 {
		s.Features = binary.BigEndian.Uint32(p[52:])
		if s.Features == 0 || s.Features&^knownFeatures != 0 {
			return nil, fmt.Errorf("superblock: features %#x, this sluice knows %#x: %w", s.Features, knownFeatures, ErrCorrupt)
		}
	}
	return s, nil
}

// Inode is the persistent part of an inode.
type Inode struct {
	Ino Ino
	// Mode holds the file type (S_IFMT bits) and permission bits.
	Mode  uint32
	Uid   uint32
	Gid   uint32
	Nlink uint32
	Rdev  uint32
	Size  uint64
	// Times in nanoseconds since the Unix epoch.
	Atime, Mtime, Ctime int64
	Gen                 uint64
	// Parent is the directory holding a directory (its ".."); zero for
	// other file types, which may have many parents.
	Parent Ino
}

const inodeLen = 8 + 5*4 + 8 + 3*8 + 8 + 8

// InodeKey is the key of inode ino.
func InodeKey(ino Ino) []byte { return key1(kindInode, uint64(ino)) }

// InodeKeyRange returns the bounds of every inode record.
func InodeKeyRange() (start, end []byte) { return []byte{kindInode}, []byte{kindInode + 1} }

// EncodeInode returns the value of in.
func EncodeInode(in *Inode) []byte {
	b := make([]byte, 1, 1+inodeLen+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint64(b, uint64(in.Ino))
	b = binary.BigEndian.AppendUint32(b, in.Mode)
	b = binary.BigEndian.AppendUint32(b, in.Uid)
	b = binary.BigEndian.AppendUint32(b, in.Gid)
	b = binary.BigEndian.AppendUint32(b, in.Nlink)
	b = binary.BigEndian.AppendUint32(b, in.Rdev)
	b = binary.BigEndian.AppendUint64(b, in.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(in.Atime))
	b = binary.BigEndian.AppendUint64(b, uint64(in.Mtime))
	b = binary.BigEndian.AppendUint64(b, uint64(in.Ctime))
	b = binary.BigEndian.AppendUint64(b, in.Gen)
	b = binary.BigEndian.AppendUint64(b, uint64(in.Parent))
	return seal(b)
}

// DecodeInode parses an inode value.
func DecodeInode(v []byte) (*Inode, error) {
	p, err := open("inode", v)
	if err != nil {
		return nil, err
	}
	if len(p) != inodeLen {
		return nil, fmt.Errorf("inode: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	in := &Inode{}
	in.Ino = Ino(binary.BigEndian.Uint64(p))
	in.Mode = binary.BigEndian.Uint32(p[8:])
	in.Uid = binary.BigEndian.Uint32(p[12:])
	in.Gid = binary.BigEndian.Uint32(p[16:])
	in.Nlink = binary.BigEndian.Uint32(p[20:])
	in.Rdev = binary.BigEndian.Uint32(p[24:])
	in.Size = binary.BigEndian.Uint64(p[28:])
	in.Atime = int64(binary.BigEndian.Uint64(p[36:]))
	in.Mtime = int64(binary.BigEndian.Uint64(p[44:]))
	in.Ctime = int64(binary.BigEndian.Uint64(p[52:]))
	in.Gen = binary.BigEndian.Uint64(p[60:])
	in.Parent = Ino(binary.BigEndian.Uint64(p[68:]))
	if in.Ino == 0 {
		return nil, fmt.Errorf("inode: number 0: %w", ErrCorrupt)
	}
	return in, nil
}

// Dirent is a directory entry's value.
type Dirent struct {
	Ino Ino
	// Type is the S_IFMT bits of the child's mode, cached for readdir.
	Type uint32
}

// DirentKey is the key of entry name in directory parent.
func DirentKey(parent Ino, name string) []byte { return keyName(kindDirent, uint64(parent), name) }

// DirentPrefix returns the bounds of every entry of directory parent.
func DirentPrefix(parent Ino) (start, end []byte) {
	p := key1(kindDirent, uint64(parent))
	return p, prefixEnd(p)
}

// DirentName extracts the name from a dirent key.
func DirentName(key []byte) (parent Ino, name string, err error) {
	if len(key) < 10 || key[0] != kindDirent {
		return 0, "", fmt.Errorf("dirent key %q: %w", key, ErrCorrupt)
	}
	return Ino(binary.BigEndian.Uint64(key[1:])), string(key[9:]), nil
}

// EncodeDirent returns the value of d.
func EncodeDirent(d Dirent) []byte {
	b := make([]byte, 1, 1+12+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint64(b, uint64(d.Ino))
	b = binary.BigEndian.AppendUint32(b, d.Type)
	return seal(b)
}

// DecodeDirent parses a directory entry value.
func DecodeDirent(v []byte) (Dirent, error) {
	p, err := open("dirent", v)
	if err != nil {
		return Dirent{}, err
	}
	if len(p) != 12 {
		return Dirent{}, fmt.Errorf("dirent: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	d := Dirent{Ino: Ino(binary.BigEndian.Uint64(p)), Type: binary.BigEndian.Uint32(p[8:])}
	if d.Ino == 0 {
		return Dirent{}, fmt.Errorf("dirent: inode 0: %w", ErrCorrupt)
	}
	return d, nil
}

// ExtentState says whether an extent's blocks hold data.
type ExtentState uint8

const (
	// Written blocks hold the file's data.
	Written ExtentState = 1
	// Unwritten blocks are allocated but read as zeros (fallocate, or a
	// write whose data is not yet known durable).
	Unwritten ExtentState = 2
)

func (s ExtentState) String() string {
	switch s {
	case Written:
		return "written"
	case Unwritten:
		return "unwritten"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Extent maps Len file blocks starting at FileBlock to device blocks
// starting at DevBlock.
type Extent struct {
	FileBlock uint64
	DevBlock  uint64
	Len       uint64
	State     ExtentState
}

// ExtentKey is the key of the extent of ino starting at fileBlock.
func ExtentKey(ino Ino, fileBlock uint64) []byte { return key2(kindExtent, uint64(ino), fileBlock) }

// ExtentPrefix returns the bounds of every extent of ino.
func ExtentPrefix(ino Ino) (start, end []byte) {
	p := key1(kindExtent, uint64(ino))
	return p, prefixEnd(p)
}

// ExtentKeyRange returns the bounds of every extent record.
func ExtentKeyRange() (start, end []byte) { return []byte{kindExtent}, []byte{kindExtent + 1} }

// EncodeExtent returns the value of e (its FileBlock lives in the key).
func EncodeExtent(e Extent) []byte {
	b := make([]byte, 1, 1+17+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint64(b, e.DevBlock)
	b = binary.BigEndian.AppendUint64(b, e.Len)
	b = append(b, byte(e.State))
	return seal(b)
}

// DecodeExtent parses an extent record.
func DecodeExtent(key, v []byte) (Ino, Extent, error) {
	if len(key) != 17 || key[0] != kindExtent {
		return 0, Extent{}, fmt.Errorf("extent key %x: %w", key, ErrCorrupt)
	}
	p, err := open("extent", v)
	if err != nil {
		return 0, Extent{}, err
	}
	if len(p) != 17 {
		return 0, Extent{}, fmt.Errorf("extent: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	e := Extent{
		FileBlock: binary.BigEndian.Uint64(key[9:]),
		DevBlock:  binary.BigEndian.Uint64(p),
		Len:       binary.BigEndian.Uint64(p[8:]),
		State:     ExtentState(p[16]),
	}
	if e.Len == 0 || (e.State != Written && e.State != Unwritten) || e.FileBlock+e.Len < e.FileBlock || e.DevBlock+e.Len < e.DevBlock {
		return 0, Extent{}, fmt.Errorf("extent %+v: %w", e, ErrCorrupt)
	}
	return Ino(binary.BigEndian.Uint64(key[1:])), e, nil
}

// SymlinkKey is the key of the target of symlink ino.
func SymlinkKey(ino Ino) []byte { return key1(kindSymlink, uint64(ino)) }

// EncodeBytes wraps an opaque value (symlink target, xattr value).
func EncodeBytes(p []byte) []byte {
	b := make([]byte, 1, 1+len(p)+4)
	b[0] = ValueVersion
	return seal(append(b, p...))
}

// DecodeBytes unwraps an opaque value.
func DecodeBytes(what string, v []byte) ([]byte, error) {
	p, err := open(what, v)
	if err != nil {
		return nil, err
	}
	return append([]byte{}, p...), nil
}

// XattrKey is the key of attribute name of ino.
func XattrKey(ino Ino, name string) []byte { return keyName(kindXattr, uint64(ino), name) }

// XattrPrefix returns the bounds of every attribute of ino.
func XattrPrefix(ino Ino) (start, end []byte) {
	p := key1(kindXattr, uint64(ino))
	return p, prefixEnd(p)
}

// OrphanKey is the key that marks ino as unlinked while open.
func OrphanKey(ino Ino) []byte { return key1(kindOrphan, uint64(ino)) }

// OrphanKeyRange returns the bounds of every orphan record.
func OrphanKeyRange() (start, end []byte) { return []byte{kindOrphan}, []byte{kindOrphan + 1} }

// OrphanIno parses an orphan key.
func OrphanIno(key []byte) (Ino, error) {
	if len(key) != 9 || key[0] != kindOrphan {
		return 0, fmt.Errorf("orphan key %x: %w", key, ErrCorrupt)
	}
	return Ino(binary.BigEndian.Uint64(key[1:])), nil
}

// FreeKey is the key of the free extent starting at device block start.
func FreeKey(start uint64) []byte { return key1(kindFree, start) }

// FreeKeyRange returns the bounds of every free-extent record.
func FreeKeyRange() (start, end []byte) { return []byte{kindFree}, []byte{kindFree + 1} }

// EncodeFree returns the value of a free extent of n blocks.
func EncodeFree(n uint64) []byte {
	b := make([]byte, 1, 1+8+4)
	b[0] = ValueVersion
	return seal(binary.BigEndian.AppendUint64(b, n))
}

// DecodeFree parses a free-extent record.
func DecodeFree(key, v []byte) (start, n uint64, err error) {
	if len(key) != 9 || key[0] != kindFree {
		return 0, 0, fmt.Errorf("free key %x: %w", key, ErrCorrupt)
	}
	p, err := open("free extent", v)
	if err != nil {
		return 0, 0, err
	}
	if len(p) != 8 {
		return 0, 0, fmt.Errorf("free extent: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	start, n = binary.BigEndian.Uint64(key[1:]), binary.BigEndian.Uint64(p)
	if n == 0 || start+n < start {
		return 0, 0, fmt.Errorf("free extent at %d of %d blocks: %w", start, n, ErrCorrupt)
	}
	return start, n, nil
}

// DirentKeyRange returns the bounds of every directory entry.
func DirentKeyRange() (start, end []byte) { return []byte{kindDirent}, []byte{kindDirent + 1} }

// SymlinkKeyRange returns the bounds of every symlink-target record.
func SymlinkKeyRange() (start, end []byte) { return []byte{kindSymlink}, []byte{kindSymlink + 1} }

// XattrKeyRange returns the bounds of every xattr record.
func XattrKeyRange() (start, end []byte) { return []byte{kindXattr}, []byte{kindXattr + 1} }

// SymlinkIno parses a symlink-target key.
func SymlinkIno(key []byte) (Ino, error) {
	if len(key) != 9 || key[0] != kindSymlink {
		return 0, fmt.Errorf("symlink key %x: %w", key, ErrCorrupt)
	}
	return Ino(binary.BigEndian.Uint64(key[1:])), nil
}

// XattrName parses an xattr key.
func XattrName(key []byte) (Ino, string, error) {
	if len(key) < 10 || key[0] != kindXattr {
		return 0, "", fmt.Errorf("xattr key %x: %w", key, ErrCorrupt)
	}
	return Ino(binary.BigEndian.Uint64(key[1:])), string(key[9:]), nil
}

// SharedKey is the key of the shared run starting at device block start.
func SharedKey(start uint64) []byte { return key1(kindShared, start) }

// SharedKeyRange returns the bounds of every shared-run record.
func SharedKeyRange() (start, end []byte) { return []byte{kindShared}, []byte{kindShared + 1} }

// EncodeShared returns the value of a shared run of n blocks with refs
// references each.
func EncodeShared(n uint64, refs uint32) []byte {
	b := make([]byte, 1, 1+12+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint64(b, n)
	return seal(binary.BigEndian.AppendUint32(b, refs))
}

// DecodeShared parses a shared-run record: n blocks from device block
// start, each mapped by refs >= 2 extent records.
func DecodeShared(key, v []byte) (start, n uint64, refs uint32, err error) {
	if len(key) != 9 || key[0] != kindShared {
		return 0, 0, 0, fmt.Errorf("shared key %x: %w", key, ErrCorrupt)
	}
	p, err := open("shared run", v)
	if err != nil {
		return 0, 0, 0, err
	}
	if len(p) != 12 {
		return 0, 0, 0, fmt.Errorf("shared run: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	start, n, refs = binary.BigEndian.Uint64(key[1:]), binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
	if n == 0 || start+n < start || refs < 2 {
		return 0, 0, 0, fmt.Errorf("shared run at %d of %d blocks, %d references: %w", start, n, refs, ErrCorrupt)
	}
	return start, n, refs, nil
}

// StagedKey is the key of the copy-on-write staging run starting at device
// block start.
func StagedKey(start uint64) []byte { return key1(kindStaged, start) }

// StagedKeyRange returns the bounds of every staging-run record.
func StagedKeyRange() (start, end []byte) { return []byte{kindStaged}, []byte{kindStaged + 1} }

// EncodeStaged returns the value of a staging run of n blocks.
func EncodeStaged(n uint64) []byte { return EncodeFree(n) }

// DecodeStaged parses a staging-run record.
func DecodeStaged(key, v []byte) (start, n uint64, err error) {
	if len(key) != 9 || key[0] != kindStaged {
		return 0, 0, fmt.Errorf("staged key %x: %w", key, ErrCorrupt)
	}
	p, err := open("staged run", v)
	if err != nil {
		return 0, 0, err
	}
	if len(p) != 8 {
		return 0, 0, fmt.Errorf("staged run: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	start, n = binary.BigEndian.Uint64(key[1:]), binary.BigEndian.Uint64(p)
	if n == 0 || start+n < start {
		return 0, 0, fmt.Errorf("staged run at %d of %d blocks: %w", start, n, ErrCorrupt)
	}
	return start, n, nil
}

// SumChunkBlocks is how many device blocks one checksum record covers.
const SumChunkBlocks = 64

// SumChunk is one checksum record: the CRC-32C of each device block
// [chunk*SumChunkBlocks, +SumChunkBlocks) whose bit is set in Mask (bit i
// for block chunk*SumChunkBlocks+i).
type SumChunk struct {
	Mask uint64
	Sums [SumChunkBlocks]uint32
}

const sumsLen = 8 + 4*SumChunkBlocks

// SumsKey is the key of the checksum record of chunk.
func SumsKey(chunk uint64) []byte { return key1(kindSums, chunk) }

// SumsKeyRange returns the bounds of every checksum record.
func SumsKeyRange() (start, end []byte) { return []byte{kindSums}, []byte{kindSums + 1} }

// EncodeSums returns the value of c.
func EncodeSums(c *SumChunk) []byte {
	b := make([]byte, 1, 1+sumsLen+4)
	b[0] = ValueVersion
	b = binary.BigEndian.AppendUint64(b, c.Mask)
	for _, s := range c.Sums {
		b = binary.BigEndian.AppendUint32(b, s)
	}
	return seal(b)
}

// DecodeSums parses a checksum record.
func DecodeSums(key, v []byte) (chunk uint64, c *SumChunk, err error) {
	if len(key) != 9 || key[0] != kindSums {
		return 0, nil, fmt.Errorf("checksum key %x: %w", key, ErrCorrupt)
	}
	p, err := open("checksums", v)
	if err != nil {
		return 0, nil, err
	}
	if len(p) != sumsLen {
		return 0, nil, fmt.Errorf("checksums: %d-byte payload: %w", len(p), ErrCorrupt)
	}
	c = &SumChunk{Mask: binary.BigEndian.Uint64(p)}
	for i := range c.Sums {
		c.Sums[i] = binary.BigEndian.Uint32(p[8+4*i:])
	}
	return binary.BigEndian.Uint64(key[1:]), c, nil
}
