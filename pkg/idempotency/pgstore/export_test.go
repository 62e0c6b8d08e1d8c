package pgstore

// The envelope's encoder and parser, for the tests of package pgstore_test
// (which may use a real database; this package's own tests cannot import
// pgtest, which imports this package).
type Envelope = envelope

var (
	EncodeEnvelope = encodeEnvelope
	DecodeEnvelope = decodeEnvelope
	ParseEnvelope  = parseEnvelope
)
