package dbpool_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

// withParams returns rawURL with the query parameters added.
func withParams(t *testing.T, rawURL string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestURLPoolSettingsHonouredOrRefused: in url mode the pool size and the
// query mode a pgx URL carries are applied; a contradiction with the
// variables, a mode dbpool does not offer, and a pool setting dbpool sets
// itself are refused with the setting to use. None is silently replaced.
func TestURLPoolSettingsHonouredOrRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	open := func(t *testing.T, env map[string]string) (*dbpool.Config, error) {
		t.Helper()
		cfg, err := dbpool.ConfigFromEnv(getenv(env))
		if err != nil {
			return nil, err
		}
		pool, err := dbpool.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(pool.Close)
		got := pool.Config()
		return &dbpool.Config{MaxConns: got.MaxConns, QueryMode: map[pgx.QueryExecMode]dbpool.QueryMode{
			pgx.QueryExecModeExec: dbpool.QueryModeExec, pgx.QueryExecModeCacheStatement: dbpool.QueryModePrepared,
		}[got.ConnConfig.DefaultQueryExecMode]}, nil
	}

	t.Run("honoured", func(t *testing.T) {
		got, err := open(t, map[string]string{"DB_AUTH": "url", "DATABASE_URL": withParams(t, base, map[string]string{
			"pool_max_conns": "16", "default_query_exec_mode": "cache_statement",
		})})
		require.NoError(t, err)
		require.Equal(t, int32(16), got.MaxConns)
		require.Equal(t, dbpool.QueryModePrepared, got.QueryMode)
	})
	t.Run("the same as the variables", func(t *testing.T) {
		got, err := open(t, map[string]string{"DB_AUTH": "url", "DB_MAX_CONNS": "16", "DB_QUERY_MODE": "exec",
			"DATABASE_URL": withParams(t, base, map[string]string{"pool_max_conns": "16", "default_query_exec_mode": "exec"})})
		require.NoError(t, err)
		require.Equal(t, int32(16), got.MaxConns)
		require.Equal(t, dbpool.QueryModeExec, got.QueryMode)
	})
	for _, c := range []struct {
		name   string
		params map[string]string
		env    map[string]string
		says   []string
	}{
		{"pool size against DB_MAX_CONNS", map[string]string{"pool_max_conns": "16"}, map[string]string{"DB_MAX_CONNS": "4"}, []string{"pool_max_conns=16", "DB_MAX_CONNS is 4"}},
		{"query mode against DB_QUERY_MODE", map[string]string{"default_query_exec_mode": "cache_statement"}, map[string]string{"DB_QUERY_MODE": "exec"}, []string{"default_query_exec_mode=cache_statement", "DB_QUERY_MODE is exec"}},
		{"a query mode dbpool does not offer", map[string]string{"default_query_exec_mode": "simple_protocol"}, nil, []string{"simple_protocol", "DB_QUERY_MODE=exec"}},
		{"a pool size that is no number", map[string]string{"pool_max_conns": "many"}, nil, []string{"pool_max_conns=many"}},
		{"a setting dbpool sets itself", map[string]string{"pool_max_conn_idle_time": "1m"}, nil, []string{"pool_max_conn_idle_time", "Config.MaxConnIdleTime"}},
		{"connections kept open", map[string]string{"pool_min_conns": "2"}, nil, []string{"pool_min_conns"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"DB_AUTH": "url", "DATABASE_URL": withParams(t, base, c.params)}
			for k, v := range c.env {
				env[k] = v
			}
			_, err := dbpool.ConfigFromEnv(getenv(env))
			require.ErrorIs(t, err, dbpool.ErrConfig)
			for _, s := range c.says {
				require.ErrorContains(t, err, s)
			}
			// A Config built by hand is refused the same way by New.
			cfg := dbpool.Config{Auth: dbpool.AuthURL, URL: env["DATABASE_URL"]}
			if c.env["DB_MAX_CONNS"] != "" {
				cfg.MaxConns = 4
			}
			if c.env["DB_QUERY_MODE"] != "" {
				cfg.QueryMode = dbpool.QueryModeExec
			}
			_, err = dbpool.New(ctx, cfg)
			require.ErrorIs(t, err, dbpool.ErrConfig)
		})
	}
}
