package daemon

import (
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
)

// worldCheckEvery: how often a round looks at the namespace's MPTCP
// sysctls (two small /proc reads).
const worldCheckEvery = time.Second

// checkWorld notices, and says once, when the namespace's MPTCP was
// disabled or enabled (net.mptcp.enabled) or its path manager switched
// (net.mptcp.path_manager, pm_type) under the running daemon. A switched
// path manager is taken on: lifecycle actions follow it, and with
// backup_via auto the flag actuator is changed to the one it needs (the
// round's followConfig; what the old one changed is undone first).
// Called with mu held.
func (d *Daemon) checkWorld(now time.Time) {
	if now.Sub(d.worldAt) < worldCheckEvery {
		return
	}
	d.worldAt = now
	if en, err := netnsutil.ReadSysctl("net.mptcp.enabled"); err == nil && en != d.mptcpEnabled {
		switch {
		case d.mptcpEnabled == "":
		case en == "0":
			d.log.Printf("MPTCP was disabled in this namespace (net.mptcp.enabled=0): new connections are plain TCP; the daemon keeps running for the MPTCP connections that remain and for when it is enabled again")
		default:
			d.log.Printf("MPTCP is enabled again in this namespace (net.mptcp.enabled=%s)", en)
		}
		d.mptcpEnabled = en
	}
	if m := observe.PathManager(); m != d.pmMode {
		d.log.Printf("the path manager is %s now (was %s)", m, d.pmMode)
		d.pmMode = m
	}
}
