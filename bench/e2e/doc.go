// Command e2e is taskgate's end-to-end benchmark (`make bench-e2e`, that is
// `go run ./bench/e2e`). It builds the gateway binary, starts the fake
// upstream in a process of its own, a redis-server and gateways with limits
// on (one on the Redis store, one on the in-process store) and a bare
// reference proxy (a fiber handler and a fasthttp client, no features), and
// measures from a fasthttp load generator on loopback, alternating direct
// runs (to the fake upstream) with runs through each gateway and the
// reference, several rounds, medians reported:
//
//   - saturation throughput, gateway/direct, plain and streamed chat (closed
//     loop, fixed connections and duration);
//   - added latency p50/p99 at a fixed rate (open loop: latency is taken from
//     each request's scheduled send time, so coordinated omission is avoided);
//   - added time to the first streamed byte;
//   - gateway CPU seconds per call (utime+stime from /proc/PID/stat);
//   - store round trips per call (redis-server INFO before and after);
//   - the latency a fresh ~100 KB prompt that must be token-counted adds;
//   - RSS idle, with both encodings loaded, peak, and per open stream.
//
// It prints a table of each figure against the targets of the performance
// issue and writes it into the "## End to end" section of
// docs/PERFORMANCE.md. Where a CPU, throughput or latency target is missed
// and perf(1) is installed, it profiles the gateway with perf and adds the
// hottest functions. The whole run takes about five minutes; -quick about
// two.
//
// Run with -serve-fake ADDR, the program is the fake upstream process itself;
// with -serve-bare ADDR -upstream HOST:PORT, the bare reference proxy.
package main
