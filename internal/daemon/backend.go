package daemon

import (
	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
)

// backend is the daemon as the API server asks it.
type backend struct{ d *Daemon }

func (b backend) Status() api.Status { return b.d.Status() }

func (b backend) Prefer(targets []string, clear bool) (string, error) {
	return b.d.setHint(targets, clear)
}

func (b backend) Apply(file string, data []byte) (string, error) {
	msg, err := b.d.reload(file, data)
	b.d.ops.reloaded("policy apply", msg, err) // metrics, monitor
	return msg, err
}

func (b backend) Datapath() (*datapath.Manager, error) {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if b.d.loop.stopped {
		return nil, errStopping
	}
	return b.d.manager()
}

func (b backend) NetNS() string { return b.d.netns }

func (b backend) Logf(format string, args ...any) { b.d.log.Printf(format, args...) }
