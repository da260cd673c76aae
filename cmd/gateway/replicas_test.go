package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
)

// TestManyReplicas runs three gateway processes on one redis-server behind
// a round-robin client and checks that they share one count (a limit of N
// requests with M concurrent calls serves exactly N), and that a block and
// a limit override made through one replica's admin API are enforced by
// the others on the very next call.
func TestManyReplicas(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upKey, NoRecord: true})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	const n, m = 20, 60
	path := filepath.Join(t.TempDir(), "taskgate.yaml")
	writeFile(t, path, procConfig(up.URL(), rs.URL(), "tgreplicas:",
		simpleTask("proc.shared", `{task: {requests: {day: 20}}}`),
		simpleTask("proc.free", "")))
	reps := make([]*proc, 3)
	var wg sync.WaitGroup
	for i := range reps {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			reps[i] = startGateway(t, path)
		}(i)
	}
	wg.Wait()
	for i, r := range reps {
		if r == nil {
			t.Fatalf("replica %d did not start", i+1)
		}
	}

	// Round robin over the replicas, all calls at once.
	var next atomic.Int64
	pick := func() *proc { return reps[int(next.Add(1)-1)%len(reps)] }
	var ok, refused, other atomic.Int64
	start := make(chan struct{})
	var cw sync.WaitGroup
	for i := 0; i < m; i++ {
		cw.Add(1)
		go func() {
			defer cw.Done()
			r := pick()
			req, _ := http.NewRequest("POST", r.client+"/v1/chat/completions",
				strings.NewReader(`{"model":"proc.shared","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+clientKey)
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				other.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	close(start)
	cw.Wait()
	if ok.Load() != n || refused.Load() != m-n || other.Load() != 0 {
		t.Fatalf("served %d, refused %d, other %d; want exactly %d served of %d", ok.Load(), refused.Load(), other.Load(), n, m)
	}
	if got := up.Count(); got != n {
		t.Errorf("the upstream saw %d calls, want %d", got, n)
	}

	// A block made through replica 1 is enforced by 2 and 3 at once.
	if st, body := reps[0].adminDo("POST", "/admin/blocks", `{"user":"mallory","group":"*","reason":"testing blocks"}`); st != 201 {
		t.Fatalf("POST /admin/blocks: %d %s", st, body)
	}
	for i, r := range reps[1:] {
		st, body := r.call("proc.free", "mallory")
		if st != 403 || !strings.Contains(body, `"blocked"`) {
			t.Errorf("replica %d let a blocked user through: %d %s", i+2, st, body)
		}
		if st, _ := r.call("proc.free", "alice"); st != 200 {
			t.Errorf("replica %d refused another user: %d", i+2, st)
		}
	}
	if st, _ := reps[2].adminDo("DELETE", "/admin/blocks?user=mallory&group=*", ""); st != 204 {
		t.Errorf("DELETE /admin/blocks: %d", st)
	}
	if st, _ := reps[0].call("proc.free", "mallory"); st != 200 {
		t.Errorf("replica 1 still blocks after the block was removed on replica 3: %d", st)
	}

	// A limit override PUT on replica 2 is enforced by 1 and 3.
	if st, body := reps[1].adminDo("PUT", "/admin/limits/proc.free", `{"task":{"requests":{"day":2}}}`); st != 200 {
		t.Fatalf("PUT /admin/limits: %d %s", st, body)
	}
	for i, want := range []int{200, 200, 429, 429} {
		r := reps[[]int{0, 2, 0, 2}[i]]
		if st, body := r.call("proc.free", ""); st != want {
			t.Errorf("call %d under the override of 2: %d, want %d: %s", i+1, st, want, body)
		}
	}
}
