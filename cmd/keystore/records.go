package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

// recordFlags are the flags of get, list and delete.
type recordFlags struct {
	store, databaseURL, schema, redisURL, redisPrefix string
	table, dynamoPrefix                               string

	sub, issuer, tenant, key, keyFormat, prefix string
	function, scope                             string
	user, recordKey                             string
	// rpcKey: -function names the gRPC and Connect adapters' records,
	// whose keys are read as the adapters read them.
	rpcKey bool

	logSecretEnv string

	status  string
	limit   int
	timeout time.Duration
}

func (f *recordFlags) define(fs *flag.FlagSet, command string) {
	fs.StringVar(&f.store, "store", "", "postgres, redis or dynamodb (default $IDEMPOTENCY_STORE, else postgres)")
	fs.StringVar(&f.databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL, or the dbpool variables)")
	fs.StringVar(&f.schema, "schema", "", "schema of the key store (default $IDEMPOTENCY_SCHEMA, else the connection's current schema)")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis URL (default $REDIS_URL)")
	fs.StringVar(&f.redisPrefix, "redis-prefix", "", "the Redis store's Options.KeyPrefix (default "+redisstore.DefaultKeyPrefix+")")
	fs.StringVar(&f.table, "table", "", "the DynamoDB table (default $IDEMPOTENCY_TABLE; region, credentials and endpoint are the AWS SDK's)")
	fs.StringVar(&f.dynamoPrefix, "dynamodb-prefix", "", "the DynamoDB store's Options.KeyPrefix (default none)")
	fs.StringVar(&f.sub, "sub", "", "the user's subject, as the authorizer gave it (a UUID, or auth0|…); with -function, the subject a gRPC or Connect call (-function rpc) or a Function scoped by SubjectUUID was made by")
	fs.StringVar(&f.issuer, "issuer", "", "with -sub: the token's issuer (iss), when the handler's user is idempotency.IssuerSubject(issuer, sub)")
	fs.StringVar(&f.tenant, "tenant", "", "with -sub or -function: the run's tenant (a Lambda invocation's TenantID, or the handler's Config.Tenant)")
	fs.StringVar(&f.key, "key", "", "the idempotency key as the client sent it; with -function, the function's key (an SQS message id, an event id)")
	fs.StringVar(&f.keyFormat, "key-format", "uuid", "the handler's Config.KeyFormat: uuid (KeyUUIDv4) or opaque (KeyOpaque)")
	fs.StringVar(&f.prefix, "prefix", "", "the handler's or function's KeyPrefix")
	fs.StringVar(&f.function, "function", "", "the FunctionConfig.Name of a Function or SQSHandler")
	fs.StringVar(&f.scope, "scope", "", "with -function: the FunctionConfig.Scope of the call")
	fs.StringVar(&f.user, "user", "", "the user id as the store keeps it (a UUID), instead of -sub or -function")
	fs.StringVar(&f.recordKey, "record-key", "", "the key as the store keeps it (a UUID), instead of -key")
	if command == "get" {
		fs.StringVar(&f.logSecretEnv, "log-secret-env", "", "the environment variable that holds the handler's Settings.LogDigestSecret: the record is shown with log_key and log_user, the digests its log lines carry")
	}
	if command == "list" {
		fs.StringVar(&f.status, "status", "", "in_progress or completed (default both)")
		fs.IntVar(&f.limit, "limit", idemstore.DefaultListLimit, "the most records listed, newest first")
	}
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "give up after this long")
}

