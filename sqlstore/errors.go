package sqlstore

import (
	"errors"
	"fmt"

	"github.com/fleetmq/fleetmq"
)

// wrap says which operation of the store an error comes from:
// "sqlstore: create client: <cause>", with the cause kept for errors.Is and
// errors.As. Each exported method defers it once, and none calls another,
// so an error is wrapped once, at the boundary. A domain error
// (*fleetmq.Error: not_found, conflict, validation_failed) is returned as
// it is, since it already says what failed in words meant for the user (the
// CLI prints it), and so is a *fleetmq.ScanBudgetSpent, which is an answer
// of QueryHistory rather than a failure.
func wrap(err *error, op string) {
	if *err == nil {
		return
	}
	var domain *fleetmq.Error
	var spent *fleetmq.ScanBudgetSpent
	if errors.As(*err, &domain) || errors.As(*err, &spent) {
		return
	}
	*err = fmt.Errorf("sqlstore: %s: %w", op, *err)
}
