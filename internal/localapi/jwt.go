package localapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Errors of the emulated JWT authorizer. Each one is answered with API
// Gateway's 401 {"message":"Unauthorized"}.
var (
	// ErrNoToken: the request has no Authorization header, or an empty one.
	ErrNoToken = errors.New("localapi: no bearer token")
	// ErrMalformedToken: the token is not a JWT (three base64url parts, a
	// JSON header with an alg, a JSON object of claims).
	ErrMalformedToken = errors.New("localapi: the token is not a well-formed JWT")
	// ErrTokenExpired: the token's exp is not after the current time.
	ErrTokenExpired = errors.New("localapi: the token has expired")
	// ErrTokenNotYetValid: the token's nbf is after the current time.
	ErrTokenNotYetValid = errors.New("localapi: the token is not valid yet")
)

// Identity is what the JWT authorizer puts in
// requestContext.authorizer.jwt.
type Identity struct {
	// Claims are the token's claims as API Gateway renders them: every
	// value a string, numbers in decimal, string arrays as "[a b]".
	Claims map[string]string
	// Scopes are the token's scope claim split on spaces; nil when it has
	// none.
	Scopes []string
}

// Authorize reads the token from an Authorization header value ("Bearer
// <JWT>" or the bare JWT, as API Gateway accepts both) and returns its
// claims. The signature is not verified; exp and nbf are checked against
// now.
func Authorize(authorization string, now time.Time) (Identity, error) {
	token := strings.TrimSpace(authorization)
	if token == "" {
		return Identity{}, ErrNoToken
	}
	if len(token) > 7 && strings.EqualFold(token[:7], "bearer ") {
		token = strings.TrimSpace(token[7:])
	}
	claims, err := parseJWT(token)
	if err != nil {
		return Identity{}, err
	}
	if exp, ok := numericClaim(claims["exp"]); ok && !now.Before(time.Unix(exp, 0)) {
		return Identity{}, ErrTokenExpired
	}
	if nbf, ok := numericClaim(claims["nbf"]); ok && now.Before(time.Unix(nbf, 0)) {
		return Identity{}, ErrTokenNotYetValid
	}
	id := Identity{Claims: make(map[string]string, len(claims))}
	for k, v := range claims {
		id.Claims[k] = renderClaim(v)
	}
	if s := id.Claims["scope"]; s != "" {
		id.Scopes = strings.Fields(s)
	}
	return id, nil
}

func parseJWT(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, ErrMalformedToken
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg == "" {
		return nil, ErrMalformedToken
	}
	if _, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil {
		return nil, ErrMalformedToken
	}
	var claims map[string]any
	if err := decodeSegment(parts[1], &claims); err != nil || claims == nil {
		return nil, ErrMalformedToken
	}
	return claims, nil
}

func decodeSegment(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

func numericClaim(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	f, err := n.Float64()
	return int64(f), err == nil
}

// renderClaim renders a claim as API Gateway does in the event: strings as
// they are, numbers and booleans as their JSON text, arrays as "[a b c]",
// objects as JSON.
func renderClaim(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return ""
	case []any:
		items := make([]string, len(v))
		for i, item := range v {
			items[i] = renderClaim(item)
		}
		return "[" + strings.Join(items, " ") + "]"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// LocalSigningKey signs the tokens that NewToken makes. It is not a secret:
// the local gateway verifies no signature, and API Gateway would refuse an
// HS256 token anyway. It only makes the tokens well-formed for tools that
// insist on a signature.
const LocalSigningKey = "ichido-local-development-only"

// TokenOptions describe a local access token.
type TokenOptions struct {
	// Subject is the user's id (sub). Cognito's are UUIDs; any other
	// identity provider's subject (auth0|…) is accepted too, and mapped to
	// a UUID by idempotency.SubjectUUID. Required.
	Subject string
	// Issuer is the iss claim. Defaults to LocalIssuer.
	Issuer string
	// ClientID is the client_id claim (Cognito access tokens carry
	// client_id rather than aud). Defaults to LocalClientID.
	ClientID string
	// Username is the username claim. Defaults to Subject.
	Username string
	// Scope is the space-separated scope claim. Defaults to
	// "aws.cognito.signin.user.admin", as Cognito's access tokens have.
	Scope string
	// TTL is how long the token is valid. Defaults to 12 hours.
	TTL time.Duration
	// Now is the issue time. Defaults to time.Now().
	Now time.Time
}

// Defaults of a local token's claims.
const (
	// LocalIssuer is the iss of local tokens.
	LocalIssuer = "http://127.0.0.1/ichido-local"
	// LocalClientID is the client_id of local tokens.
	LocalClientID = "ichido-local"
)

// NewToken returns an HS256 JWT, signed with LocalSigningKey, with the
// claims of a Cognito user pool access token: sub, iss, client_id,
// token_use "access", scope, auth_time, iat, exp, jti and username.
func NewToken(opts TokenOptions) (string, error) {
	if opts.Subject == "" {
		return "", errors.New("localapi: a token needs a subject")
	}
	if opts.Issuer == "" {
		opts.Issuer = LocalIssuer
	}
	if opts.ClientID == "" {
		opts.ClientID = LocalClientID
	}
	if opts.Username == "" {
		opts.Username = opts.Subject
	}
	if opts.Scope == "" {
		opts.Scope = "aws.cognito.signin.user.admin"
	}
	if opts.TTL <= 0 {
		opts.TTL = 12 * time.Hour
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	iat := opts.Now.Unix()
	claims := map[string]any{
		"sub":       opts.Subject,
		"iss":       opts.Issuer,
		"client_id": opts.ClientID,
		"token_use": "access",
		"scope":     opts.Scope,
		"auth_time": iat,
		"iat":       iat,
		"exp":       opts.Now.Add(opts.TTL).Unix(),
		"jti":       uuid.NewString(),
		"username":  opts.Username,
	}
	header, _ := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT"})
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("localapi: encoding claims: %w", err)
	}
	signing := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	mac := hmac.New(sha256.New, []byte(LocalSigningKey))
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), nil
}
