package sluice

import (
	"sync"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// inflight counts operations in progress and lets a caller wait until none
// is. Unlike sync.WaitGroup, begin may be called while someone waits.
type inflight struct {
	mu   lockrank.Mutex[lockrank.Leaf]
	cond sync.Cond
	n    int // Protected by mu.
}

func (c *inflight) begin() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *inflight) end() {
	c.mu.Lock()
	c.n--
	if c.n == 0 && c.cond.L != nil {
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

// wait returns once no operation is in progress.
func (c *inflight) wait() {
	// What is counted (writebacks) locks pages and the inode's mutex.
	lockrank.Wait(lockrank.RankPage, 0, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cond.L == nil {
		c.cond.L = &c.mu
	}
	for c.n > 0 {
		c.cond.Wait()
	}
}
