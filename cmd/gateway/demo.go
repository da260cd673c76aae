package main

import "fmt"

// demoKey is the client key of the demo config.
const demoKey = "tg-demo-key"

// demoAdminToken is the admin token of the demo config.
const demoAdminToken = "tg-demo-admin"

// demoConfig is the built-in config of -demo, pointing at the demo upstream.
func demoConfig(upstreamURL string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:8080"
admin_listen: "127.0.0.1:9090"
admin_token: %q
store: {}
endpoints:
  - name: demo-mini
    base_url: %q
    model: fake-mini
    context_window: 16000
    max_output_tokens: 1024
    capabilities: [tools, json_schema, json]
    price: {input: "0.15", output: "0.60"}
    tokenizer: o200k_base
  - name: demo-vision
    base_url: %q
    model: fake-large
    context_window: 128000
    max_output_tokens: 4096
    capabilities: [vision, file_input, tools, json_schema, json, image_output]
    price: {input: "2.50", output: "10.00", image: "0.04"}
    tokenizer: o200k_base
tasks:
  - key: demo.chat
    label: Demo chat
    purpose: Answer questions about the taskgate demo.
    endpoints: [demo-mini, demo-vision]
    limits:
      task: {requests: {minute: 600}, money: {day: "5.00"}}
      user: {requests: {minute: 20}, tokens: {day: 200000}}
    max_calls_per_hour: 100
    max_tokens_per_call: 8000
    typical_tokens: [500, 200]
    sources: [demo]
  - key: demo.vision
    label: Demo vision
    purpose: Describe photos.
    needs: [vision]
    endpoints: [demo-vision]
    limits:
      task: {money: {day: "2.00"}}
      user: {requests: {hour: 30}}
    typical_tokens: [1500, 300]
keys:
  - name: demo
    secret: %q
    tasks: ["*"]
    source: demo
`, demoAdminToken, upstreamURL, upstreamURL, demoKey)
}

func demoBanner(client, admin string) string {
	return fmt.Sprintf(`
taskgate demo is running.
  client API: http://%[1]s/v1   key: %[3]s   tasks (use as model): demo.chat, demo.vision
  admin API:  http://%[2]s      token: %[4]s

Try:
  curl -s http://%[1]s/v1/chat/completions -H 'Authorization: Bearer %[3]s' \
    -H 'Content-Type: application/json' -H 'X-Taskgate-User: alice' \
    -d '{"model":"demo.chat","messages":[{"role":"user","content":"Hello!"}]}'
  curl -s 'http://%[2]s/admin/usage?task=demo.chat&user=alice' -H 'Authorization: Bearer %[4]s'
  curl -s http://%[2]s/metrics | grep taskgate_

Stop with Ctrl-C.
`, client, admin, demoKey, demoAdminToken)
}