// runRecords runs get, list or delete.
func runRecords(ctx context.Context, command string, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("keystore "+command, flag.ContinueOnError)
	fs.SetOutput(out)
	var f recordFlags
	f.define(fs, command)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	userID, key, err := f.ids(command == "list")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	store, closeStore, err := storeenv.Open(ctx, f.env(getenv), &storeenv.Options{
		Postgres: &pgstore.Options{Schema: f.schema},
		Redis:    &redisstore.Options{KeyPrefix: f.redisPrefix},
		DynamoDB: &dynamostore.Options{KeyPrefix: f.dynamoPrefix},
	})
	if err != nil {
		return err
	}
	defer closeStore()
	admin, ok := store.(idemstore.Admin)
	if !ok {
		return fmt.Errorf("the store %T cannot list or delete records", store)
	}
	err = f.records(ctx, command, admin, userID, key, out, getenv)
	return f.schemaHint(err, getenv)
}

// records runs get, list or delete on admin.
func (f *recordFlags) records(ctx context.Context, command string, admin idemstore.Admin, userID, key string, out io.Writer, getenv func(string) string) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	switch command {
	case "get":
		rec, found, err := admin.Get(ctx, userID, key)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("no record: user %s, key %s", userID, key)
		}
		m := f.recordJSON(rec, true)
		if f.logSecretEnv != "" {
			if err := f.logDigests(m, []byte(getenv(f.logSecretEnv)), userID); err != nil {
				return err
			}
		}
		return enc.Encode(m)
	case "delete":
		deleted, err := admin.Delete(ctx, userID, key)
		if err != nil {
			return err
		}
		if !deleted {
			return fmt.Errorf("no record: user %s, key %s", userID, key)
		}
		fmt.Fprintf(out, "deleted the record of user %s, key %s\n", userID, key)
		return nil
	}
	q := idemstore.ListQuery{UserID: userID, Status: idemstore.Status(f.status), Limit: f.limit}
	switch q.Status {
	case "", idemstore.StatusInProgress, idemstore.StatusCompleted:
	default:
		return fmt.Errorf("-status is %q: use in_progress or completed", f.status)
	}
	recs, err := admin.List(ctx, q)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if err := enc.Encode(f.recordJSON(rec, false)); err != nil {
			return err
		}
	}
	return nil
}

// ids returns the user id and key the store keeps for the record the flags
// name; for list, the key is not wanted and the user is optional. With
// -tenant, the user id is the tenant's (idempotency.TenantUserID).
func (f *recordFlags) ids(list bool) (userID, key string, err error) {
	if f.function != "" && f.sub != "" {
		if f.scope != "" {
			return "", "", errors.New("-sub names the scope of -function; pass -sub or -scope, not both")
		}
		// The gRPC and Connect adapters, and a Function whose Scope is its
		// user, scope a call by the subject's user id.
		f.scope = idempotency.SubjectUUID(subjectOf(f.issuer, f.sub))
		f.rpcKey = f.function == rpcName
	}
	if f.tenant != "" && f.sub == "" && f.function == "" {
		return "", "", errors.New("-tenant scopes -sub or -function; -user is the id as stored, with its tenant")
	}
	userID, key, err = f.untenantedIDs(list)
	if err != nil || userID == "" {
		return userID, key, err
	}
	return idempotency.TenantUserID(f.tenant, userID), key, nil
}

