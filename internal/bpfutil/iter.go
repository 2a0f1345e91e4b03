package bpfutil

import (
	"io"

	"github.com/cilium/ebpf/link"
)

// RunIter runs an iterator program that acts on each object (sets a
// socket option on each TCP socket, say) rather than prints: it reads the
// iterator to its end. A socket iterator walks the network namespace of
// the calling thread.
func RunIter(it *link.Iter) error {
	rd, err := it.Open()
	if err != nil {
		return err
	}
	defer rd.Close()
	_, err = io.Copy(io.Discard, rd)
	return err
}
