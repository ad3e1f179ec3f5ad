package sluice

import (
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/meta"
)

// freeInode frees an inode whose last link and last reference are gone:
// its blocks (busy until the freeing is durable), its records, its orphan
// record. Dirty pages are dropped: nobody can read them any more.
func (fs *FS) freeInode(in *inode) {
	fs.icache.mu.Lock()
	if in.refs > 0 || in.gone {
		fs.icache.mu.Unlock()
		return
	}
	in.gone = true
	if fs.icache.m[in.ino] == in {
		delete(fs.icache.m, in.ino)
	}
	if in.retained {
		in.retained = false
		fs.icache.retainedDirs--
	}
	fs.icache.mu.Unlock()
	in.dropPages(0, ^uint64(0))
	in.waitBlocksIdle(0, ^uint64(0))
	in.releaseDelalloc(0)
	in.pages.Drop()
	if fs.writable() != nil {
		return // the orphan record frees it at the next open
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	err := fs.transact(func(t *txn) error {
		if isReg(in.attr.Mode) {
			ext, err := in.extentsLocked()
			if err != nil {
				return err
			}
			if err := t.freeBlocks(ext.Remove(0, ^uint64(0), t.extents(in))); err != nil {
				return err
			}
		}
		return fs.deleteInodeRecords(t, in.ino)
	})
	if err != nil {
		// Leave the orphan record: the next open retries.
		return
	}
	fs.dirty.mu.Lock()
	delete(fs.dirty.set, in)
	fs.dirty.mu.Unlock()
}

// deleteInodeRecords deletes every record of inode ino except its extents.
func (fs *FS) deleteInodeRecords(t *txn, ino meta.Ino) error {
	t.kv.Delete(meta.InodeKey(ino))
	t.kv.Delete(meta.SymlinkKey(ino))
	t.kv.Delete(meta.OrphanKey(ino))
	start, end := meta.XattrPrefix(ino)
	return t.kv.Scan(start, end, func(k, _ []byte) error {
		t.kv.Delete(append([]byte(nil), k...))
		return nil
	})
}

// recoverOrphans frees the inodes that were unlinked while open when the
// file system last stopped (a crash, or a kill).
func (fs *FS) recoverOrphans() error {
	var inos []meta.Ino
	start, end := meta.OrphanKeyRange()
	if err := fs.kv.Scan(start, end, func(k, _ []byte) error {
		ino, err := meta.OrphanIno(k)
		inos = append(inos, ino)
		return err
	}); err != nil {
		return fmt.Errorf("reading orphans: %w", err)
	}
	for _, ino := range inos {
		in, err := fs.getInode(ino)
		if err != nil && err != syscall.ENOENT {
			return fmt.Errorf("recovering orphan inode %d: %w", ino, err)
		}
		if err != nil {
			// No inode left: drop the stale orphan record.
			if err := fs.transact(func(t *txn) error { t.kv.Delete(meta.OrphanKey(ino)); return nil }); err != nil {
				return err
			}
			continue
		}
		in.mu.Lock()
		nlink := in.attr.Nlink
		in.mu.Unlock()
		if nlink > 0 {
			in.mu.Lock()
			err := fs.transact(func(t *txn) error { t.kv.Delete(meta.OrphanKey(ino)); return nil })
			in.mu.Unlock()
			if err != nil {
				return err
			}
		}
		fs.putInode(in) // frees it when nlink is 0
	}
	if len(inos) > 0 {
		return fs.kv.Sync()
	}
	return nil
}
