package config

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"
	_ "time/tzdata" // zone data for minimal images without /usr/share/zoneinfo

	"gopkg.in/yaml.v3"
)

// Defaults of the schema, set before each section is decoded.
const (
	DefaultListen             = ":8080"
	DefaultAdminListen        = "127.0.0.1:9090"
	DefaultBodyLimit     Size = 32 << 20
	DefaultTimezone           = "UTC"
	DefaultShutdownGrace      = 30 * time.Second
	DefaultClientTimeout      = 60 * time.Second
	DefaultKeyPrefix          = "taskgate:"
	DefaultStoreTimeout       = 250 * time.Millisecond

	DefaultTokenizer        = TokenizerO200k
	DefaultMaxOutputTokens  = 4096
	DefaultTimeout          = 120 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
	DefaultFirstByteTimeout = 60 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultBreakerFailures  = 5
	DefaultBreakerCooldown  = 30 * time.Second

	DefaultReserveOutput    = 1024
	DefaultAttachmentsShare = 0.5
)

// DefaultThresholds are a task's thresholds when none are given.
var DefaultThresholds = []float64{0.8, 1.0}

// Tokenizer names.
const (
	TokenizerO200k    = "o200k_base"
	TokenizerCL100k   = "cl100k_base"
	TokenizerEstimate = "estimate"
)

// Tokenizers lists the valid tokenizer names.
var Tokenizers = []string{TokenizerO200k, TokenizerCL100k, TokenizerEstimate}

// Capabilities lists every known capability (and need), hard ones first.
var Capabilities = []string{NeedVision, NeedFileInput, NeedImageOutput, NeedTools, NeedJSONSchema, NeedJSON}

// AllTasks in a key's tasks lets the key call every task.
const AllTasks = "*"

// TaskKeyPattern is the form of a task key: lowercase segments of letters,
// digits, '_' and '-', each starting with a letter or digit, joined by dots,
// at least two (the owning module or app, then the use): warehouse.inventory_photo.
var TaskKeyPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)+$`)

// Load reads the file at path and parses it (see Parse), looking variables
// up in the process environment. Config.Path is set to path. Problems with
// the content come back as Errors.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	c, err := Parse(data, nil)
	if err != nil {
		return nil, err
	}
	c.Path = path
	return c, nil
}

// Parse decodes, defaults and validates a configuration. ${VAR} in a value
// is replaced by lookupEnv(VAR) (nil: os.LookupEnv); an unset variable is an
// error; "$$" is a literal "$" in a value. Variables are replaced in the
// values of the parsed document, never in keys or comments, so a value
// cannot change the file's structure (see env.go). Every problem found is returned together as Errors.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	d := &decoder{lookupEnv: lookupEnv}
	data, d.refs = placeholders(data)
	root, ok := d.parseDocument(data)
	if !ok {
		return nil, d.errs.sorted()
	}
	d.expandNode(root, "")
	c := &Config{}
	d.config(root, c)
	if !d.stop {
		d.validate(c)
	}
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return c, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// parseDocument parses YAML text into its root node.
func (d *decoder) parseDocument(data []byte) (*yaml.Node, bool) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			d.add("", 0, "the file is empty")
			return nil, false
		}
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		d.add("", line, "bad YAML: "+stripYAMLPrefix(msg))
		return nil, false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.add("", extra.Line, "more than one YAML document in the file")
		return nil, false
	}
	if len(doc.Content) == 0 {
		d.add("", 0, "the file is empty")
		return nil, false
	}
	return doc.Content[0], true
}

func stripYAMLPrefix(s string) string {
	if len(s) > 6 && s[:6] == "yaml: " {
		return s[6:]
	}
	return s
}

// config decodes the top level, with defaults set first.
func (d *decoder) config(n *yaml.Node, c *Config) {
	c.Listen = DefaultListen
	c.AdminListen = DefaultAdminListen
	c.BodyLimit = DefaultBodyLimit
	c.Timezone = DefaultTimezone
	c.ShutdownGrace = DefaultShutdownGrace
	c.ClientTimeout = DefaultClientTimeout
	c.Store = Store{KeyPrefix: DefaultKeyPrefix, OnError: FailClosed, Timeout: DefaultStoreTimeout, Leases: true}

	if r := d.resolve(n); r != nil && r.Kind != yaml.MappingNode && !isNull(r) {
		d.errorf(r, "", "the file must be a mapping of settings (listen, store, endpoints, tasks, keys, …), not %s", kindOf(r))
		return
	}
	d.mapping(n, "", map[string]field{
		"listen":         d.str(&c.Listen),
		"admin_listen":   d.str(&c.AdminListen),
		"admin_token":    d.str(&c.AdminToken),
		"body_limit":     d.sizef(&c.BodyLimit),
		"timezone":       d.str(&c.Timezone),
		"shutdown_grace": d.durationf(&c.ShutdownGrace),
		"client_timeout": d.durationf(&c.ClientTimeout),
		"store": func(n *yaml.Node, path string) {
			d.mapping(n, path, map[string]field{
				"redis":      d.str(&c.Store.Redis),
				"key_prefix": d.str(&c.Store.KeyPrefix),
				"on_error":   d.str(&c.Store.OnError),
				"timeout":    d.durationf(&c.Store.Timeout),
				"leases":     d.boolf(&c.Store.Leases),
			})
		},
		"endpoints": func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				c.Endpoints = append(c.Endpoints, d.endpoint(n, path))
			})
		},
		"tasks": func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				c.Tasks = append(c.Tasks, d.task(n, path))
			})
		},
		"keys": func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string, _ int) {
				c.Keys = append(c.Keys, d.key(n, path))
			})
		},
	})
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	if c.Timezone == "" {
		c.Timezone = DefaultTimezone
	}
	if c.Store.KeyPrefix == "" {
		c.Store.KeyPrefix = DefaultKeyPrefix
	}
	if c.Store.OnError == "" {
		c.Store.OnError = FailClosed
	}
}
