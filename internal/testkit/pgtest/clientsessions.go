package pgtest

import (
	"context"
	"errors"
)

// cronClientHost is where pg_cron's client sessions log in: the IPv6
// loopback address, which nothing else here uses, so that pg_hba.conf (which
// matches the client's address, here the same) can ask them, and only them,
// for a password.
const cronClientHost = "::1"

// StartAuroraCronClientSessions starts a cluster as StartAurora does, with
// the real pg_cron (Debian's 15) running jobs over client sessions
// (cron.use_background_workers off, pg_cron's own default): each job logs
// in with libpq over TCP as its user, and the server asks it for a
// password. A user without one (an IAM-only user) cannot run a job, as on
// Aurora when the parameter group leaves the setting off: the run fails
// with a connection error in cron.job_run_details. Every other login on
// 127.0.0.1 is trusted, as in StartAurora.
func StartAuroraCronClientSessions(ctx context.Context, opts AuroraOptions) (*Aurora, error) {
	if opts.FakeCron || opts.NoCron {
		return nil, errors.New("pgtest: client-session pg_cron needs the real pg_cron")
	}
	settings := map[string]string{}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	settings["cron.use_background_workers"] = "off"
	settings["cron.host"] = "'" + cronClientHost + "'"
	settings["listen_addresses"] = "'127.0.0.1," + cronClientHost + "'"
	settings["password_encryption"] = "'scram-sha-256'"
	opts.Settings = settings
	opts.HBA = []string{
		"host all all " + cronClientHost + "/128 scram-sha-256",
		"host all all 127.0.0.1/32 trust",
		"host replication all 127.0.0.1/32 trust",
	}
	return StartAurora(ctx, opts)
}
