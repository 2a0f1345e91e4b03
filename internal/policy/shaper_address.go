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
// 4.7 s, and until then all eight waited on it). So once three quarters
// of the connections with a subflow from an address (not their main path)
// have set it aside, the others set theirs aside too. Not half: one connection's verdict among many is noisy, and
// where the path helps (ecf-many-50-10-1m under BBR, replayed) five of
// eight had it aside at one time, and never three quarters of them while
// most carried; where it held them all up (ecf-many-50-10-256k) seven of
// eight had it aside by 2.4 s. With fewer than four connections that is
// all of them, as before. Under the userspace path manager each subflow
// has its own flag, and each connection decides alone (shaper.perAddress
// off).

// restTogether sets aside the subflows from an address that three
// quarters of its connections have set aside (see above).
func (p *shaper) restTogether(now time.Time) {
	if !p.perAddress {
		return
	}
	type count struct{ aside, all int }
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
			n.all++
			if s.state == shAside && !s.nextTrial.IsZero() {
				// (Set aside by a decision: a joiner not yet placed is
				// aside too, and is no vote.)
				n.aside++
			}
		}
	}
	for _, st := range p.conns {
		for id, s := range st.subs {
			n := counts[id.Local.Addr()]
			if id == st.main || n == nil || 4*n.aside < 3*n.all {
				continue
			}
			if s.state == shEntry || s.state == shFree || s.state == shCapped {
				p.setAside(now, s, fmt.Sprintf("%d of the %d connections with a subflow from %s set it aside: under the kernel path manager its endpoint's backup flag is one for them all",
					n.aside, n.all, id.Local.Addr()))
			}
		}
	}
}
