package control

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// argon2id parameters: OWASP's recommendation of 19 MiB, 2 passes, one
// thread (as strong as its 46 MiB, 1 pass form, and the least memory).
// A check holds this much memory and a core for about 50 ms, and on a
// platform shared by many tenants a sign-in burst must not take the
// memory or the cores the brokers need. Hashes made with other parameters
// (earlier releases used 64 MiB, 3 passes, 2 threads) are checked with
// their own.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword returns the PHC-format argon2id hash of a human password.
// Like CheckPassword, it computes at the lowest CPU priority: in the
// process's KeyWorker if it has one (UseKeyWorker), else on a thread of
// its own (atLowPriority).
func HashPassword(pw string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := deriveKey(pw, salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches a HashPassword hash.
func CheckPassword(hash, pw string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errors.New("not an argon2id hash")
	}
	var v int
	var m uint32
	var t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false, errors.New("unsupported argon2 version")
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return false, fmt.Errorf("argon2 parameters: %w", err)
	}
	enc := base64.RawStdEncoding
	salt, err1 := enc.DecodeString(parts[4])
	key, err2 := enc.DecodeString(parts[5])
	if err1 != nil || err2 != nil {
		return false, errors.New("argon2 hash: bad encoding")
	}
	if len(pw) > maxKeyPass {
		return false, nil // far past MaxPasswordLen: no password set here is this long
	}
	if err := checkKeyParams(t, m, p, uint32(len(key)), len(salt), 0); err != nil {
		return false, err
	}
	got := deriveKey(pw, salt, t, m, p, uint32(len(key)))
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}
