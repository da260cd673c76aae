package config

import (
	"time"

	"github.com/shopspring/decimal"
)

// Config is one loaded, validated, defaulted configuration. It is immutable
// once Load returns: a reload builds a new Config.
type Config struct {
	Listen        string        `yaml:"listen"`         // client API address; default ":8080"
	AdminListen   string        `yaml:"admin_listen"`   // admin address; default "127.0.0.1:9090"
	AdminToken    string        `yaml:"admin_token"`    // bearer token for /admin/*; empty: admin API refuses every call
	BodyLimit     Size          `yaml:"body_limit"`     // default 32MiB
	Timezone      string        `yaml:"timezone"`       // default "UTC"
	ShutdownGrace time.Duration `yaml:"shutdown_grace"` // drain time on SIGTERM; default 30s (extension)
	ClientTimeout time.Duration `yaml:"client_timeout"` // time a client has to send a request's headers and body; default 60s (extension)
	Store         Store         `yaml:"store"`
	Endpoints     []Endpoint    `yaml:"endpoints"`
	Tasks         []Task        `yaml:"tasks"`
	Keys          []Key         `yaml:"keys"`

	// Location is Timezone resolved; where a day and a month begin.
	Location *time.Location `yaml:"-"`
	// Path is the file the config was loaded from ("" when parsed from bytes).
	Path string `yaml:"-"`
	// Warnings are problems that do not stop the config from loading, such
	// as user limits set on a task with user_limits: false (they are dropped).
	Warnings []string `yaml:"-"`
}

// Store says where counts live.
type Store struct {
	Redis     string        `yaml:"redis"`      // redis://, rediss://, redis-sentinel://, redis-cluster:// URL; empty: in-process store
	KeyPrefix string        `yaml:"key_prefix"` // default "taskgate:"
	OnError   string        `yaml:"on_error"`   // "fail_closed" (default) or "fail_open"
	Timeout   time.Duration `yaml:"timeout"`    // per store command; default 250ms (extension)
	Leases    bool          `yaml:"leases"`     // busy (task, user) pairs served from leases of headroom; default true (extension)
}

// Store error modes.
const (
	FailClosed = "fail_closed"
	FailOpen   = "fail_open"
)

// Endpoint is one upstream OpenAI-compatible endpoint with one model.
type Endpoint struct {
	Name             string            `yaml:"name"`
	BaseURL          string            `yaml:"base_url"` // without trailing slash after load
	APIKey           string            `yaml:"api_key"`
	Model            string            `yaml:"model"`
	ContextWindow    int               `yaml:"context_window"`    // tokens; required
	MaxOutputTokens  int               `yaml:"max_output_tokens"` // tokens; default 4096
	Capabilities     []string          `yaml:"capabilities"`      // vision file_input image_output tools json_schema json
	Price            Price             `yaml:"price"`
	Tokenizer        string            `yaml:"tokenizer"` // o200k_base (default) | cl100k_base | estimate
	Headers          map[string]string `yaml:"headers"`
	Timeout          time.Duration     `yaml:"timeout"`            // whole call; default 120s
	ConnectTimeout   time.Duration     `yaml:"connect_timeout"`    // default 5s
	FirstByteTimeout time.Duration     `yaml:"first_byte_timeout"` // default 60s
	IdleTimeout      time.Duration     `yaml:"idle_timeout"`       // gap between stream events; default 60s
	Breaker          Breaker           `yaml:"breaker"`
}

// Price is dollars per million tokens (and per image), exact decimals.
type Price struct {
	Input  decimal.Decimal `yaml:"input"`  // required
	Output decimal.Decimal `yaml:"output"` // required
	// Image is dollars per generated image; HasImage says it was set.
	Image    decimal.Decimal `yaml:"image"`
	HasImage bool            `yaml:"-"`

	// fast holds Input and Output in nano-dollars per million tokens when
	// both fit, so CostMicros needs no big-number arithmetic; set by the
	// loader and NewPrice, and ignored when zero.
	fast fastPrice
}

// Breaker configures an endpoint's circuit breaker.
type Breaker struct {
	Failures int           `yaml:"failures"` // failures in a row that open it; default 5
	Cooldown time.Duration `yaml:"cooldown"` // time until a probe; default 30s
}

// Task is a named use of AI.
type Task struct {
	Key                string    `yaml:"key"` // e.g. warehouse.inventory_photo; required
	Enabled            bool      `yaml:"enabled"`
	Label              string    `yaml:"label"`
	Purpose            string    `yaml:"purpose"`
	Needs              []string  `yaml:"needs"`
	Endpoints          []string  `yaml:"endpoints"` // endpoint names, in order of preference; required
	Limits             Limits    `yaml:"limits"`
	UserLimits         bool      `yaml:"user_limits"`         // default true; only false turns user limits off
	RequireUser        bool      `yaml:"require_user"`        // default false
	Sources            []string  `yaml:"sources"`             // nil: no source check
	MaxCallsPerHour    int       `yaml:"max_calls_per_hour"`  // 0: off
	MaxTokensPerCall   int       `yaml:"max_tokens_per_call"` // 0: off
	TypicalTokens      []int     `yaml:"typical_tokens"`      // nil, or [input, output]
	Trim               Trim      `yaml:"trim"`
	SelfFlag           bool      `yaml:"self_flag"`
	AutoBlockThreshold int       `yaml:"auto_block_threshold"` // 0: off
	Private            bool      `yaml:"private"`
	BlockGroup         string    `yaml:"block_group"` // default: the task's key
	Watchers           []Watcher `yaml:"watchers"`
	Thresholds         []float64 `yaml:"thresholds"` // default [0.8, 1.0]
}

