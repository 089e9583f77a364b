//go:build !linux

package broker

import "log/slog"

// parker is Linux-only (epoll): elsewhere strangers wait in their own
// goroutines.
type parker struct{}

func newParker(<-chan struct{}, *slog.Logger) *parker { return nil }

func (p *parker) park(*conn) bool    { return false }
func (p *parker) unpark(*conn)       {}
func (p *parker) parked() (int, int) { return 0, 0 }
func (p *parker) down() bool         { return true }

func (c *conn) readNoWait(b []byte) (int, error) { return c.nc.Read(b) }
