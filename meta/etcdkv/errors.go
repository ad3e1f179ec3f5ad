package etcdkv

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrConflict is wrapped by the error of a Commit that wrote nothing
	// because a key the transaction read, or a range it scanned, changed
	// after the transaction read it. The caller may start a new Txn and
	// run the transaction's body again.
	ErrConflict = errors.New("etcdkv: transaction conflict: something it read has changed")
	// ErrTxnTooLarge is wrapped by the error of a Commit that wrote nothing
	// because the transaction exceeds one of etcd's limits (--max-txn-ops,
	// --max-request-bytes); the error names the limit and the numbers.
	ErrTxnTooLarge = errors.New("etcdkv: transaction too large for etcd")
	// ErrCompacted is wrapped by the errors of reads at a revision etcd has
	// compacted away (an old Snapshot, a long-running Txn).
	ErrCompacted = errors.New("etcdkv: revision compacted")
	// errFinished is returned by reads and commits of a finished Txn.
	errFinished = errors.New("etcdkv: transaction already finished")
)

// OpError is the error of a failed KV operation: the operation ("get",
// "scan", "commit", "snapshot"), the key or range start it concerns (within
// the volume's prefix), and the cause. It matches both its cause and
// syscall.EIO under errors.Is.
type OpError struct {
	Op  string
	Key []byte
	Err error
}

func (e *OpError) Error() string {
	if e.Key == nil {
		return fmt.Sprintf("etcdkv %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("etcdkv %s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the cause and syscall.EIO.
func (e *OpError) Unwrap() []error { return []error{e.Err, syscall.EIO} }

func opError(op string, key []byte, err error) error {
	return &OpError{Op: op, Key: key, Err: err}
}
