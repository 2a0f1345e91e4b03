package datapath

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"mpsteer/internal/bpfutil"
)

// Loaded actors take slots in mpsteer_steps from userBase on (below it:
// mpsteer_resume, at resumeIndex).
const userBase = 32

// Actors reports the loaded (user) actors.
func (m *Manager) Actors() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for k := range m.user {
		out[k] = true
	}
	return out
}

// LoadActor loads a user's actor from a BPF object: its tc program is
// checked by the verifier like ours, shares our maps, and becomes usable
// as name(args) in chains.
func (m *Manager) LoadActor(objFile, name string) error {
	m.ops.Lock()
	defer m.ops.Unlock()
	if !actorNameRE(name) {
		return fmt.Errorf("actor name %q is not valid (letters, digits and _, starting with a letter)", name)
	}
	for _, b := range BuiltinActors {
		if b == name {
			return fmt.Errorf("%q is a built-in actor", name)
		}
	}
	if _, ok := m.user[name]; ok {
		return fmt.Errorf("an actor named %q is loaded already", name)
	}
	if _, err := os.Stat(objFile); err != nil {
		return err
	}
	spec, err := ebpf.LoadCollectionSpec(objFile)
	if err != nil {
		return fmt.Errorf("%s: %w", objFile, err)
	}
	var progName string
	for n, p := range spec.Programs {
		if p.Type == ebpf.SchedCLS {
			if progName != "" {
				return fmt.Errorf("%s has more than one tc program (%s, %s): one actor per object", objFile, progName, n)
			}
			progName = n
		}
	}
	if progName == "" {
		return fmt.Errorf("%s has no SEC(\"tc\") program", objFile)
	}
	if at := spec.Programs[progName].AttachType; at != ebpf.AttachNone {
		return fmt.Errorf("%s: the program must be in SEC(\"tc\") (it is tail-called from chains on both hooks), not %s", objFile, at)
	}
	repl := map[string]*ebpf.Map{}
	for n, mp := range m.sharedMaps() {
		if _, ok := spec.Maps[n]; ok {
			repl[n] = mp
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return fmt.Errorf("%s: %w", objFile, bpfutil.VerifierDetail(err))
	}
	prog := coll.DetachProgram(progName)
	coll.Close()
	idx := uint32(userBase + len(m.user))
	if idx >= 64 {
		prog.Close()
		return errors.New("no room for more loaded actors")
	}
	if err := m.objs.MpsteerSteps.Put(idx, prog); err != nil {
		prog.Close()
		return fmt.Errorf("%s: cannot join the step array (is it a plain SEC(\"tc\") program?): %w", objFile, err)
	}
	m.mu.Lock()
	m.user[name] = prog
	m.index["user:"+name] = idx
	m.mu.Unlock()
	return nil
}

func actorNameRE(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
