//go:build !linux

package proxy

// poller is not available here: each stream waits on a goroutine.
type poller struct{}

var thePoller = func() *poller { return nil }

func (p *poller) wait(r *streamRelay) error { return errWouldBlock }
func (p *poller) forget(r *streamRelay)     {}
func (p *poller) parked() int               { return 0 }
