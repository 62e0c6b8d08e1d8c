package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/dbpool"
)

// TestRunRefusesBadSettings: a missing setting stops the function with an
// error naming it, before any connection and without a panic.
func TestRunRefusesBadSettings(t *testing.T) {
	t.Setenv("DB_AUTH", "")
	t.Setenv("DATABASE_URL", "")
	err := run()
	require.ErrorIs(t, err, dbpool.ErrConfig)
	require.ErrorContains(t, err, "DB_AUTH")
}
