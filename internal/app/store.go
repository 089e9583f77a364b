package app

import (
	"context"

	"github.com/fleetmq/fleetmq/sqlstore"
)

// OpenStore opens the platform's store, as "fleetmq serve" and the operator
// commands do: the database DSN when one is given (a postgres:// URL), else
// SQLite in the data directory. Migrations run on open.
func OpenStore(ctx context.Context, dataDir, database string) (*sqlstore.Store, error) {
	if database != "" {
		return sqlstore.Open(ctx, database)
	}
	return sqlstore.OpenDir(ctx, dataDir)
}
