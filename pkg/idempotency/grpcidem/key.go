package grpcidem

import (
	"encoding/binary"
	"errors"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/ichido/ichido/pkg/idempotency"
)

// parseKey returns the key that every value of the key metadata holds, in
// the one form each key has: the key a record of it is kept under, as the
// library's parser of the HTTP header normalises it (a UUID in lower case;
// an opaque key quoted or not). gRPC delivers a repeated key as values of
// their own, never joined, so a comma outside a quoted string is no list
// separator here: such a value is refused, as the HTTP header refuses two
// different keys.
func parseKey(values []string, f idempotency.KeyFormat) (string, error) {
	var key string
	for _, v := range values {
		if trimmed := strings.Trim(v, " \t"); !strings.HasPrefix(trimmed, `"`) && strings.Contains(trimmed, ",") {
			return "", &keyError{"the key holds a comma outside a quoted string; send one key, quoted when it holds a comma"}
		}
		k, err := normalKey(f, v)
		if err != nil {
			return "", &keyError{strings.TrimPrefix(err.Error(), "idempotency: ")}
		}
		if key != "" && k != key {
			return "", &keyError{"the metadata holds two different keys"}
		}
		key = k
	}
	return key, nil
}

// normalKey parses one key with the library's parser (HTTPRecordID, which
// needs a subject, any one) and returns its record key: equal for two
// spellings of one key, different for two keys.
func normalKey(f idempotency.KeyFormat, key string) (string, error) {
	_, k, err := idempotency.HTTPRecordID(idempotency.Config{KeyFormat: f}, "-", key)
	return k, err
}

// RecordID returns the user id and the key under which the stores keep the
// record of a call that subject (Config.UserID's result) made with key (as
// the client sent it, bare or quoted), under prefix (Config.KeyPrefix) and
// format (Config.KeyFormat): how an operator finds a call's record, with
// the operations command's -function flag and Name. A record of a tenant
// (Config.Tenant) is kept under idempotency.TenantUserID(tenant, userID).
// It fails when key is not of format, naming why.
func RecordID(prefix string, format idempotency.KeyFormat, subject, key string) (userID, recordKey string, err error) {
	if subject == "" {
		return "", "", errors.New("grpcidem: the subject is empty")
	}
	k, err := normalKey(format, key)
	if err != nil {
		return "", "", err
	}
	userID, recordKey = idempotency.FunctionRecordID(prefix, Name, idempotency.SubjectUUID(subject), k)
	return userID, recordKey, nil
}

// fingerprintVersion heads every fingerprint; its leading NUL keeps the
// payload from ever reading as JSON, which Function would canonicalise.
const fingerprintVersion = "\x00ichido-rpc-fingerprint-v1"

// fingerprint is a call's payload for Function: the full method name and
// the request message in protobuf's deterministic encoding, each framed by
// its length, so that no two calls frame to the same bytes.
func fingerprint(method string, req proto.Message) ([]byte, error) {
	b := make([]byte, 0, 64+len(method)+proto.Size(req))
	b = append(b, fingerprintVersion...)
	b = binary.AppendUvarint(b, uint64(len(method)))
	b = append(b, method...)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, err
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...), nil
}
