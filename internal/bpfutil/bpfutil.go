// Package bpfutil holds what every loader of mpsteer's BPF programs needs
// (the daemon's datapath, the lab's core pinning).
package bpfutil

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// VerifierDetail keeps the useful end of a verifier log, and says that
// loading BPF programs needs root when that is why it failed.
func VerifierDetail(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%+v", ve)
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w (loading BPF programs needs root)", err)
	}
	return err
}

// LoadInNetns loads spec into objs (a bpf2go objects struct) for the
// network namespace with the given cookie (0: every namespace), which the
// programs compare through their `netns_cookie` variable.
func LoadInNetns(spec *ebpf.CollectionSpec, netnsCookie uint64, objs any) error {
	v, ok := spec.Variables["netns_cookie"]
	if !ok {
		return errors.New("the BPF object has no netns_cookie variable")
	}
	if err := v.Set(netnsCookie); err != nil {
		return err
	}
	return spec.LoadAndAssign(objs, nil)
}
