package main

import (
	"github.com/spf13/cobra"

	"mpsteer/internal/daemon"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/lasthop"
)

// daemonFlags are the daemon's options beyond its config and socket.
type daemonFlags struct {
	metrics, stateDir, sampler string
	watch                      bool
	subflowSeries              int
}

func (f *daemonFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9863; off by default)")
	c.Flags().IntVar(&f.subflowSeries, "metrics-subflows", 1000, "per-subflow series (9 each) for at most this many established subflows; -1: every one (totals stay exact; mpsteer_subflow_series_omitted counts the rest)")
	c.Flags().StringVar(&f.stateDir, "state-dir", "", "where the daemon keeps what it must undo after a crash (default /run/mpsteer)")
	c.Flags().BoolVar(&f.watch, "watch-config", true, "reload the config when its file changes, as SIGHUP does")
	c.Flags().StringVar(&f.sampler, "sampler", daemon.SamplerAuto, "how subflows are read each interval: iterator (a BPF iterator over the namespace's TCP sockets), sock_diag (inet_diag dumps), or auto (whichever of the two reads faster, timed as the daemon runs; sock_diag where the iterator does not load)")
}

func (f *daemonFlags) options(o daemon.Options) daemon.Options {
	o.MetricsAddr, o.StateDir, o.NoWatch, o.Sampler = f.metrics, f.stateDir, !f.watch, f.sampler
	o.MetricsSubflows = f.subflowSeries
	o.Version = versionInfo().Version
	// The lab's emulator is a last-hop source too (report_health source:
	// lab), besides the host's own.
	o.LastHop = lasthop.Builtin()
	o.LastHop["lab"] = world.LabSource
	return o
}

const daemonLong = `Run the policy daemon in the foreground, in the network namespace it is
started in (one per namespace). Every interval it samples the kernel's
MPTCP connections and subflows, the policies decide, and the daemon takes
their actions through the path manager's netlink family and BPF programs.

Reloading: SIGHUP, ` + "`mpsteer policy apply FILE`" + ` and a change of the config file
(watched; --watch-config=false turns that off) all reload the same way,
all or nothing: a config that is wrong is refused and logged, and the
running one stays.

Privileges: root, or any user with CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON
(CAP_SYS_ADMIN too where no cgroup v2 hierarchy is mounted and rto_max or
rate caps are used); the daemon names what is missing. Its API socket
answers root and the daemon's own user.

Under systemd (Type=notify) it reports readiness, reloads and stopping,
and feeds the watchdog when WatchdogSec= is set.

Signals: SIGTERM or SIGINT stop it cleanly (every change undone), SIGHUP
reloads the config.

Files: /etc/mpsteer/mpsteer.yaml is the config of the packaged service
(mpsteer.service; options in /etc/default/mpsteer, MPSTEER_OPTS); it is
commented, and docs/daemon.md describes every key, the policies and the
presets (mode: service handover|interactive|aggregate, interfaces
on|off|backup|master, allow, deny), and per-application policies (cgroup:
on a policy; mptcpize: cgroups whose applications get MPTCP sockets).
/run/mpsteer holds the API sockets and what to undo after a crash.`
