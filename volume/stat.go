package volume

import (
	"github.com/sluicefs/sluice/meta"
)

// Info describes a volume for `sluice stat`.
type Info struct {
	Dir         string `json:"dir,omitempty"`
	UUID        string `json:"uuid"`
	Format      uint32 `json:"format"`
	BlockSize   uint32 `json:"block_size"`
	IOUnit      uint32 `json:"io_unit"`
	DeviceBytes uint64 `json:"device_bytes"`
	DataStart   uint64 `json:"data_start_block"`
	TotalBlocks uint64 `json:"total_blocks"`
	DataBlocks  uint64 `json:"data_blocks"`
	FreeBlocks  uint64 `json:"free_blocks"`
	UsedBlocks  uint64 `json:"used_blocks"`
	FreeExtents int    `json:"free_extents"`
	// SharedBlocks counts the blocks more than one extent maps (reflink);
	// SavedBlocks the blocks that sharing saves (the sum of each shared
	// block's references but one); StagingBlocks the copy-on-write blocks
	// not yet mapped (freed at the next read-write open).
	SharedBlocks  uint64 `json:"shared_blocks"`
	SavedBlocks   uint64 `json:"saved_blocks"`
	StagingBlocks uint64 `json:"staging_blocks"`
	Inodes        int    `json:"inodes"`
	Orphans       int    `json:"orphans"`
	DataBackend   string `json:"data_backend,omitempty"`
	MetaBackend   string `json:"meta_backend"`
	MetaURL       string `json:"meta_url,omitempty"`
	DirectIO      bool   `json:"direct_io"`
	UsedFraction  string `json:"used,omitempty"`
	// Etcd is the etcd side of a volume in etcd (its members' health, its
	// owner), when the caller asked for it (EtcdStatus); nil otherwise.
	Etcd *EtcdStatus `json:"etcd,omitempty"`
	// DataChecksums says the volume checksums file data (mkfs
	// --data-checksums).
	DataChecksums bool `json:"data_checksums"`
}

// Stat reads the header and counts space and inodes in the metadata.
func (v *Volume) Stat() (*Info, error) {
	h := v.Header
	in := &Info{
		Dir:         v.Dir,
		UUID:        UUIDString(h.UUID),
		Format:      h.Format,
		BlockSize:   h.BlockSize,
		IOUnit:      h.IOUnit,
		DeviceBytes: h.DeviceBytes,
		DataStart:   h.DataStart,
		TotalBlocks: h.DeviceBytes / uint64(h.BlockSize),
	}
	in.DataChecksums = v.Super.Features&meta.FeatureDataChecksums != 0
	in.DataBlocks = in.TotalBlocks - h.DataStart
	in.MetaBackend, in.MetaURL = "pebble", v.MetaURL
	if v.MetaURL != "" {
		in.MetaBackend = "etcd"
	}
	start, end := meta.FreeKeyRange()
	if err := v.KV.Scan(start, end, func(k, val []byte) error {
		_, n, err := meta.DecodeFree(k, val)
		in.FreeBlocks += n
		in.FreeExtents++
		return err
	}); err != nil {
		return nil, err
	}
	in.UsedBlocks = in.DataBlocks - min(in.FreeBlocks, in.DataBlocks)
	start, end = meta.SharedKeyRange()
	if err := v.KV.Scan(start, end, func(k, val []byte) error {
		_, n, refs, err := meta.DecodeShared(k, val)
		in.SharedBlocks += n
		in.SavedBlocks += n * uint64(refs-1)
		return err
	}); err != nil {
		return nil, err
	}
	start, end = meta.StagedKeyRange()
	if err := v.KV.Scan(start, end, func(k, val []byte) error {
		_, n, err := meta.DecodeStaged(k, val)
		in.StagingBlocks += n
		return err
	}); err != nil {
		return nil, err
	}
	start, end = meta.InodeKeyRange()
	if err := v.KV.Scan(start, end, func([]byte, []byte) error { in.Inodes++; return nil }); err != nil {
		return nil, err
	}
	start, end = meta.OrphanKeyRange()
	if err := v.KV.Scan(start, end, func([]byte, []byte) error { in.Orphans++; return nil }); err != nil {
		return nil, err
	}
	return in, nil
}