// untenantedIDs is ids without the tenant.
func (f *recordFlags) untenantedIDs(list bool) (userID, key string, err error) {
	named := 0
	sub := f.sub
	if f.function != "" {
		sub = "" // -sub is the function's scope
	}
	for _, v := range []string{sub, f.function, f.user} {
		if v != "" {
			named++
		}
	}
	if named > 1 {
		return "", "", errors.New("name the user once: -sub, -function or -user")
	}
	if f.issuer != "" && f.sub == "" {
		return "", "", errors.New("-issuer qualifies -sub; pass -sub too")
	}
	if f.function != "" {
		return f.functionIDs(list)
	}
	subject := subjectOf(f.issuer, f.sub)
	if list {
		if f.key != "" || f.recordKey != "" {
			return "", "", errors.New("list selects by user and status; -key and -record-key are for get and delete")
		}
		if f.sub != "" {
			return idempotency.SubjectUUID(subject), "", nil
		}
		return strings.ToLower(f.user), "", nil
	}
	if (f.key == "") == (f.recordKey == "") {
		return "", "", errors.New("name the key: -key (as sent) or -record-key (as the store keeps it)")
	}
	switch {
	case f.sub != "" && f.key != "":
		format := idempotency.KeyUUIDv4
		switch f.keyFormat {
		case "uuid":
		case "opaque":
			format = idempotency.KeyOpaque
		default:
			return "", "", fmt.Errorf("-key-format is %q: use uuid or opaque", f.keyFormat)
		}
		userID, key, err := idempotency.HTTPRecordID(f.prefix, format, subject, f.key)
		if err != nil && format == idempotency.KeyUUIDv4 {
			// The default format is the one a handler with opaque keys
			// does not use: say how to name the other.
			return "", "", fmt.Errorf("-key %q: %w; for another key format pass -key-format opaque (the handler's Config.KeyFormat: KeyOpaque)", f.key, err)
		}
		return userID, key, err
	case f.sub != "":
		return idempotency.SubjectUUID(subject), strings.ToLower(f.recordKey), nil
	case f.user != "" && f.recordKey != "":
		return strings.ToLower(f.user), strings.ToLower(f.recordKey), nil
	}
	return "", "", errors.New("name the user: -sub (with -key), -function (with -key), or -user (with -record-key)")
}

// schemaHint adds to an error that says the key store's table or functions
// are missing where the command looked for them, and how to look elsewhere.
func (f *recordFlags) schemaHint(err error, getenv func(string) string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction, pgerrcode.InvalidSchemaName:
	default:
		return err
	}
	where := "the connection's current schema"
	if s := cmp.Or(f.schema, getenv(storeenv.EnvSchema)); s != "" {
		where = "schema " + s
	}
	return fmt.Errorf("%w\nthe key store was looked for in %s: pass -schema NAME (or set %s) for the schema that holds it", err, where, storeenv.EnvSchema)
}

// rpcName is the function name the gRPC and Connect adapters keep their
// records under (grpcidem.Name).
const rpcName = "rpc"

// functionIDs is untenantedIDs for -function: the scope is -scope, or the
// user id of -sub. A gRPC or Connect call's key (-function rpc) is read as
// the adapters read it, in -key-format.
func (f *recordFlags) functionIDs(list bool) (userID, key string, err error) {
	if list {
		if f.key != "" || f.recordKey != "" {
			return "", "", errors.New("list selects by user and status; -key and -record-key are for get and delete")
		}
		// The user id does not depend on the key: any one will do.
		userID, _, err := idempotency.FunctionRecordID(f.prefix, f.function, f.scope, "-")
		return userID, "", err
	}
	switch {
	case f.recordKey != "":
		return "", "", errors.New("-function derives the record's key from -key; pass -user and -record-key instead to name it as stored")
	case f.key == "":
		return "", "", errors.New("name the key: -key, as the function's Key returned it or the call sent it")
	}
	k := f.key
	if f.rpcKey {
		format, err := f.format()
		if err != nil {
			return "", "", err
		}
		// The adapters keep a key in the form the HTTP header's parser
		// gives it (a UUID in lower case, an opaque key unquoted).
		_, k, err = idempotency.HTTPRecordID("", format, "-", f.key)
		if err != nil {
			return "", "", fmt.Errorf("-key %q: %w; for another key format pass -key-format opaque (the interceptor's Config.KeyFormat: KeyOpaque)", f.key, err)
		}
	}
	return idempotency.FunctionRecordID(f.prefix, f.function, f.scope, k)
}

// format is the key format -key-format names.
func (f *recordFlags) format() (idempotency.KeyFormat, error) {
	switch f.keyFormat {
	case "uuid":
		return idempotency.KeyUUIDv4, nil
	case "opaque":
		return idempotency.KeyOpaque, nil
	}
	return 0, fmt.Errorf("-key-format is %q: use uuid or opaque", f.keyFormat)
}

