package fleetmq

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

const base62Digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewSecret returns n random base62 characters, about 5.95 bits of entropy
// each: 22 make 128 bits, 43 make 256. Every generated secret is one
// (credential usernames and passwords, owner passwords, portal session ids)
// or holds one (REST API token values).
func NewSecret(n int) string { return string(appendSecret(make([]byte, 0, n), n)) }

// appendSecret appends n random base62 characters to b. They come from
// crypto/rand without modulo bias: bytes of 248 and above, which would
// favour the first digits, are drawn again.
func appendSecret(b []byte, n int) []byte {
	var buf [64]byte
	for n > 0 {
		rand.Read(buf[:]) // never fails (it crashes the program first)
		for _, x := range buf {
			if x < 248 && n > 0 {
				b = append(b, base62Digits[x%62])
				n--
			}
		}
	}
	return b
}

// HashSecret is the stored form of a generated secret (credential
// passwords, REST tokens, portal session ids): hex SHA-256. Generated
// secrets carry enough entropy that a fast hash is right, and it keeps
// CONNECT storms cheap.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}
