package daemon

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Capabilities the daemon needs, found by running it with fewer (see
// docs/deploy.md): CAP_NET_ADMIN for the path manager's netlink commands
// and events, endpoints, TC (TCX) chains and cgroup sockops attachment;
// CAP_BPF to load BPF programs and maps; CAP_PERFMON for the pointer
// arithmetic the chains' programs do on packets (the verifier refuses it
// otherwise). CAP_SYS_ADMIN is needed only where no cgroup v2 hierarchy is
// mounted (the daemon then mounts one for its sockops programs: rto_max,
// rate caps), e.g. under `ip netns exec`, which remounts /sys; kernels
// before 5.8 have no CAP_BPF and CAP_PERFMON and need CAP_SYS_ADMIN
// instead.
var requiredCaps = []capability{
	{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN", "path-manager netlink, endpoints, TC chains"},
	{unix.CAP_BPF, "CAP_BPF", "BPF programs and maps"},
	{unix.CAP_PERFMON, "CAP_PERFMON", "packet access in the chains' BPF programs"},
}

type capability struct {
	bit  int
	name string
	what string
}

// effectiveCaps reads the process's effective capability set (a variable
// so that tests can pretend).
var effectiveCaps = func() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no CapEff line")
}

// lastCap is the highest capability the kernel knows.
var lastCap = func() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}

// CheckCapabilities says which of the capabilities the daemon needs the
// process lacks, by name, and how to grant them. Root has them all; any
// user can run the daemon with them (systemd's AmbientCapabilities=, or
// setpriv --ambient-caps).
func CheckCapabilities() error {
	eff, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("cannot read the process's capabilities: %w", err)
	}
	need := requiredCaps
	if lastCap() < unix.CAP_BPF {
		// Before Linux 5.8, BPF is CAP_SYS_ADMIN's.
		need = []capability{requiredCaps[0], {unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "BPF on kernels before 5.8"}}
	}
	var missing, names []string
	for _, c := range need {
		names = append(names, c.name)
		if eff&(1<<uint(c.bit)) == 0 {
			missing = append(missing, fmt.Sprintf("%s (%s)", c.name, c.what))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("the daemon needs the capabilities %s; this process lacks %s: run it as root, or grant them (systemd: AmbientCapabilities=%s; by hand: setpriv --inh-caps=%s --ambient-caps=%s)",
		strings.Join(names, ", "), strings.Join(missing, ", "), strings.Join(names, " "), capList(need), capList(need))
}

func capList(cs []capability) string {
	var out []string
	for _, c := range cs {
		out = append(out, "+"+strings.ToLower(strings.TrimPrefix(c.name, "CAP_")))
	}
	return strings.Join(out, ",")
}

// hasCap reports whether the process has one capability in effect.
func hasCap(bit int) bool {
	eff, err := effectiveCaps()
	return err == nil && eff&(1<<uint(bit)) != 0
}

// capabilityWarnings are what the daemon can still do without a
// capability it may need later: said once at start.
func capabilityWarnings() []string {
	if hasCap(unix.CAP_SYS_ADMIN) || cgroup2Mounted() {
		return nil
	}
	return []string{"no cgroup v2 hierarchy is mounted here and CAP_SYS_ADMIN is missing to mount one: rto_max and rate caps (sockops programs) cannot be enforced; mount cgroup2 (systemd does at /sys/fs/cgroup) or grant CAP_SYS_ADMIN"}
}

func cgroup2Mounted() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if _, rest, ok := strings.Cut(l, " - "); ok && strings.HasPrefix(rest, "cgroup2 ") {
			return true
		}
	}
	return false
}