// Trim configures history trimming for a task.
type Trim struct {
	Enabled                bool    `yaml:"enabled"`                   // default true
	ReserveOutput          int     `yaml:"reserve_output"`            // default 1024
	AttachmentsShare       float64 `yaml:"attachments_share"`         // default 0.5; in (0, 1]
	DropEarlierToolResults bool    `yaml:"drop_earlier_tool_results"` // default false
}

// Watcher is told when a limit threshold is crossed.
type Watcher struct {
	Webhook string `yaml:"webhook"`
}

// Key is a client credential.
type Key struct {
	Name         string   `yaml:"name"`
	Secret       string   `yaml:"secret"`        // exactly one of Secret and SecretSHA256
	SecretSHA256 string   `yaml:"secret_sha256"` // lowercase hex after load
	Tasks        []string `yaml:"tasks"`         // task keys, or ["*"]
	User         string   `yaml:"user"`          // "": the caller names the user
	Source       string   `yaml:"source"`
}

// Limits is a task's limits: the shape of `limits:` in a task and of the
// admin API's PUT /admin/limits/{task} body.
type Limits struct {
	Task ScopeLimits `yaml:"task"`
	User ScopeLimits `yaml:"user"`
}

// ScopeLimits holds the limits of one scope per unit and period.
type ScopeLimits struct {
	Requests Periods `yaml:"requests"`
	Tokens   Periods `yaml:"tokens"`
	Money    Periods `yaml:"money"` // values in micro-dollars, parsed from dollar strings
}

// Periods holds one limit per calendar period; nil means no limit.
// For money the values are integer micro-dollars.
type Periods struct {
	Minute *int64 `yaml:"minute"`
	Hour   *int64 `yaml:"hour"`
	Day    *int64 `yaml:"day"`
	Month  *int64 `yaml:"month"`
}

// Scope, unit and period names as they appear in config, errors and metrics.
const (
	ScopeTask = "task"
	ScopeUser = "user"

	UnitRequests = "requests"
	UnitTokens   = "tokens"
	UnitMoney    = "money"

	PeriodMinute = "minute"
	PeriodHour   = "hour"
	PeriodDay    = "day"
	PeriodMonth  = "month"
)

// ScopeNames, UnitNames and PeriodNames list the names in their canonical
// order (the order used for ties: task before user, shorter period first).
var (
	ScopeNames  = []string{ScopeTask, ScopeUser}
	UnitNames   = []string{UnitRequests, UnitTokens, UnitMoney}
	PeriodNames = []string{PeriodMinute, PeriodHour, PeriodDay, PeriodMonth}
)

// Limit is one configured limit, flattened.
type Limit struct {
	Scope  string // ScopeTask or ScopeUser
	Unit   string // UnitRequests, UnitTokens or UnitMoney
	Period string // PeriodMinute … PeriodMonth
	Value  int64  // count, tokens, or micro-dollars
}

// List flattens the limits in canonical order: scope, unit, period.
func (l Limits) List() []Limit {
	var out []Limit
	for _, s := range []struct {
		name string
		sl   ScopeLimits
	}{{ScopeTask, l.Task}, {ScopeUser, l.User}} {
		for _, u := range []struct {
			name string
			p    Periods
		}{{UnitRequests, s.sl.Requests}, {UnitTokens, s.sl.Tokens}, {UnitMoney, s.sl.Money}} {
			for _, p := range []struct {
				name string
				v    *int64
			}{{PeriodMinute, u.p.Minute}, {PeriodHour, u.p.Hour}, {PeriodDay, u.p.Day}, {PeriodMonth, u.p.Month}} {
				if p.v != nil {
					out = append(out, Limit{Scope: s.name, Unit: u.name, Period: p.name, Value: *p.v})
				}
			}
		}
	}
	return out
}

// Size is a byte count written like "32MiB", "512KiB", "1GB" or a plain integer.
type Size int64

// Needs and capabilities.
const (
	NeedVision      = "vision"
	NeedFileInput   = "file_input"
	NeedImageOutput = "image_output"
	NeedTools       = "tools"
	NeedJSONSchema  = "json_schema"
	NeedJSON        = "json" // soft
)

// HardNeeds are the needs an endpoint must have to serve a call.
var HardNeeds = []string{NeedVision, NeedFileInput, NeedImageOutput, NeedTools, NeedJSONSchema}

// IsHardNeed reports whether n is a hard need.
func IsHardNeed(n string) bool {
	for _, h := range HardNeeds {
		if h == n {
			return true
		}
	}
	return false
}
