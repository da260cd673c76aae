package tasks

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"taskgate/config"
)

// Registry is the compiled, immutable view of one config. A reload builds a
// new Registry; calls in flight keep the one they started with.
type Registry struct {
	cfg       *config.Config
	tasks     map[string]*Task
	ordered   []*Task
	endpoints map[string]*Endpoint
	keys      []*Key

	// Secrets that matched a key, found again by a seeded hash and
	// confirmed by a constant-time comparison, without SHA-256: a map
	// replaced whole (copy on write) when a key is first used; at most one
	// entry a configured key.
	seed   maphash.Seed
	seen   atomic.Pointer[map[uint64]seenSecret]
	seenMu sync.Mutex
}

// seenSecret is a secret that matched key.
type seenSecret struct {
	secret []byte
	key    *Key
}

// Endpoint is an upstream endpoint with its capabilities as a set.
type Endpoint struct {
	config.Endpoint
	// Capabilities is config's capabilities as a set.
	Capabilities Needs
}

// Task is a configured task with its endpoints resolved.
type Task struct {
	config.Task
	// Endpoints are the task's endpoints in order of preference.
	Endpoints []*Endpoint
	// Declared is the task's declared needs.
	Declared Needs
	// Limits are the config limits in canonical order; user limits are left
	// out when the task has user_limits: false.
	Limits []config.Limit
}

// Key is a client key that may call some tasks.
type Key struct {
	config.Key
	secretHash [32]byte
	allTasks   bool
	tasks      map[string]bool
	// Only is the key's only task, when it may call exactly one; else nil.
	Only *Task
}

// New compiles a validated config into a registry.
func New(cfg *config.Config) (*Registry, error) {
	r := &Registry{
		cfg:       cfg,
		tasks:     make(map[string]*Task, len(cfg.Tasks)),
		endpoints: make(map[string]*Endpoint, len(cfg.Endpoints)),
		seed:      maphash.MakeSeed(),
	}
	for i := range cfg.Endpoints {
		e := &Endpoint{Endpoint: cfg.Endpoints[i]}
		e.Capabilities = ParseNeeds(e.Endpoint.Capabilities)
		r.endpoints[e.Name] = e
	}
	for i := range cfg.Tasks {
		t := &Task{Task: cfg.Tasks[i]}
		t.Declared = ParseNeeds(t.Needs)
		for _, name := range t.Task.Endpoints {
			e, ok := r.endpoints[name]
			if !ok {
				return nil, fmt.Errorf("task %q: unknown endpoint %q", t.Key, name)
			}
			t.Endpoints = append(t.Endpoints, e)
		}
		for _, l := range t.Task.Limits.List() {
			if l.Scope == config.ScopeUser && !t.UserLimits {
				continue
			}
			t.Limits = append(t.Limits, l)
		}
		if t.BlockGroup == "" {
			t.BlockGroup = t.Key
		}
		r.tasks[t.Key] = t
		r.ordered = append(r.ordered, t)
	}
	for i := range cfg.Keys {
		k := &Key{Key: cfg.Keys[i], tasks: map[string]bool{}}
		if k.SecretSHA256 != "" {
			b, err := hex.DecodeString(k.SecretSHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("key %q: secret_sha256 is not 64 hex characters", k.Name)
			}
			copy(k.secretHash[:], b)
		} else {
			k.secretHash = sha256.Sum256([]byte(k.Secret))
		}
		for _, name := range k.Key.Tasks {
			if name == "*" {
				k.allTasks = true
				continue
			}
			if _, ok := r.tasks[name]; !ok {
				return nil, fmt.Errorf("key %q: unknown task %q", k.Name, name)
			}
			k.tasks[name] = true
		}
		switch {
		case k.allTasks && len(r.ordered) == 1:
			k.Only = r.ordered[0]
		case !k.allTasks && len(k.tasks) == 1:
			for name := range k.tasks {
				k.Only = r.tasks[name]
			}
		}
		r.keys = append(r.keys, k)
	}
	return r, nil
}

// Config is the config the registry was built from.
func (r *Registry) Config() *config.Config { return r.cfg }

// Task returns the task with the given key, or nil.
func (r *Registry) Task(key string) *Task { return r.tasks[key] }

// Tasks lists every task in config order.
func (r *Registry) Tasks() []*Task { return r.ordered }

// Endpoint returns the endpoint with the given name, or nil.
func (r *Registry) Endpoint(name string) *Endpoint { return r.endpoints[name] }

// Authenticate returns the key whose secret is secret, or nil. A secret
// not seen before is hashed once and compared with every key's hash in
// constant time, so the time taken says nothing about which key, if any,
// matched. A secret that matched before is found by a seeded 64-bit hash
// and confirmed with a constant-time comparison of the whole secret: only
// a caller who holds a key's secret can tell the two paths apart.
func (r *Registry) Authenticate(secret []byte) *Key {
	if len(secret) == 0 {
		return nil
	}
	h := maphash.Bytes(r.seed, secret)
	if m := r.seen.Load(); m != nil {
		if s, ok := (*m)[h]; ok && subtle.ConstantTimeCompare(secret, s.secret) == 1 {
			return s.key
		}
	}
	sum := sha256.Sum256(secret)
	var found *Key
	for _, k := range r.keys {
		if subtle.ConstantTimeCompare(sum[:], k.secretHash[:]) == 1 {
			found = k
		}
	}
	if found != nil {
		r.remember(h, secret, found)
	}
	return found
}

// remember adds a secret that matched k to the seen secrets.
func (r *Registry) remember(h uint64, secret []byte, k *Key) {
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	old := r.seen.Load()
	n := 0
	if old != nil {
		if _, ok := (*old)[h]; ok {
			return // this secret, or (a 2^-64 chance) another with its hash
		}
		n = len(*old)
	}
	if n >= len(r.keys) {
		return // one entry a key: never more, whatever is presented
	}
	m := make(map[uint64]seenSecret, n+1)
	if old != nil {
		for hh, s := range *old {
			m[hh] = s
		}
	}
	m[h] = seenSecret{secret: bytes.Clone(secret), key: k}
	r.seen.Store(&m)
}

// MayCall reports whether the key may call the task.
func (k *Key) MayCall(task string) bool { return k.allTasks || k.tasks[task] }

// Callable lists the tasks the key may call, in config order.
func (r *Registry) Callable(k *Key) []*Task {
	var out []*Task
	for _, t := range r.ordered {
		if k.MayCall(t.Key) {
			out = append(out, t)
		}
	}
	return out
}

// Prefer returns endpoints with the one whose name or model equals model
// moved to the front; the order is otherwise kept. A model that matches
// none leaves the order as it is.
func Prefer(endpoints []*Endpoint, model string) []*Endpoint {
	if model == "" || len(endpoints) < 2 {
		return endpoints
	}
	for i, e := range endpoints {
		if e.Name == model || e.Model == model {
			if i == 0 {
				return endpoints
			}
			out := make([]*Endpoint, 0, len(endpoints))
			out = append(out, e)
			out = append(out, endpoints[:i]...)
			return append(out, endpoints[i+1:]...)
		}
	}
	return endpoints
}

// EstimateOutput is the output tokens to assume for a call that states no
// maximum: the task's typical output, else the endpoint's max_output_tokens.
func (t *Task) EstimateOutput(e *Endpoint) int64 {
	if _, out, ok := t.Typical(); ok {
		return out
	}
	return int64(e.MaxOutputTokens)
}
