package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
)

// SyncFS answers SYNCFS (syncfs(2), and sync(1) for every file system): a
// sync point of the whole volume. Every write completed before it (data,
// attributes, namespace changes, buffered or direct, through any handle)
// is durable when it returns OK: the engine's SyncAll writes back every
// dirty page, waits for writebacks in flight, flushes the device and syncs
// the metadata.
//
// fuseserver dispatches SYNCFS here (FS is a fuseserver.SyncFSer). Linux
// sends it only to connections it marks sync_fs, which today are
// virtiofs's: on a /dev/fuse or io_uring mount syncfs(2) never reaches the
// daemon (TestSyncfsReachesDaemon), and fsync of files and directories
// are the durable paths.
func (fs *FS) SyncFS(cancel <-chan struct{}, h *fuse.InHeader) fuse.Status {
	t := fs.start()
	defer fs.done(opSyncfs, t)
	return fs.toStatus("syncfs", h.NodeId, fs.eng.SyncAll())
}
