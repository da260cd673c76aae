package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// validate checks a decoded config and fills what depends on other fields.
func (d *decoder) validate(c *Config) {
	d.address("listen", c.Listen)
	d.address("admin_listen", c.AdminListen)
	if c.BodyLimit <= 0 {
		d.at("body_limit", "must be positive")
	}
	if loc, err := time.LoadLocation(c.Timezone); err != nil {
		d.at("timezone", "unknown time zone %q (use an IANA name like \"Europe/Berlin\" or \"UTC\")", c.Timezone)
	} else {
		c.Location = loc
	}
	if c.Store.Redis != "" {
		if _, err := ParseRedisURL(c.Store.Redis); err != nil {
			d.at("store.redis", "%v", err)
		}
	}
	if c.Store.OnError != FailClosed && c.Store.OnError != FailOpen {
		d.at("store.on_error", "must be %s or %s, not %q", FailClosed, FailOpen, c.Store.OnError)
	}
	if c.Store.Timeout <= 0 {
		d.at("store.timeout", "must be positive")
	}

	endpoints := map[string]int{} // name → index
	for i := range c.Endpoints {
		d.validateEndpoint(&c.Endpoints[i], fmt.Sprintf("endpoints[%d]", i), i, endpoints)
	}
	tasks := map[string]int{}
	for i := range c.Tasks {
		d.validateTask(c, &c.Tasks[i], fmt.Sprintf("tasks[%d]", i), i, tasks, endpoints)
	}
	d.validateKeys(c, tasks)
}

func (d *decoder) address(path, addr string) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		d.at(path, "%q is not a listen address like \":8080\" or \"127.0.0.1:9090\"", addr)
	}
}

// httpURL checks an http(s) URL and returns a message, or "".
func httpURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Sprintf("%q is not an http:// or https:// URL", s)
	}
	return ""
}

func (d *decoder) required(path, what string) {
	d.at(path, "is required (%s)", what)
}

func (d *decoder) validateEndpoint(e *Endpoint, p string, i int, names map[string]int) {
	switch first, dup := names[e.Name]; {
	case e.Name == "":
		d.required(p+".name", "the endpoint's name, used by tasks")
	case dup:
		d.at(p+".name", "endpoint name %q is already used by endpoints[%d]", e.Name, first)
	default:
		names[e.Name] = i
	}
	if e.BaseURL == "" {
		d.required(p+".base_url", "the API's base URL, like https://api.openai.com/v1")
	} else if msg := httpURL(e.BaseURL); msg != "" {
		d.at(p+".base_url", "%s", msg)
	}
	if e.Model == "" {
		d.required(p+".model", "the model name sent upstream")
	}
	switch {
	case !d.has(p + ".context_window"):
		d.required(p+".context_window", "the model's context window in tokens")
	case e.ContextWindow <= 0:
		d.at(p+".context_window", "must be positive")
	}
	switch {
	case e.MaxOutputTokens <= 0:
		d.at(p+".max_output_tokens", "must be positive")
	case e.ContextWindow > 0 && e.MaxOutputTokens >= e.ContextWindow:
		d.at(p+".max_output_tokens", "must be less than context_window (%d), got %d", e.ContextWindow, e.MaxOutputTokens)
	}
	for j, c := range e.Capabilities {
		if !slices.Contains(Capabilities, c) {
			d.at(index(p+".capabilities", j), "unknown capability %q (known: %s)", c, strings.Join(Capabilities, ", "))
		}
	}
	if !slices.Contains(Tokenizers, e.Tokenizer) {
		d.at(p+".tokenizer", "must be one of %s, not %q", strings.Join(Tokenizers, ", "), e.Tokenizer)
	}
	for _, t := range []struct {
		name string
		v    time.Duration
	}{{"timeout", e.Timeout}, {"connect_timeout", e.ConnectTimeout}, {"first_byte_timeout", e.FirstByteTimeout}, {"idle_timeout", e.IdleTimeout}, {"breaker.cooldown", e.Breaker.Cooldown}} {
		if t.v <= 0 {
			d.at(p+"."+t.name, "must be positive")
		}
	}
	if e.Breaker.Failures <= 0 {
		d.at(p+".breaker.failures", "must be at least 1")
	}
}

