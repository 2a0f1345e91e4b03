package config

import (
	"net/netip"
	"regexp"

	"mpsteer/internal/yamlcfg"
)

// Endpoints is the endpoints section: which of the kernel path manager's
// endpoints the daemon may change. Others manage endpoints too
// (NetworkManager adds and removes them as interfaces come and go,
// mptcpd's plugins add them, an administrator runs `ip mptcp endpoint`):
// the daemon changes the flags of an endpoint only where a policy decides
// on its address (or needs new subflows to join as backup) and the
// address is not left to others here. Each entry is an interface name or
// an address.
//
//	endpoints:
//	  manage: [wlan0, wwan0]   # only these (default: any address a policy decides on)
//	  leave: [eth0]            # never these
type Endpoints struct {
	Manage []string
	Leave  []string
}

var ifaceOrAddrRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

func parseEndpoints(m *yamlcfg.Map) Endpoints {
	var e Endpoints
	em := m.Map("endpoints")
	if em == nil {
		return e
	}
	check := func(key string, list []string) []string {
		seen := map[string]bool{}
		var out []string
		for _, s := range list {
			if _, err := netip.ParseAddr(s); err != nil && !ifaceOrAddrRE.MatchString(s) {
				em.Errorf(key, "%q is neither an interface name nor an address", s)
				continue
			}
			if seen[s] {
				em.Errorf(key, "%s is listed twice", s)
				continue
			}
			seen[s] = true
			out = append(out, s)
		}
		return out
	}
	e.Manage = check("manage", em.Strings("manage"))
	e.Leave = check("leave", em.Strings("leave"))
	for _, l := range e.Leave {
		for _, m := range e.Manage {
			if l == m {
				em.Errorf("leave", "%s is both managed and left: pick one", l)
			}
		}
	}
	em.Done()
	return e
}
