//go:build !unix

package proxy

// pollable: connections are read with blocking reads only.
const pollable = false

// open: a connection is taken as open (a closed one fails at once and is
// replaced).
func (uc *upConn) open() bool { return true }

// readNow is not used where connections are not pollable.
func (uc *upConn) readNow(p []byte) (int, error) { return uc.Read(p) }