func (d *decoder) validateTask(c *Config, t *Task, p string, i int, keys, endpoints map[string]int) {
	switch first, dup := keys[t.Key]; {
	case t.Key == "":
		d.required(p+".key", `the task's name, like "warehouse.inventory_photo"`)
	case !TaskKeyPattern.MatchString(t.Key):
		d.at(p+".key", `task key %q must be the owning module or app, a dot, then the use, in lowercase, like "warehouse.inventory_photo" (each part: a-z, 0-9, _ and -, starting with a letter or digit)`, t.Key)
		keys[t.Key] = i // still known, so keys naming it do not add noise
	case dup:
		d.at(p+".key", "task key %q is already used by tasks[%d]", t.Key, first)
	default:
		keys[t.Key] = i
	}
	if t.BlockGroup == AllTasks {
		d.at(p+".block_group", `"*" means every group and cannot be a task's block group`)
	}

	// Endpoints and needs.
	var own []*Endpoint
	var ownNames []string
	if len(t.Endpoints) == 0 {
		if d.has(p+".endpoints") && !d.hasErrorAt(p+".endpoints") {
			d.at(p+".endpoints", "must name at least one endpoint")
		} else if !d.has(p + ".endpoints") {
			d.required(p+".endpoints", "the endpoints that serve the task, in order of preference")
		}
	}
	seen := map[string]bool{}
	for j, name := range t.Endpoints {
		ep := index(p+".endpoints", j)
		if seen[name] {
			d.at(ep, "endpoint %q is listed twice", name)
			continue
		}
		seen[name] = true
		k, ok := endpoints[name]
		if !ok {
			d.at(ep, "no endpoint is named %q%s", name, known(endpoints))
			continue
		}
		own = append(own, &c.Endpoints[k])
		ownNames = append(ownNames, name)
	}
	var hard []string
	for j, n := range t.Needs {
		if !slices.Contains(Capabilities, n) {
			d.at(index(p+".needs", j), "unknown need %q (known: %s)", n, strings.Join(Capabilities, ", "))
			continue
		}
		if IsHardNeed(n) && !slices.Contains(hard, n) {
			hard = append(hard, n)
		}
	}
	if len(own) > 0 && len(hard) > 0 {
		d.checkNeeds(t, p, hard, own, ownNames)
	}

	// Limits.
	if !t.UserLimits && !t.Limits.User.IsZero() {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%s.limits.user (line %d): task %q has user_limits: false; its user limits are ignored", p, d.line(p+".limits.user"), t.Key))
		t.Limits.User = ScopeLimits{}
	}

	if t.TypicalTokens != nil && len(t.TypicalTokens) != 2 && !d.hasErrorAt(p+".typical_tokens") {
		d.at(p+".typical_tokens", "must be two integers, [input, output], like [1500, 300]; got %d", len(t.TypicalTokens))
	}
	if s := t.Trim.AttachmentsShare; s <= 0 || s > 1 {
		d.at(p+".trim.attachments_share", "must be more than 0 and at most 1, got %g", s)
	}
	if t.SelfFlag && strings.TrimSpace(t.Purpose) == "" {
		d.at(p+".self_flag", "needs the task's purpose: the model is asked whether a request serves it")
	}
	for j, w := range t.Watchers {
		wp := index(p+".watchers", j)
		if w.Webhook == "" {
			d.required(wp+".webhook", "the URL told about thresholds")
		} else if msg := httpURL(w.Webhook); msg != "" {
			d.at(wp+".webhook", "%s", msg)
		}
	}
	for j, th := range t.Thresholds {
		if th <= 0 || th > 1 {
			d.at(index(p+".thresholds", j), "a threshold is a share of the limit, more than 0 and at most 1 (0.8 = 80%%), got %g", th)
		}
	}
}

