package policy

// The shaped mode of dynthresh (the default). The paper's rule sets a bad
// path aside only after it has done its damage, and a probe with a window
// of full traffic does it again. Here a path earns its traffic first (see
// shaper): a joining subflow stays aside (backup) until a short trial
// shows that the connection delivers more in order with it than without;
// a far one is held to what arrives in time within the receive window.
// The paper's threshold stays as the safety net: when the connection
// delivers less than its main path alone (by margin) for a second, the
// slowest other subflow goes aside until its next trial.

func (d *DynThresh) decideAllShaped(s *Snapshot) []Action {
	var out []Action
	out, d.shapedStatus = d.sh.decideAll(s)
	return out
}
