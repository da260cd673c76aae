package redistest

import "testing"

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	s.Stop()
	if err := ping(s.Addr); err == nil {
		t.Fatal("ping succeeded after stop")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := ping(s.Addr); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
