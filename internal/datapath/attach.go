package datapath

// detach makes a chain inert, takes it off its device and unloads its
// program; it can be called again after a failure.
func (m *Manager) detach(c *chain) error {
	if c.cur != nil {
		c.cur.pause(true)
	}
	if c.link != nil {
		if err := c.link.Close(); err != nil {
			return err
		}
		c.link = nil
	}
	if c.entry != nil {
		c.entry.Close()
		c.entry, c.cur = nil, nil
	}
	for _, p := range c.retired {
		p.Close()
	}
	c.retired = nil
	return nil
}
