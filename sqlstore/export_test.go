package sqlstore

import "context"

// ExecOnReads runs a statement on the store's reads pool (tests only).
func ExecOnReads(s *Store, ctx context.Context, q string) error {
	_, err := s.reads.ExecContext(ctx, q)
	return err
}

// QueryOnReads reads one text value through the store's reads pool (tests
// only).
func QueryOnReads(s *Store, ctx context.Context, q string) (string, error) {
	var v string
	err := s.reads.QueryRowContext(ctx, q).Scan(&v)
	return v, err
}
