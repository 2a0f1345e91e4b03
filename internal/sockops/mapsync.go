package sockops

import (
	"errors"

	"github.com/cilium/ebpf"
)

// syncMap makes the BPF map m hold want, given have (what it holds now,
// as this process put it there): entries no longer wanted are deleted,
// new or changed ones put, with key and value converting to the map's
// types. have follows what the kernel took, entry by entry, so a failed
// update is tried again next time.
func syncMap[K, V comparable, MK, MV any](m *ebpf.Map, have, want map[K]V, key func(K) MK, val func(V) MV) error {
	var errs error
	for k := range have {
		if _, keep := want[k]; !keep {
			mk := key(k)
			if err := m.Delete(&mk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = errors.Join(errs, err)
			}
			delete(have, k)
		}
	}
	for k, v := range want {
		if old, ok := have[k]; ok && old == v {
			continue
		}
		mk, mv := key(k), val(v)
		if err := m.Put(&mk, &mv); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		have[k] = v
	}
	return errs
}
