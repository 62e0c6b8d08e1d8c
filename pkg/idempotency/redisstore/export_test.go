package redisstore

import "github.com/ichido/ichido/pkg/idempotency/idemstore"

// DecodeRecord decodes a record value as the store reads it.
func DecodeRecord(v string) (idemstore.Record, error) { return decodeRecord("", "", v) }
