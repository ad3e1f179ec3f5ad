// Command loopback is the go-fuse loopback file system that the fusefs
// benchmark compares sluice with: go-fuse's fs.LoopbackRoot, with every
// open answered FOPEN_DIRECT_IO (so that, like sluice's O_DIRECT opens,
// every read and write goes through the daemon) and FUSE passthrough
// disabled (as root on Linux >= 6.9 go-fuse would otherwise let the kernel
// do the I/O without the daemon, which is not a FUSE file system's cost).
//
//	loopback [-tuned] MOUNTPOINT ORIGINAL
//
// Without -tuned it runs with go-fuse's defaults (MaxWrite 128 KiB,
// MaxBackground 12, no CAP_ASYNC_DIO): "plain". With -tuned it asks the
// kernel for what sluice asks for (MaxWrite 1 MiB, MaxBackground 128,
// CAP_ASYNC_DIO, CAP_HANDLE_KILLPRIV_V2) and answers
// FOPEN_PARALLEL_DIRECT_WRITES on O_DIRECT opens, so that the comparison
// isolates the file system behind the FUSE interface.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var tuned = flag.Bool("tuned", false, "negotiate what sluice negotiates")

// node is a LoopbackNode whose children are nodes too (WrapChild).
type node struct{ *fs.LoopbackNode }

// WrapChild makes every node the loopback creates a node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{lb}
	}
	return ops
}

func (n *node) flags(open uint32, fl uint32) uint32 {
	fl |= fuse.FOPEN_DIRECT_IO
	if *tuned && open&syscall.O_DIRECT != 0 {
		fl |= fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
	return fl &^ fuse.FOPEN_KEEP_CACHE
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, n.flags(flags, fl), errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, fh, n.flags(flags, fl), errno
}

func main() {
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopback [-tuned] MOUNTPOINT ORIGINAL")
		os.Exit(2)
	}
	root := &fs.LoopbackRoot{Path: flag.Arg(1)}
	var st syscall.Stat_t
	if err := syscall.Stat(root.Path, &st); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root.Dev = uint64(st.Dev)
	root.RootNode = &node{&fs.LoopbackNode{RootData: root}}
	opts := &fs.Options{}
	opts.MountOptions = fuse.MountOptions{
		FsName:               root.Path,
		Name:                 "loopback",
		DirectMount:          true,
		DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		Options:              []string{"default_permissions"},
	}
	if *tuned {
		opts.MountOptions.MaxWrite = 1 << 20
		opts.MountOptions.MaxBackground = 128
		opts.MountOptions.ExtraCapabilities = fuse.CAP_ASYNC_DIO | fuse.CAP_HANDLE_KILLPRIV_V2
	}
	server, err := fs.Mount(flag.Arg(0), root.RootNode, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("mounted")
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		server.Unmount()
	}()
	server.Wait()
}
