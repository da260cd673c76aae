package proxy

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
