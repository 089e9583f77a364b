package app

import "github.com/fleetmq/fleetmq/web/portal"

// startPortal builds the account owner's portal. Its changes apply to the
// broker at once (Sync), like the REST API's.
func (a *App) startPortal() {
	a.Portal = portal.New(portal.Deps{Service: a.Service, Store: a.Store, Policy: a.Policy, Now: a.cfg.Now,
		Changed: a.Sync, Logger: a.cfg.Logger, HistorySlots: &a.HistorySlots},
		portal.Options{SecureCookies: a.cfg.PortalSecureCookies, MQTTPublicAddr: a.cfg.MQTTPublicAddr})
}
