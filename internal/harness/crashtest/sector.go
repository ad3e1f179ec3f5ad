package crashtest

import (
	"encoding/binary"
)

// SectorSize is the unit of every workload write, truncate and space
// operation, and of the self-describing data pattern: 512 B, the sector at
// whose boundaries memdev tears writes.
const SectorSize = 512

// sectorMagic opens every sector the workload writes.
var sectorMagic = [8]byte{'s', 'l', 'c', 'r', 'a', 's', 'h', '1'}

// Tag is what a sector written by the workload says about itself: which
// file it was written to (the model's file identity, not the inode number,
// which a crash can hand out again), which write wrote it (a sequence number
// unique in the whole case) and at which file offset.
type Tag struct {
	File uint64
	Seq  uint64
	Off  int64
}

// fillSector writes the sector of tag t into p (len(p) == SectorSize): the
// header, then a filler derived from the header, so that a sector whose
// header and filler disagree (a torn or corrupted sector) is recognised.
func fillSector(p []byte, t Tag) {
	copy(p, sectorMagic[:])
	binary.LittleEndian.PutUint64(p[8:], t.File)
	binary.LittleEndian.PutUint64(p[16:], t.Seq)
	binary.LittleEndian.PutUint64(p[24:], uint64(t.Off))
	x := mix(t.File ^ mix(t.Seq^mix(uint64(t.Off))))
	for i := 32; i < SectorSize; i += 8 {
		x = mix(x + 0x9e3779b97f4a7c15)
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// SectorKind classifies the contents of one sector read back.
type SectorKind uint8

const (
	// Zero: every byte is zero (a hole, an unwritten extent, or never
	// written).
	Zero SectorKind = iota
	// Tagged: a well-formed sector of the workload.
	Tagged
	// Garbage: anything else (torn inside a sector, corrupted, or foreign).
	Garbage
)

// decodeSector classifies p (len(p) == SectorSize).
func decodeSector(p []byte) (SectorKind, Tag) {
	if [8]byte(p[:8]) != sectorMagic {
		for _, b := range p {
			if b != 0 {
				return Garbage, Tag{}
			}
		}
		return Zero, Tag{}
	}
	t := Tag{
		File: binary.LittleEndian.Uint64(p[8:]),
		Seq:  binary.LittleEndian.Uint64(p[16:]),
		Off:  int64(binary.LittleEndian.Uint64(p[24:])),
	}
	// The filler fillSector derives, compared as it is derived.
	x := mix(t.File ^ mix(t.Seq^mix(uint64(t.Off))))
	for i := 32; i < SectorSize; i += 8 {
		x = mix(x + 0x9e3779b97f4a7c15)
		if binary.LittleEndian.Uint64(p[i:]) != x {
			return Garbage, t
		}
	}
	return Tagged, t
}
