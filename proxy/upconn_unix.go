//go:build unix

package proxy

import (
	"io"
	"syscall"
)

// pollable: plain-TCP connections are read without blocking.
const pollable = true

// open reports whether an idle connection is still usable: nothing waits
// on its socket, neither a byte nor its end (peeked, not read, so that a
// TLS record is not taken from its connection).
func (uc *upConn) open() bool {
	if uc.raw == nil {
		return true
	}
	var one [1]byte
	var rerr error
	err := uc.raw.Read(func(fd uintptr) bool {
		_, _, rerr = syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	return err == nil && rerr == syscall.EAGAIN
}

// readRaw reads what the socket of raw holds without waiting:
// errWouldBlock when it holds nothing, io.EOF at its end.
func readRaw(raw syscall.RawConn, p []byte) (int, error) {
	var n int
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr != syscall.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr == syscall.EAGAIN:
		return 0, errWouldBlock
	case rerr != nil:
		return 0, rerr
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}

// peekClosed reports whether the socket of raw has ended: a peek finds its
// end or an error (not a byte, not nothing yet).
func peekClosed(raw syscall.RawConn) bool {
	var one [1]byte
	var n int
	var rerr error
	err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return true
	}
	return rerr != syscall.EAGAIN && (rerr != nil || n == 0)
}
