package daemon

import (
	"fmt"
	"path/filepath"
	"time"

	"mpsteer/internal/netnsutil"
)

// worldCheckEvery: how often a round looks at the namespace's MPTCP
// sysctls (two small /proc reads).
const worldCheckEvery = time.Second

// checkWorld notices, and says once, when the namespace's MPTCP was
// disabled or enabled (net.mptcp.enabled) or its path manager switched
// (net.mptcp.path_manager, pm_type) under the running daemon. A switched
// path manager is taken on: lifecycle actions follow it, and with
// backup_via auto the backup actuator is changed to the one it needs
// (what the old one changed is undone first). Called with d.mu held.
func (d *Daemon) checkWorld(now time.Time) {
	if now.Sub(d.lastWorldCheck) < worldCheckEvery {
		return
	}
	d.lastWorldCheck = now
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
	m := pathManager()
	if m == d.pmMode {
		return
	}
	d.log.Printf("the path manager is %s now (was %s)", m, d.pmMode)
	d.pmMode = m
	if d.life != nil {
		d.life.mode = m
	}
	if d.cfg == nil || d.cfg.BackupVia != "auto" || d.act == nil {
		return
	}
	state := loadState(filepath.Join(d.opts.StateDir, fmt.Sprintf("daemon-netns-%d.json", d.cookie)))
	if next := d.chooseActuator("auto", state); next.Mode() != d.act.Mode() {
		d.record(d.act.Restore()...)
		d.act = next
		d.log.Printf("backup flags are set per %s now (backup_via auto)", next.Mode())
	}
}
