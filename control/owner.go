package control

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/fleetmq/fleetmq"
)

// The owner's portal password rules, for every way of setting one.
const (
	MinPasswordLen = 10   // characters
	MaxPasswordLen = 1024 // bytes: argon2id hashes whatever it gets
)

// CheckOwnerPassword returns an invalid error (field "password") for a
// new owner password that breaks the rules.
func CheckOwnerPassword(password string) error {
	switch {
	case utf8.RuneCountInString(password) < MinPasswordLen:
		return fleetmq.Invalid(map[string]string{"password": fmt.Sprintf("must be at least %d characters", MinPasswordLen)})
	case len(password) > MaxPasswordLen:
		return fleetmq.Invalid(map[string]string{"password": fmt.Sprintf("must be at most %d bytes", MaxPasswordLen)})
	}
	return nil
}

// SetOwnerPassword replaces the portal password of an account's owner
// (stored as its argon2id hash) and ends every portal session of the
// account, so a browser signed in with the old password is signed out. It
// returns how many sessions it ended; not_found for an unknown account,
// invalid for a password that breaks the rules. The portal's password
// change and "fleetmq account set-password" both come through here.
func (s *Service) SetOwnerPassword(ctx context.Context, accountID, password string) (signedOut int64, err error) {
	if err := CheckOwnerPassword(password); err != nil {
		return 0, err
	}
	if _, err := s.Store.Account(ctx, accountID); err != nil {
		return 0, err // before the costly hash
	}
	hash, err := HashPassword(password)
	if err != nil {
		return 0, err
	}
	return s.Store.SetOwnerPasswordHash(ctx, accountID, hash)
}

// ResetOwnerPassword is SetOwnerPassword with a new random password,
// which it returns (to be shown once).
func (s *Service) ResetOwnerPassword(ctx context.Context, accountID string) (password string, signedOut int64, err error) {
	password = fleetmq.NewSecret(20)
	signedOut, err = s.SetOwnerPassword(ctx, accountID, password)
	if err != nil {
		return "", 0, err
	}
	return password, signedOut, nil
}
