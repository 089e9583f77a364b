package fleetmq

import (
	"hash/crc32"
	"time"
)

// REST API tokens (docs/design.md "Identities"): the value is RESTTokenPrefix,
// 30 random base62 characters and 6 base62 characters of the CRC32 (IEEE)
// of everything before them. The checksum lets a client or the API tell a
// mistyped or truncated value from an unknown one without a lookup; it is
// no secret. Only the value's SHA-256 (HashSecret) is stored.
const (
	// RESTTokenPrefix starts every REST API token value.
	RESTTokenPrefix = "svc_mqtt_rest_"
	// MaxActiveRESTTokens is how many tokens an account may have active
	// (neither revoked nor expired) at once.
	MaxActiveRESTTokens = 10
	// MaxRESTTokenLabel is the longest label of a REST API token, in
	// characters.
	MaxRESTTokenLabel = 100

	restTokenRandom   = 30
	restTokenChecksum = 6
	restTokenBody     = len(RESTTokenPrefix) + restTokenRandom
	// restTokenLen is the length of a whole value: 50 bytes.
	restTokenLen = restTokenBody + restTokenChecksum
	// restTokenShown is how much of a value RESTToken.Prefix keeps: the
	// fixed prefix and the first 4 random characters.
	restTokenShown = len(RESTTokenPrefix) + 4
)

// RESTToken is a REST API token of an account. The value itself is never
// stored: Hash is its SHA-256 and Prefix a short part to recognise it by.
type RESTToken struct {
	ID         string
	AccountID  string
	Label      string
	Prefix     string // non-secret display prefix: RESTTokenPrefix and the first 4 random characters
	Hash       string // hex SHA-256 of the value (HashSecret)
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never expires
	RevokedAt  time.Time // zero: not revoked
	LastUsedAt time.Time // zero: never used (as last flushed to the store)
}

// Revoked reports whether the token has been revoked.
func (t *RESTToken) Revoked() bool { return !t.RevokedAt.IsZero() }

// Expired reports whether the token has expired at now: a token is usable
// strictly before its ExpiresAt.
func (t *RESTToken) Expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
}

// Active reports whether the token can be used at now (and so counts
// toward MaxActiveRESTTokens).
func (t *RESTToken) Active(now time.Time) bool { return !t.Revoked() && !t.Expired(now) }

// RESTTokenDisplayPrefix returns the part of a value kept as
// RESTToken.Prefix ("" for a value of another format).
func RESTTokenDisplayPrefix(value string) string {
	if len(value) < restTokenShown {
		return ""
	}
	return value[:restTokenShown]
}

// base62Value maps a byte to its digit value, or -1 outside the alphabet.
var base62Value = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(base62Digits); i++ {
		t[base62Digits[i]] = int8(i)
	}
	return t
}()

// NewRESTTokenValue returns a new random token value: its random part is
// appendSecret's, about 178 bits of entropy.
func NewRESTTokenValue() string {
	b := make([]byte, 0, restTokenLen)
	b = append(b, RESTTokenPrefix...)
	b = appendSecret(b, restTokenRandom)
	b = appendChecksum(b, restTokenChecksumOf(string(b)))
	return string(b)
}

// CheckRESTTokenFormat reports whether v has the form of a REST API token:
// the prefix, 36 base62 characters, and a checksum that matches. It says
// nothing about whether such a token exists.
func CheckRESTTokenFormat(v string) bool {
	if len(v) != restTokenLen || v[:len(RESTTokenPrefix)] != RESTTokenPrefix {
		return false
	}
	for i := len(RESTTokenPrefix); i < restTokenBody; i++ {
		if base62Value[v[i]] < 0 {
			return false
		}
	}
	var sum uint64
	for i := restTokenBody; i < restTokenLen; i++ {
		d := base62Value[v[i]]
		if d < 0 {
			return false
		}
		sum = sum*62 + uint64(d)
	}
	return sum == uint64(restTokenChecksumOf(v[:restTokenBody]))
}

// restTokenChecksumOf is crc32.ChecksumIEEE of s, computed over the string
// without copying it to a []byte.
func restTokenChecksumOf(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc = crc32.IEEETable[byte(crc)^s[i]] ^ crc>>8
	}
	return ^crc
}

// appendChecksum appends c as 6 base62 digits, most significant first
// (62^6 > 2^32, so every CRC32 fits).
func appendChecksum(b []byte, c uint32) []byte {
	var d [restTokenChecksum]byte
	v := uint64(c)
	for i := restTokenChecksum - 1; i >= 0; i-- {
		d[i] = base62Digits[v%62]
		v /= 62
	}
	return append(b, d[:]...)
}
