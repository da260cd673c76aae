package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// serveBare runs the reference proxy on addr until SIGTERM or SIGINT: a bare
// fiber handler and a fasthttp client forwarding every request to upstream
// (host:port) as it came, with no feature at all — no key, task, limit,
// token count, metric or log. It is the calibration row "a bare fiber handler
// + fasthttp client" of ../shared/PERFORMANCE.md, measured in the same run
// as taskgate so that the benchmark shows what its own baseline allows.
// Streamed answers are relayed read by read, each read flushed.
func serveBare(addr, upstream string) int {
	client := &fasthttp.HostClient{
		Addr:                upstream,
		MaxConns:            4096,
		ReadTimeout:         time.Minute,
		WriteTimeout:        time.Minute,
		MaxIdleConnDuration: 5 * time.Minute,
		StreamResponseBody:  true,
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Post("/v1/*", func(c *fiber.Ctx) error {
		req := fasthttp.AcquireRequest()
		c.Request().CopyTo(req)
		req.SetHost(upstream)
		resp := fasthttp.AcquireResponse()
		if err := client.Do(req, resp); err != nil {
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(resp)
			return c.Status(fiber.StatusBadGateway).SendString(err.Error())
		}
		fasthttp.ReleaseRequest(req)
		c.Status(resp.StatusCode())
		c.Response().Header.SetContentTypeBytes(resp.Header.ContentType())
		if !resp.IsBodyStream() || resp.Header.ContentLength() >= 0 {
			c.Response().SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
			return nil
		}
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			defer fasthttp.ReleaseResponse(resp)
			buf := make([]byte, 4096)
			body := resp.BodyStream()
			for {
				n, err := body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		return nil
	})
	errc := make(chan error, 1)
	go func() { errc <- app.Listen(addr) }()
	fmt.Println("bare proxy serving at", addr, "for", upstream)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		_ = app.ShutdownWithTimeout(2 * time.Second)
		return 0
	case err := <-errc:
		fmt.Fprintln(os.Stderr, "bare proxy:", err)
		return 1
	}
}
