// Package config owns taskgate's configuration: the schema of taskgate.yaml,
// loading with ${VAR} expansion, defaults, and validation that reports every
// error with its field path and line; the admin API's limits body
// (ParseLimits); and the money helpers the other packages share (dollar
// strings, micro-dollars, prices and costs).
//
// Loading: Load reads a file and Parse decodes bytes through yaml.Node, so
// every problem carries a line. ${VAR} is replaced by the environment
// variable VAR in the values of the parsed document (never in keys or
// comments; a value cannot change the structure of the file); "$$" is a
// literal "$"; an unset variable is an error naming it. Unknown fields are
// errors at any depth; every problem of a file is collected and returned
// together as Errors, each rendered "PATH (line N): message" with paths
// counted from 0 (tasks[1].limits.user.money.day).
//
// Defaults (the Default* constants) are set before a section is decoded,
// so an absent field and an explicit null keep the default and only a
// written value replaces it: enabled, user_limits and trim.enabled default
// to true and only false turns them off; thresholds default to [0.8, 1.0]
// and an explicit [] means none; block_group defaults to the task's key.
// User limits on a task with user_limits: false are dropped with a warning
// in Config.Warnings.
//
// Money: limits are dollar strings ("20.00") held as integer micro-dollars,
// at most six decimal places; prices are exact decimals of dollars per
// million tokens (so tokens × price is micro-dollars). An integer or a float
// in a money field is refused (integers are ambiguous: older configs read
// them as millionths of a dollar; floats are inexact). A cost is rounded up
// once, to the micro-dollar.
//
// A Config is immutable once loaded: a reload builds a new one. The package
// imports no other taskgate package and nothing of the HTTP stack, Redis or
// Prometheus.
package config