// hasErrorAt reports whether an error was already recorded at path or an
// item of it (so a bad value is not reported twice).
func (d *decoder) hasErrorAt(path string) bool {
	for _, e := range d.errs {
		if e.Path == path || strings.HasPrefix(e.Path, path+"[") {
			return true
		}
	}
	return false
}

// checkNeeds reports hard needs that no endpoint of the task can meet.
func (d *decoder) checkNeeds(t *Task, p string, hard []string, own []*Endpoint, names []string) {
	list := strings.Join(names, ", ")
	missing := false
	for _, n := range hard {
		met := false
		for _, e := range own {
			if slices.Contains(e.Capabilities, n) {
				met = true
				break
			}
		}
		if !met {
			missing = true
			d.at(p+".needs", "no endpoint of task %q has %q (endpoints: %s)", t.Key, n, list)
		}
	}
	if missing {
		return
	}
	for _, e := range own {
		if hasAll(e.Capabilities, hard) {
			return
		}
	}
	d.at(p+".needs", "no endpoint of task %q has all of %s (endpoints: %s)", t.Key, quoteAll(hard), list)
}

func hasAll(caps, needs []string) bool {
	for _, n := range needs {
		if !slices.Contains(caps, n) {
			return false
		}
	}
	return true
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}

// known lists the names of a set for a message, if there are few.
func known(set map[string]int) string {
	if len(set) == 0 || len(set) > 10 {
		return ""
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.Sort(names)
	return " (known: " + strings.Join(names, ", ") + ")"
}

func (d *decoder) validateKeys(c *Config, tasks map[string]int) {
	names := map[string]int{}
	hashes := map[string]int{} // secret SHA-256 hex → key index
	for i := range c.Keys {
		k := &c.Keys[i]
		p := fmt.Sprintf("keys[%d]", i)
		switch first, dup := names[k.Name]; {
		case k.Name == "":
			d.required(p+".name", "the key's name, used in logs")
		case dup:
			d.at(p+".name", "key name %q is already used by keys[%d]", k.Name, first)
		default:
			names[k.Name] = i
		}

		hasSecret, hasHash := d.has(p+".secret"), d.has(p+".secret_sha256")
		hash, hashPath := "", ""
		switch {
		case hasSecret && hasHash:
			d.at(p, "has both secret and secret_sha256; give exactly one")
		case !hasSecret && !hasHash:
			d.at(p, "needs a secret or a secret_sha256 (the hex SHA-256 of the secret)")
		case hasSecret:
			if k.Secret == "" {
				d.at(p+".secret", "is empty (is its environment variable set to an empty value?)")
				break
			}
			sum := sha256.Sum256([]byte(k.Secret))
			hash, hashPath = hex.EncodeToString(sum[:]), p+".secret"
		default:
			if len(k.SecretSHA256) != 64 || !isHex(k.SecretSHA256) {
				d.at(p+".secret_sha256", "must be 64 hex digits (the SHA-256 of the secret), got %d characters", len(k.SecretSHA256))
				break
			}
			hash, hashPath = k.SecretSHA256, p+".secret_sha256"
		}
		if hash != "" {
			if first, dup := hashes[hash]; dup {
				d.at(hashPath, "the same secret as keys[%d] (%q); every key needs its own", first, c.Keys[first].Name)
			} else {
				hashes[hash] = i
			}
		}

		if len(k.Tasks) == 0 && !d.hasErrorAt(p+".tasks") {
			d.at(p+".tasks", `must name at least one task (or "*" for every task)`)
		}
		for j, t := range k.Tasks {
			if t == AllTasks {
				continue
			}
			if _, ok := tasks[t]; !ok {
				d.at(index(p+".tasks", j), "no task has the key %q", t)
			}
		}
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
