package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"taskgate/internal/fakeupstream"
)

// holdModel is the upstream model of the endpoint whose streams are held
// open: the fake upstream sends their first event at once and the next only
// after holdDelay.
const holdModel = "fake-hold"

// holdDelay is the pause between the events of a held stream.
const holdDelay = 10 * time.Minute

// serveFake runs the fake upstream on addr until SIGTERM or SIGINT. A
// request whose body names holdModel gets a stream held open after its first
// event; every other request gets the default answer.
func serveFake(addr string) int {
	s, err := fakeupstream.New(fakeupstream.Options{NoRecord: true, Addr: addr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake upstream:", err)
		return 1
	}
	hold := &fakeupstream.Behavior{Content: "held open", EventDelay: holdDelay}
	marker := []byte(`"` + holdModel + `"`)
	s.SetHandlerHook(func(r fakeupstream.Recorded) *fakeupstream.Behavior {
		if bytes.Contains(r.Body, marker) {
			return hold
		}
		return nil
	})
	fmt.Println("fake upstream serving at", s.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	_ = s.Close()
	return 0
}
