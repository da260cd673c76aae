package proxy

import "crypto/x509"

// SetStreamRootCAs makes the streamed calls' clients made from now on
// trust pool (nil: the system's roots); it returns the restore function.
func SetStreamRootCAs(pool *x509.CertPool) (restore func()) {
	was := streamRootCAs
	streamRootCAs = pool
	return func() { streamRootCAs = was }
}

// SetStreamPolling turns the poller off (every stream then waits on a
// goroutine) or on, and returns the function that restores it.
func SetStreamPolling(on bool) (restore func()) {
	was := noStreamPolling.Swap(!on)
	return func() { noStreamPolling.Store(was) }
}

// ParkedStreams is how many streams wait in the poller.
func ParkedStreams() int {
	if p := thePoller(); p != nil {
		return p.parked()
	}
	return 0
}
