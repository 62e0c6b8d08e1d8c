package rpcidem

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/ichido/ichido/pkg/idempotency"
)

// parseKey returns the key that every value of the key metadata or header
// holds, in the one form each key has: the key a record of it is kept
// under, as the library's parser of the HTTP header normalises it (a UUID
// in lower case; an opaque key quoted or not). gRPC delivers a repeated key
// as values of their own, never joined, so a comma outside a quoted string
// is no list separator here: such a value is refused, whether a client sent
// it so or a proxy joined repeated headers, as the HTTP header refuses two
// different keys. carrier names where the values came from ("metadata").
func parseKey(values []string, f idempotency.KeyFormat, carrier string) (string, error) {
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
			return "", &keyError{"the " + carrier + " holds two different keys"}
		}
		key = k
	}
	return key, nil
}

// normalKey parses one key with the library's parser (HTTPRecordID, which
// needs a subject, any one) and returns its record key: equal for two
// spellings of one key, different for two keys.
func normalKey(f idempotency.KeyFormat, key string) (string, error) {
	_, k, err := idempotency.HTTPRecordID("", f, "-", key)
	return k, err
}

// RecordID is the adapters' RecordID, which documents it.
func (fw Framework[Req, Resp]) RecordID(prefix string, format idempotency.KeyFormat, subject, key string) (userID, recordKey string, err error) {
	if subject == "" {
		return "", "", errors.New(fw.Package + ": the subject is empty")
	}
	k, err := normalKey(format, key)
	if err != nil {
		return "", "", err
	}
	return idempotency.FunctionRecordID(prefix, fw.Name, idempotency.SubjectUUID(subject), k)
}

// fingerprintVersion heads every fingerprint; its leading NUL keeps the
// payload from ever reading as JSON, which Function would canonicalise.
const fingerprintVersion = "\x00ichido-rpc-fingerprint-v1"

// fingerprint is a call's payload for Function: the full method name and
// the request message in protobuf's deterministic encoding, each framed by
// its length, so that no two calls frame to the same bytes.
func fingerprint(method string, request []byte) []byte {
	b := make([]byte, 0, len(fingerprintVersion)+2*binary.MaxVarintLen64+len(method)+len(request))
	b = append(b, fingerprintVersion...)
	b = binary.AppendUvarint(b, uint64(len(method)))
	b = append(b, method...)
	b = binary.AppendUvarint(b, uint64(len(request)))
	return append(b, request...)
}
