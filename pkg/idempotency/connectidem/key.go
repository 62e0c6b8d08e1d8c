package connectidem

import "github.com/ichido/ichido/pkg/idempotency"

// RecordID returns the user id and the key under which the stores keep the
// record of a call that subject (Config.Subject's result) made with key (as
// the client sent it, bare or quoted), under prefix (Config.KeyPrefix) and
// format (Config.KeyFormat): how an operator finds a call's record, with
// the operations command's -function flag and Name. A record of a tenant
// (Settings.Tenant) is kept under idempotency.TenantUserID(tenant, userID).
// It fails when key is not of format, naming why.
func RecordID(prefix string, format idempotency.KeyFormat, subject, key string) (userID, recordKey string, err error) {
	return framework.RecordID(prefix, format, subject, key)
}
