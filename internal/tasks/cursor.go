package tasks

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// Position is a place in a user's list of tasks, ordered newest first by
// (created_at, id): the list continues with the tasks strictly after it.
type Position struct {
	CreatedAt time.Time
	ID        string
}

// The cursor is opaque to clients but not secret: it is a version byte, the
// position (created_at in microseconds, PostgreSQL's precision, and the id's
// 16 bytes) and a check of 8 bytes, base64url without padding. The check is a
// SHA-256 over the user and the position, so an edited cursor, or one minted
// for another user, is refused with 400 instead of paging from an arbitrary
// place. It is not a signature: whoever forges a valid cursor can only page
// through their own tasks, which every query already restricts to the caller.
const (
	cursorVersion = 1
	cursorPayload = 1 + 8 + 16
	cursorCheck   = 8
)

var cursorEncoding = base64.RawURLEncoding.Strict()

// EncodeCursor returns the opaque cursor of p for userID.
func EncodeCursor(userID string, p Position) string {
	id := uuid.MustParse(p.ID)
	b := make([]byte, cursorPayload, cursorPayload+cursorCheck)
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(p.CreatedAt.UnixMicro()))
	copy(b[9:], id[:])
	b = append(b, cursorSum(userID, b)...)
	return cursorEncoding.EncodeToString(b)
}

// DecodeCursor returns the position of a cursor made by EncodeCursor for the
// same user. Any other string is a *ValidationError naming "cursor".
func DecodeCursor(userID, s string) (Position, error) {
	bad := invalid("cursor", "is not a cursor returned by this API for this user")
	b, err := cursorEncoding.DecodeString(s)
	if err != nil || len(b) != cursorPayload+cursorCheck || b[0] != cursorVersion {
		return Position{}, bad
	}
	if subtle.ConstantTimeCompare(b[cursorPayload:], cursorSum(userID, b[:cursorPayload])) != 1 {
		return Position{}, bad
	}
	micros := int64(binary.BigEndian.Uint64(b[1:9]))
	id, err := uuid.FromBytes(b[9:cursorPayload])
	if err != nil {
		return Position{}, bad
	}
	return Position{CreatedAt: time.UnixMicro(micros).UTC(), ID: id.String()}, nil
}

func cursorSum(userID string, payload []byte) []byte {
	h := sha256.New()
	h.Write([]byte("ichido/tasks/cursor\x00"))
	h.Write([]byte(userID))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)[:cursorCheck]
}
