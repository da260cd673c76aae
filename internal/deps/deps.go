//go:build tools

package deps

import (
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/gofiber/fiber/v2"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/pkoukk/tiktoken-go"
	_ "github.com/pkoukk/tiktoken-go-loader"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/shopspring/decimal"
	_ "github.com/sony/gobreaker/v2"
	_ "github.com/tidwall/gjson"
	_ "github.com/tidwall/sjson"
	_ "github.com/valyala/fasthttp"
	_ "gopkg.in/yaml.v3"
)
