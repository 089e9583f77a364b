package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/history"
)

// A history page's query stops after QueryTimeout; history requests per
// account are bounded by history.Slots (Deps.HistorySlots).
const QueryTimeout = 15 * time.Second

// takeQuery reserves a history slot for the account, or answers 429 when
// it has none free or its reads have spent their store time. The returned
// func gives the slot back.
func (a *API) takeQuery(ctx context.Context, accountID string) (func(), *Problem) {
	release, retry, ok := a.deps.HistorySlots.Take(accountID)
	if !ok {
		msg := strconv.Itoa(history.RequestsPerAccount) + " history requests of this account are running already (a page, an export or a portal device page each); retry when one has finished"
		if retry > 0 {
			msg = "this account's history reads have used their store time (one second per second, bursts of " + history.StoreTimeBurst.String() + "); retry in " + strconv.Itoa(history.RetrySeconds(retry)) + " s"
		}
		p := newProblem(http.StatusTooManyRequests, fleetmq.CodeRateLimited, msg)
		p.GetHeaders().Set("Retry-After", strconv.Itoa(history.RetrySeconds(retry)))
		return nil, a.uncounted(ctx, p, max(retry, time.Second))
	}
	return release, nil
}

// queryProblem turns a page query that ran out of its time (limit) into a
// 422 that says how to narrow it.
func queryProblem(ctx context.Context, err error, limit time.Duration) *Problem {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return newProblem(http.StatusUnprocessableEntity, fleetmq.CodeValidation,
			"the query ran longer than "+limit.String()+" and was stopped: narrow it with from and to, client_id, or a topic filter whose first levels are literal")
	}
	return nil
}
