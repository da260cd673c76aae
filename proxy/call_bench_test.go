package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"taskgate/internal/redistest"
)

const benchConfig = baseConfig + `
  - key: app.nolimits
    endpoints: [primary]
  - key: app.withlimits
    endpoints: [primary]
    typical_tokens: [50, 20]
    limits:
      task: {requests: {day: 1000000000}, tokens: {day: 1000000000000}, money: {day: "1000000.00"}}
      user: {requests: {minute: 1000000000}, tokens: {day: 1000000000000}}
`

// BenchmarkCall measures whole plain calls through the gateway over
// loopback, with and without limits, on the memory and the Redis store.
// Compare the ns/op of the cases; the direct case is the fake upstream
// alone.
func BenchmarkCall(b *testing.B) {
	for _, store := range []string{"memory", "redis"} {
		for _, task := range []string{"app.nolimits", "app.withlimits"} {
			b.Run(store+"/"+task, func(b *testing.B) {
				o := envOptions{}
				if store == "redis" {
					o.redisURL = redistest.URL(b)
				}
				e := newEnv(b, benchConfig, o)
				body := `{"model":"` + task + `","user":"bench","messages":[{"role":"user","content":"hello there"}]}`
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					resp := e.post("/v1/chat/completions", testKey, body)
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	}
	b.Run("direct", func(b *testing.B) {
		e := newEnv(b, benchConfig, envOptions{})
		body := `{"model":"fake-mini","messages":[{"role":"user","content":"hello there"}]}`
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			req, _ := http.NewRequest("POST", e.up.URL()+"/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+upstreamKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
