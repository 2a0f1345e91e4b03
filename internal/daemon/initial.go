package daemon

import (
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// syncInitial keeps the avoid_initial program in line with the policies:
// loaded while a policy marks paths volatile, bound to the address the
// policy chose (none while no such address is up), unloaded when no
// policy asks any more. Connections already open are not touched.
func (d *Daemon) syncInitial(req policy.Requirements) {
	if len(req.InitialAvoid) == 0 {
		if d.initial != nil {
			d.initial.Close()
			d.initial = nil
			d.log.Printf("avoid_initial: off")
		}
		return
	}
	if d.initial == nil {
		if d.initialErr != "" {
			return // tried and failed; said so once
		}
		b, err := sockops.NewInitialBinder(d.cookie)
		if err != nil {
			d.initialErr = err.Error()
			d.log.Printf("avoid_initial is not enforced: %v", err)
			return
		}
		d.initial = b
	}
	if d.initial.Addr() == req.InitialAddr {
		return
	}
	if err := d.initial.Set(req.InitialAddr); err != nil {
		d.log.Printf("avoid_initial: %v", err)
		return
	}
	if req.InitialAddr.IsValid() {
		d.log.Printf("avoid_initial: new MPTCP connections start from %s (volatile: %v)", req.InitialAddr, req.InitialAvoid)
	} else {
		d.log.Printf("avoid_initial: no address to start from that is not volatile (volatile: %v); connections start where routing sends them", req.InitialAvoid)
	}
}
