//go:build !unix

package proxy

import "syscall"

// pollable: connections are read with blocking reads only.
const pollable = false

// open: a connection is taken as open (a closed one fails at once and is
// replaced).
func (uc *upConn) open() bool { return true }

// readRaw is not used where connections are not pollable.
func readRaw(raw syscall.RawConn, p []byte) (int, error) { return 0, errWouldBlock }

// peekClosed is not used where connections are not pollable.
func peekClosed(raw syscall.RawConn) bool { return false }
