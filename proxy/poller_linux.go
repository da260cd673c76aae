package proxy

import (
	"sync"
	"syscall"
)

// poller waits for many streams' upstream sockets at once in an epoll set
// of its own, so that a stream waiting for its next event holds no
// goroutine: when a socket becomes readable (or closes), the poller starts
// a goroutine to relay what came, and the stream waits again. It also
// watches each waiting stream's client connection for a hang-up, so that a
// client gone during a long pause ends the stream (and the upstream call)
// at once.
type poller struct {
	epfd int

	mu      sync.Mutex
	waiting map[uint32]*streamRelay // by the id in the epoll event
	nextID  uint32
}

// thePoller is the process's poller, started on first use; nil where epoll
// is not available (streams then wait on a goroutine each).
var thePoller = sync.OnceValue(func() *poller {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	p := &poller{epfd: fd, waiting: make(map[uint32]*streamRelay)}
	go p.loop()
	return p
})

// wait arms r's upstream socket: one readiness (or hang-up) wakes r once.
func (p *poller) wait(r *streamRelay) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT}
	op := syscall.EPOLL_CTL_MOD
	if r.pollID == 0 {
		p.mu.Lock()
		for {
			p.nextID++
			if _, used := p.waiting[p.nextID]; p.nextID != 0 && !used {
				break
			}
		}
		r.pollID = p.nextID
		p.waiting[r.pollID] = r
		p.mu.Unlock()
		op = syscall.EPOLL_CTL_ADD
	}
	ev.Fd = int32(r.pollID)
	if err := syscall.EpollCtl(p.epfd, op, r.up.fd, &ev); err != nil {
		p.forget(r)
		return err
	}
	if op == syscall.EPOLL_CTL_ADD && r.clientFD >= 0 {
		// The client's hang-up, once: the stream then ends without waiting
		// for its next event (a failed registration only loses that).
		cev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(r.pollID), Pad: pollClient}
		r.clientArmed = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, r.clientFD, &cev) == nil
	}
	return nil
}

// pollClient marks (in the event's Pad) a client connection's event.
const pollClient = 1

// forget removes r's socket from the set (before the socket is closed or
// reused by another stream).
func (p *poller) forget(r *streamRelay) {
	if r.pollID == 0 {
		return
	}
	p.mu.Lock()
	delete(p.waiting, r.pollID)
	p.mu.Unlock()
	r.pollID = 0
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, r.up.fd, nil)
	if r.clientArmed {
		r.clientArmed = false
		_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, r.clientFD, nil)
	}
}

// parked is how many streams are waiting in the set.
func (p *poller) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.waiting {
		if r.state.Load() == relayParked {
			n++
		}
	}
	return n
}

func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err != nil {
			continue // EINTR
		}
		for i := 0; i < n; i++ {
			p.mu.Lock()
			r := p.waiting[uint32(events[i].Fd)]
			p.mu.Unlock()
			if r != nil && events[i].Pad == pollClient {
				r.hup.Store(true) // seen by the relay before it waits again
			}
			if r != nil && r.claim() {
				go r.resume(false)
			}
		}
	}
}
