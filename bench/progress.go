package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports where a run is: the experiment, the cell, the time
// spent and an estimate of the time left. On a terminal it rewrites one
// line (and a ticker keeps the clock moving during a cell); otherwise it
// prints one line per finished cell.
type progress struct {
	w    io.Writer
	live bool

	mu struct {
		sync.Mutex
		start time.Time
		// planned is the estimated time of every cell; done the
		// estimates of the cells finished, and spent the real time
		// they took.
		planned, done time.Duration
		cells, ncells int
		exp, cell     string
		// running says a cell is in progress; result is the last one's.
		running   bool
		result    string
		cellStart time.Time
		cellEst   time.Duration
		lastLen   int
	}
	stop chan struct{}
	wg   sync.WaitGroup
}

func newProgress(w io.Writer, live bool) *progress {
	p := &progress{w: w, live: live && w != nil, stop: make(chan struct{})}
	p.mu.start = time.Now()
	if p.live {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-t.C:
					p.mu.Lock()
					p.drawLocked()
					p.mu.Unlock()
				}
			}
		}()
	}
	return p
}

// plan adds n cells of estimated time est each to the total.
func (p *progress) plan(n int, est time.Duration) {
	p.mu.Lock()
	p.mu.planned += time.Duration(n) * est
	p.mu.ncells += n
	p.mu.Unlock()
}

// begin says a cell of experiment exp starts.
func (p *progress) begin(exp, cell string, est time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.exp, p.mu.cell, p.mu.cellStart, p.mu.cellEst = exp, cell, time.Now(), est
	p.mu.running = true
	p.drawLocked()
}

// end says the cell finished, with a one-line result.
func (p *progress) end(result string) { p.endN(1, result) }

// endN says the n cells begun as one (a batch) finished.
func (p *progress) endN(n int, result string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cells += n
	p.mu.done += p.mu.cellEst
	p.mu.running, p.mu.result = false, result
	if p.w == nil {
		return
	}
	if !p.live {
		fmt.Fprintf(p.w, "[%s %d/%d %s ETA %s] %s: %s\n", p.mu.exp, p.mu.cells, max(p.mu.ncells, p.mu.cells),
			clock(time.Since(p.mu.start)), clock(p.etaLocked()), p.mu.cell, result)
		return
	}
	p.mu.cellEst = 0
	p.drawLocked()
}

// note prints a line that stays (set-up steps, warnings).
func (p *progress) note(format string, args ...any) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.mu.lastLen))
		p.mu.lastLen = 0
	}
	fmt.Fprintf(p.w, "sluice bench: "+format+"\n", args...)
	if p.live {
		p.drawLocked()
	}
}

// etaLocked estimates the time left: the estimates of the cells not run,
// scaled by how the finished ones compared with theirs.
func (p *progress) etaLocked() time.Duration {
	left := p.mu.planned - p.mu.done
	if left < 0 {
		left = 0
	}
	spent := time.Since(p.mu.start)
	if p.mu.done > 0 && spent > 0 {
		scale := float64(spent) / float64(p.mu.done)
		scale = min(max(scale, 0.5), 3)
		left = time.Duration(float64(left) * scale)
	}
	if p.mu.cellEst > 0 {
		left -= min(time.Since(p.mu.cellStart), p.mu.cellEst)
	}
	return max(left, 0)
}

func (p *progress) drawLocked() {
	if !p.live || p.mu.exp == "" {
		return
	}
	n, what := p.mu.cells+1, p.mu.cell
	if !p.mu.running {
		n, what = p.mu.cells, p.mu.cell+": "+p.mu.result
	}
	line := fmt.Sprintf("%s [%d/%d] elapsed %s ETA %s  %s", p.mu.exp, n, max(p.mu.ncells, n),
		clock(time.Since(p.mu.start)), clock(p.etaLocked()), what)
	if len(line) > 110 {
		line = line[:110]
	}
	pad := ""
	if n := p.mu.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.mu.lastLen = len(line)
}

// close stops the ticker and ends the live line.
func (p *progress) close() {
	close(p.stop)
	p.wg.Wait()
	if p.live {
		p.mu.Lock()
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.mu.lastLen))
		p.mu.Unlock()
	}
}

// clock renders d as m:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
