package policy

import (
	"fmt"
	"net/netip"
	"time"
)

// An address's subflows rest together. Under the kernel path manager the
// backup flag is the endpoint's, one for every connection with a subflow
// from the address, and the daemon makes an endpoint backup only when
// every subflow from it is to be (actuator.wantPerAddress): a path that
// most connections set aside kept carrying for all of them as long as one
// still wanted it (ecf-many-50-10-256k under BBR, replayed: seven of
// eight connections set the 10 Mbit/s path aside by 2.4 s, the eighth at
// 4.7 s, and until then all eight waited on it). So once most of the
// connections with a subflow from an address (not their main path, not on
// trial) have it aside, the others set theirs aside too. Under the
// userspace path manager each subflow has its own flag, and each
// connection decides alone (shaper.perAddress off).

// restTogether sets aside the subflows from an address that most of its
// connections have set aside (see above); the change shows in the next
// round's actions, as the group trials' verdicts do.
func (p *shaper) restTogether(now time.Time) {
	if !p.perAddress {
		return
	}
	type count struct{ aside, carrying int }
	counts := map[netip.Addr]*count{}
	for _, st := range p.conns {
		for id, s := range st.subs {
			if id == st.main {
				continue
			}
			n := counts[id.Local.Addr()]
			if n == nil {
				n = &count{}
				counts[id.Local.Addr()] = n
			}
			switch {
			case s.state == shAside && !s.nextTrial.IsZero():
				// (Set aside by a decision: a joiner not yet placed is
				// aside too, and is no vote.)
				n.aside++
			case s.state == shEntry || s.state == shFree || s.state == shCapped:
				n.carrying++
			}
		}
	}
	for _, st := range p.conns {
		for id, s := range st.subs {
			n := counts[id.Local.Addr()]
			if id == st.main || n == nil || 2*n.aside <= n.aside+n.carrying {
				continue
			}
			if s.state == shEntry || s.state == shFree || s.state == shCapped {
				p.setAside(now, s, fmt.Sprintf("%d of the %d connections with a subflow from %s set it aside: under the kernel path manager its endpoint's backup flag is one for them all",
					n.aside, n.aside+n.carrying, id.Local.Addr()))
			}
		}
	}
}
