package config

// Endpoint returns the endpoint with the name, if any.
func (c *Config) Endpoint(name string) (*Endpoint, bool) {
	for i := range c.Endpoints {
		if c.Endpoints[i].Name == name {
			return &c.Endpoints[i], true
		}
	}
	return nil, false
}

// Task returns the task with the key, if any.
func (c *Config) Task(key string) (*Task, bool) {
	for i := range c.Tasks {
		if c.Tasks[i].Key == key {
			return &c.Tasks[i], true
		}
	}
	return nil, false
}

// Typical returns the input and output tokens of a typical call, if the
// task gives typical_tokens.
func (t *Task) Typical() (input, output int64, ok bool) {
	if len(t.TypicalTokens) != 2 {
		return 0, 0, false
	}
	return int64(t.TypicalTokens[0]), int64(t.TypicalTokens[1]), true
}

// Has reports whether the endpoint has the capability.
func (e *Endpoint) Has(capability string) bool {
	for _, c := range e.Capabilities {
		if c == capability {
			return true
		}
	}
	return false
}