// logDigests adds to m the digests that the log lines of the record carry
// with Settings.LogDigestSecret secret (observe.Digest): of the key as the
// request sent it, normalised, and of the user id the record is kept under,
// or a function's key and scope.
func (f *recordFlags) logDigests(m map[string]any, secret []byte, userID string) error {
	if len(secret) < 32 {
		return fmt.Errorf("-log-secret-env %s holds %d bytes: Settings.LogDigestSecret is at least 32", f.logSecretEnv, len(secret))
	}
	switch {
	case f.function != "":
		m["log_key"] = observe.Digest(secret, f.key)
		if f.scope != "" {
			m["log_user"] = observe.Digest(secret, f.scope)
		}
	case f.key != "":
		key := f.key
		if f.keyFormat != "opaque" {
			key = strings.ToLower(key)
		}
		m["log_key"] = observe.Digest(secret, key)
		m["log_user"] = observe.Digest(secret, userID)
	default:
		m["log_user"] = observe.Digest(secret, userID)
	}
	return nil
}

// env is the environment with the flags laid over it, as storeenv reads it.
func (f *recordFlags) env(getenv func(string) string) func(string) string {
	return func(name string) string {
		switch {
		case name == storeenv.EnvStore && f.store != "":
			return f.store
		case name == "DATABASE_URL" && f.databaseURL != "":
			return f.databaseURL
		case name == redisstore.EnvURL && f.redisURL != "":
			return f.redisURL
		case name == "DB_AUTH" && getenv(name) == "" && (f.databaseURL != "" || getenv("DATABASE_URL") != ""):
			return "url" // a URL alone means the URL mode
		case name == storeenv.EnvTable && f.table != "":
			return f.table
		case name == redisstore.EnvURL && f.store != "" && f.store != storeenv.Redis:
			return "" // -store wins over a REDIS_URL set for something else
		case name == storeenv.EnvTable && f.store != "" && f.store != storeenv.DynamoDB:
			return "" // and over an IDEMPOTENCY_TABLE
		}
		return getenv(name)
	}
}

// Where a record's fingerprint (request_hash) comes from, when the flags
// say which kind of record it is.
const (
	hashOfRequest = "http_request"
	hashOfPayload = "function_payload"
)

// recordJSON is how a record is printed: what the store keeps, and beside
// its derived ids what the flags named it by (the subject, the function and
// its scope, the key as sent), so that an operator can tell whose it is.
// withKey says that rec is the one record -key named. Fields are only ever
// added.
func (f *recordFlags) recordJSON(rec idemstore.Record, withKey bool) map[string]any {
	m := map[string]any{
		"user_id":      rec.UserID,
		"key":          rec.Key,
		"status":       rec.Status,
		"owner":        rec.Owner,
		"request_hash": rec.Fingerprint,
		"created_at":   rec.CreatedAt.UTC().Format(time.RFC3339Nano),
		"expires_at":   rec.ExpiresAt.UTC().Format(time.RFC3339Nano),
	}
	if rec.Status == idemstore.StatusInProgress {
		m["lease_until"] = rec.LeaseUntil.UTC().Format(time.RFC3339Nano)
		m["lease_expired"] = !rec.LeaseUntil.After(time.Now())
	}
	if rec.Response != nil {
		m["response"] = rec.Response
	}
	if f.tenant != "" {
		m["tenant"] = f.tenant
	}
	if f.sub != "" {
		m["subject"] = f.sub
		if f.issuer != "" {
			m["issuer"] = f.issuer
		}
		m["request_hash_of"] = hashOfRequest
	}
	if f.function != "" {
		m["function"] = f.function
		if f.scope != "" {
			m["scope"] = f.scope
		}
		m["request_hash_of"] = hashOfPayload
	}
	if f.prefix != "" && (f.sub != "" || f.function != "") {
		m["key_prefix"] = f.prefix
	}
	if withKey && f.key != "" {
		m["sent_key"] = f.key
	}
	return m
}
