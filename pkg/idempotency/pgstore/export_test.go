package pgstore

import (
	"context"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/jackc/pgx/v5"
)

// The envelope's encoder and parser, for the tests of package pgstore_test
// (which may use a real database; this package's own tests cannot import
// pgtest, which imports this package).
type Envelope = envelope

var (
	EncodeEnvelope = encodeEnvelope
	DecodeEnvelope = decodeEnvelope
	ParseEnvelope  = parseEnvelope
)

// CompleteInTx is Complete inside tx, the write that CompleteRunInTx makes
// once the run's completion is taken.
func (s *Store) CompleteInTx(ctx context.Context, tx pgx.Tx, c idemstore.Completion) error {
	return s.complete(ctx, tx, c)
}

// ClaimDirectSQL is the claim's statement on a direct connection.
func (s *Store) ClaimDirectSQL() string { return s.sql.claimDirect }
