package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Redis connection modes of a store URL.
const (
	RedisSingle   = "single"   // redis:// or rediss://
	RedisSentinel = "sentinel" // redis-sentinel://
	RedisCluster  = "cluster"  // redis-cluster://
)

// RedisTarget is a parsed store.redis URL.
//
// Accepted forms:
//
//	redis://[user:password@]host[:6379][/db]
//	rediss://[user:password@]host[:6379][/db]               (TLS)
//	redis-sentinel://[user:password@]host1:26379,host2:26379/mastername[?db=0&sentinel_username=u&sentinel_password=p&tls=true]
//	redis-cluster://[user:password@]host1:6379,host2:6379[?tls=true]
//
// The user and password are Redis's own (for a Sentinel setup, the
// master's and replicas'); sentinel_username and sentinel_password
// authenticate to the Sentinels. A missing port is 6379 (26379 for a
// Sentinel). redis:// and rediss:// URLs may carry go-redis's own query
// options, left to redis.ParseURL (use URL); the Sentinel and Cluster forms
// accept only the query parameters shown.
type RedisTarget struct {
	Mode             string   // RedisSingle, RedisSentinel or RedisCluster
	URL              string   // the URL as written
	Addrs            []string // host:port of the server, the Sentinels or the cluster seeds
	Username         string
	Password         string
	DB               int
	MasterName       string // Sentinel only
	SentinelUsername string // Sentinel only
	SentinelPassword string // Sentinel only
	TLS              bool
}

// ParseRedisURL parses and checks a store.redis URL (see RedisTarget).
func ParseRedisURL(raw string) (RedisTarget, error) {
	t := RedisTarget{URL: raw}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return t, fmt.Errorf("%s is not a redis://, rediss://, redis-sentinel:// or redis-cluster:// URL", redact(raw))
	}
	defPort := "6379"
	switch scheme {
	case "redis":
		t.Mode = RedisSingle
	case "rediss":
		t.Mode, t.TLS = RedisSingle, true
	case "redis-sentinel":
		t.Mode, defPort = RedisSentinel, "26379"
	case "redis-cluster":
		t.Mode = RedisCluster
	default:
		return t, fmt.Errorf("scheme %q: want redis://, rediss://, redis-sentinel:// or redis-cluster://", scheme)
	}
	// Split authority, path and query by hand: url.Parse refuses host lists.
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		ui := authority[:at]
		authority = authority[at+1:]
		u, p, hasP := strings.Cut(ui, ":")
		var err error
		if t.Username, err = url.PathUnescape(u); err != nil {
			return t, fmt.Errorf("bad user name in redis URL: %w", err)
		}
		if hasP {
			if t.Password, err = url.PathUnescape(p); err != nil {
				return t, fmt.Errorf("bad password in redis URL: %w", err)
			}
		}
	}
	p, rawQuery, _ := strings.Cut(pathQuery, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return t, fmt.Errorf("bad query in redis URL: %w", err)
	}
	hosts := strings.Split(authority, ",")
	if t.Mode == RedisSingle && len(hosts) > 1 {
		return t, fmt.Errorf("a %s:// URL names one host; use redis-sentinel:// or redis-cluster:// for several", scheme)
	}
	for _, h := range hosts {
		if h == "" {
			return t, fmt.Errorf("redis URL has an empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.Trim(h, "[]"), defPort
		}
		if host == "" || strings.ContainsAny(host, " /") {
			return t, fmt.Errorf("redis URL has a bad host %q", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("redis URL has a bad port in %q", h)
		}
		t.Addrs = append(t.Addrs, net.JoinHostPort(host, port))
	}
	p = strings.TrimPrefix(p, "/")
	switch t.Mode {
	case RedisSingle:
		if p != "" {
			if t.DB, err = strconv.Atoi(p); err != nil || t.DB < 0 {
				return t, fmt.Errorf("redis URL path %q is not a database number", p)
			}
		}
		return t, nil // query options are go-redis's
	case RedisSentinel:
		if p == "" || strings.Contains(p, "/") {
			return t, fmt.Errorf("a redis-sentinel:// URL names the master: redis-sentinel://host1:26379,host2:26379/mymaster")
		}
		t.MasterName = p
	case RedisCluster:
		if p != "" {
			return t, fmt.Errorf("a redis-cluster:// URL has no path (a cluster has only database 0)")
		}
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case k == "db" && t.Mode == RedisSentinel:
			if t.DB, err = strconv.Atoi(v); err != nil || t.DB < 0 {
				return t, fmt.Errorf("redis URL db=%q is not a database number", v)
			}
		case k == "sentinel_username" && t.Mode == RedisSentinel:
			t.SentinelUsername = v
		case k == "sentinel_password" && t.Mode == RedisSentinel:
			t.SentinelPassword = v
		case k == "tls":
			if t.TLS, err = strconv.ParseBool(v); err != nil {
				return t, fmt.Errorf("redis URL tls=%q is not true or false", v)
			}
		default:
			return t, fmt.Errorf("redis URL has an unknown parameter %q", k)
		}
	}
	return t, nil
}

// redact hides a password in a URL-like string for messages.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		if len(s) > 40 {
			return fmt.Sprintf("%q", s[:40]+"…")
		}
		return fmt.Sprintf("%q", s)
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = "…@" + rest[at+1:]
	}
	return fmt.Sprintf("%q", scheme+"://"+rest)
}
