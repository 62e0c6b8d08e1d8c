package dbpool

import (
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// urlPoolSettings are the pgx settings a URL may carry that dbpool sets
// itself, each with what to use instead. pool_max_conns and
// default_query_exec_mode are honoured instead (fromURL).
var urlPoolSettings = map[string]string{
	"pool_min_conns":                "dbpool keeps no connection open on purpose; remove it",
	"pool_min_idle_conns":           "dbpool keeps no connection open on purpose; remove it",
	"pool_max_conn_lifetime":        "remove it and set Config.MaxConnLifetime",
	"pool_max_conn_lifetime_jitter": "remove it: the jitter is a tenth of Config.MaxConnLifetime",
	"pool_max_conn_idle_time":       "remove it and set Config.MaxConnIdleTime",
	"pool_health_check_period":      "remove it: dbpool pings a connection idle for Config.PingAfterIdle before its use",
	"pool_ping_timeout":             "remove it and set Config.PingTimeout",
	"statement_cache_capacity":      "remove it: DB_QUERY_MODE decides the statement cache",
	"description_cache_capacity":    "remove it: DB_QUERY_MODE decides the description cache",
}

// fromURL returns c with the pool settings that its URL carries applied:
// pool_max_conns as MaxConns and default_query_exec_mode (exec or
// cache_statement) as QueryMode. A setting that contradicts the Config's,
// or one that dbpool sets itself, is refused with an error that names
// what to use instead. It is never silently replaced.
func (c Config) fromURL() (Config, error) {
	if c.Auth != AuthURL {
		return c, nil
	}
	pc, err := pgconn.ParseConfig(c.URL)
	if err != nil {
		return c, configErr("DATABASE_URL", "is not a valid PostgreSQL URL: %v", err)
	}
	params := pc.RuntimeParams
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if advice, ok := urlPoolSettings[name]; ok {
			return c, configErr("DATABASE_URL", "holds %s, which dbpool sets itself: %s", name, advice)
		}
	}
	if s, ok := params["pool_max_conns"]; ok {
		n, err := strconv.ParseInt(s, 10, 32)
		switch {
		case err != nil || n < 1:
			return c, configErr("DATABASE_URL", "holds pool_max_conns=%s: use a whole number of at least 1, or remove it and set DB_MAX_CONNS", s)
		case c.MaxConns != 0 && int32(n) != c.MaxConns:
			return c, configErr("DATABASE_URL", "holds pool_max_conns=%d but DB_MAX_CONNS is %d: keep one of them", n, c.MaxConns)
		}
		c.MaxConns = int32(n)
	}
	if s, ok := params["default_query_exec_mode"]; ok {
		var mode QueryMode
		switch s {
		case "exec":
			mode = QueryModeExec
		case "cache_statement":
			mode = QueryModePrepared
		default:
			return c, configErr("DATABASE_URL", "holds default_query_exec_mode=%s, which dbpool does not offer: remove it and set DB_QUERY_MODE=%s (through any pooler) or %s (direct connections only)", s, QueryModeExec, QueryModePrepared)
		}
		if c.QueryMode != "" && c.QueryMode != mode {
			return c, configErr("DATABASE_URL", "holds default_query_exec_mode=%s but DB_QUERY_MODE is %s: keep one of them", s, c.QueryMode)
		}
		c.QueryMode = mode
	}
	return c, nil
}
