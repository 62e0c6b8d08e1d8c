package grpcidem

import "github.com/ichido/ichido/pkg/idempotency"

// RecordID returns the user id and the record key of the record that
// subject (Config.Subject's result) made with key, under prefix
// (Config.KeyPrefix) and format (Config.KeyFormat).
//
// Key is as the client sent it, bare or quoted. An operator finds a call's
// record with it; the operations command's -function flag does the same
// with Name. A tenant's record (Settings.Tenant) is kept under
// idempotency.TenantUserID(tenant, userID). It fails when subject is empty,
// the prefix is invalid or key is not of format.
func RecordID(prefix string, format idempotency.KeyFormat, subject, key string) (userID, recordKey string, err error) {
	return framework.RecordID(prefix, format, subject, key)
}
