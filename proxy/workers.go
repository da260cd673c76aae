package proxy

import "time"

// workerIdle is how long a settlement worker waits for work before it ends.
const workerIdle = 2 * time.Second

// workerPool runs settlements after the answer on goroutines kept between
// calls, so that a call neither starts a goroutine of its own nor grows a
// fresh stack. A job goes to an idle worker when there is one, else to a new
// worker; a worker idle for p.idle ends. run never blocks.
type workerPool struct {
	jobs chan func() // unbuffered: a send succeeds only to an idle worker
	idle time.Duration
}

func newWorkerPool(idle time.Duration) *workerPool {
	return &workerPool{jobs: make(chan func()), idle: idle}
}

// run runs f on a worker.
func (p *workerPool) run(f func()) {
	select {
	case p.jobs <- f:
	default:
		go p.work(f)
	}
}

// work runs f, then jobs handed to it until it has been idle for p.idle.
func (p *workerPool) work(f func()) {
	f()
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		select {
		case f := <-p.jobs:
			f()
			idle.Reset(p.idle)
		case <-idle.C:
			return
		}
	}
}
