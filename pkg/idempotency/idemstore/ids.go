package idemstore

import (
	"errors"
	"fmt"
)

// ErrNotID is wrapped by the error of a call whose user id or key is not a
// lower-case UUID (IsID).
var ErrNotID = errors.New("not a lower-case UUID")

// IsID reports whether s is a lower-case UUID in the 8-4-4-4-12 form: the only
// form of the ids a record is kept under (Ref.UserID, Ref.Key). A store whose
// keys are a prefix followed by the two ids relies on their fixed length and
// alphabet. They make the prefix an exact boundary: no id can spell another
// prefix's key.
func IsID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// CheckIDs returns an error that wraps ErrNotID unless userID and key are
// both ids (IsID).
func CheckIDs(userID, key string) error {
	if !IsID(userID) {
		return fmt.Errorf("the user id %.80q is %w", userID, ErrNotID)
	}
	if !IsID(key) {
		return fmt.Errorf("the key %.80q is %w", key, ErrNotID)
	}
	return nil
}
