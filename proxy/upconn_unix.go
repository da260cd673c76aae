//go:build unix

package proxy

import (
	"io"
	"syscall"
)

// pollable: plain-TCP connections are read without blocking.
const pollable = true

// open reports whether an idle plain-TCP connection is still usable: no
// byte and no end waits on it. A TLS connection is taken as open (a closed
// one fails at once and is replaced).
func (uc *upConn) open() bool {
	if uc.raw == nil {
		return true
	}
	var one [1]byte
	var rerr error
	err := uc.raw.Read(func(fd uintptr) bool {
		_, rerr = syscall.Read(int(fd), one[:])
		return true
	})
	return err == nil && rerr == syscall.EAGAIN
}

// readNow reads what the socket holds without waiting: errWouldBlock when
// it holds nothing, io.EOF at its end.
func (uc *upConn) readNow(p []byte) (int, error) {
	var n int
	var rerr error
	err := uc.raw.Read(func(fd uintptr) bool {
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
