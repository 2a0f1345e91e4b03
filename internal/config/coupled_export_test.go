package config

// StubCoupledSupport stands in for the kernel's answer to whether it can
// run coupled congestion controls, until restore is called.
func StubCoupledSupport(err error) (restore func()) {
	old := coupledSupport
	coupledSupport = func() error { return err }
	return func() { coupledSupport = old }
}
