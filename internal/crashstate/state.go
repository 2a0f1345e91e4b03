// Package crashstate keeps, on disk, what the daemon changed in its
// namespace's path manager (endpoint flags it changed, with their values
// before and after; endpoints it created), so that a daemon that was
// killed can be cleaned up after by the next one: what it changed goes
// back, unless someone else has changed it since. A file whose namespace
// is gone is removed by the next daemon to start (prune.go).
package crashstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/google/renameio/v2"

	"mpsteer/internal/pm"
)

// Path is the state file of the namespace with this cookie in dir.
func Path(dir string, netnsCookie uint64) string {
	return filepath.Join(dir, fmt.Sprintf("daemon-netns-%d.json", netnsCookie))
}

// Changed is an endpoint whose flags the daemon changed.
type Changed struct {
	// Original are the flags before the daemon's first change; Set are
	// the flags it set last (someone else's change since shows as flags
	// that are neither).
	Original pm.Flags `json:"original_flags"`
	Set      pm.Flags `json:"set_flags"`
}

type contents struct {
	Changed map[netip.Addr]Changed `json:"changed,omitempty"`
	// Original is the form before set flags were kept (files of older
	// daemons): address → original flags.
	Original map[netip.Addr]pm.Flags `json:"original_flags,omitempty"`
	Owned    map[netip.Addr]uint8    `json:"owned_endpoints,omitempty"`
	// Reopening: endpoints the daemon is re-adding (removed, about to be
	// added again, prefer's fast return), as they are to be put back
	// (original flags) if the daemon dies between the two.
	Reopening map[netip.Addr]pm.Endpoint `json:"reopening,omitempty"`
	// NetnsInode is the namespace's inode: a file whose namespace is gone
	// is removed by the next daemon to start.
	NetnsInode uint64 `json:"netns_inode,omitempty"`
}

// File is one namespace's state, in memory and on disk. Its methods are
// safe for concurrent use.
type File struct {
	mu   sync.Mutex
	path string
	c    contents
	// dirty: changed since the last save.
	dirty bool
}

// Load reads the state file at path. A file that is not there is an
// empty state; one that cannot be read or parsed is an error naming it
// (the state it would have held is not taken for empty: the caller
// decides), and the returned File is empty and usable.
func Load(path string) (*File, error) {
	s := &File{path: path}
	s.c.Changed = map[netip.Addr]Changed{}
	s.c.Owned = map[netip.Addr]uint8{}
	s.c.Reopening = map[netip.Addr]pm.Endpoint{}
	inode := ownNetnsInode()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s.c.NetnsInode = inode
		return s, nil
	}
	if err != nil {
		s.c.NetnsInode = inode
		return s, fmt.Errorf("state file %s: %w", path, err)
	}
	var c contents
	if err := json.Unmarshal(b, &c); err != nil {
		s.c.NetnsInode = inode
		return s, fmt.Errorf("state file %s is not valid (%v): what a previous daemon changed there cannot be undone automatically", path, err)
	}
	for a, f := range c.Original { // an older daemon's file: what it set is unknown
		if _, ok := c.Changed[a]; !ok {
			if s.c.Changed == nil {
				s.c.Changed = map[netip.Addr]Changed{}
			}
			s.c.Changed[a] = Changed{Original: f, Set: f ^ pm.FlagBackup}
		}
	}
	for a, ch := range c.Changed {
		s.c.Changed[a] = ch
	}
	for a, id := range c.Owned {
		s.c.Owned[a] = id
	}
	for a, e := range c.Reopening {
		s.c.Reopening[a] = e
	}
	s.c.NetnsInode = inode // this daemon's, written with the state
	return s, nil
}

// Path is where the file is kept.
func (s *File) Path() string { return s.path }

// SetFlags records that the daemon set addr's endpoint flags to set;
// original is what they were before (kept from the first change).
func (s *File) SetFlags(addr netip.Addr, original, set pm.Flags) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.c.Changed[addr]
	if !ok {
		ch.Original = original
	}
	if ok && ch.Set == set {
		return
	}
	ch.Set = set
	s.c.Changed[addr] = ch
	s.dirty = true
}

// Own records an endpoint the daemon created.
func (s *File) Own(addr netip.Addr, id uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.c.Owned[addr]; ok && old == id {
		return
	}
	s.c.Owned[addr] = id
	s.dirty = true
}

// Reopening records, before the daemon removes addr's endpoint to add it
// again, the endpoint to put back should it die in between.
func (s *File) Reopening(addr netip.Addr, e pm.Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.c.Reopening[addr]; ok && old == e {
		return
	}
	s.c.Reopening[addr] = e
	s.dirty = true
}

// Reopened drops addr's record of Reopening: the endpoint is back.
func (s *File) Reopened(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.c.Reopening[addr]; ok {
		delete(s.c.Reopening, addr)
		s.dirty = true
	}
}

// ReopeningOf reports the endpoint recorded by Reopening for addr.
func (s *File) ReopeningOf(addr netip.Addr) (pm.Endpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.c.Reopening[addr]
	return e, ok
}

// Changed reports what the daemon changed on addr's endpoint.
func (s *File) Changed(addr netip.Addr) (Changed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.c.Changed[addr]
	return ch, ok
}

// Owned reports the id of the endpoint the daemon created for addr.
func (s *File) Owned(addr netip.Addr) (uint8, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.c.Owned[addr]
	return id, ok
}

// Forget drops what is kept for addr.
func (s *File) Forget(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, a := s.c.Changed[addr]
	_, b := s.c.Owned[addr]
	_, c := s.c.Reopening[addr]
	if a || b || c {
		delete(s.c.Changed, addr)
		delete(s.c.Owned, addr)
		delete(s.c.Reopening, addr)
		s.dirty = true
	}
}

// Addrs lists the addresses the daemon changed or created endpoints for,
// in order.
func (s *File) Addrs() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for a := range s.c.Changed {
		seen[a] = true
		out = append(out, a)
	}
	for a := range s.c.Owned {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for a := range s.c.Reopening {
		if !seen[a] {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// Empty reports whether nothing is kept.
func (s *File) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.c.Changed) == 0 && len(s.c.Owned) == 0 && len(s.c.Reopening) == 0
}

// Save writes the state if it changed since the last save (atomically:
// a reader sees the old file or the new one), and removes the file when
// nothing is kept. An error names the file.
func (s *File) Save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty {
		return nil
	}
	if len(s.c.Changed) == 0 && len(s.c.Owned) == 0 && len(s.c.Reopening) == 0 {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("state file %s: %w", s.path, err)
		}
		s.dirty = false
		return nil
	}
	b, err := json.MarshalIndent(s.c, "", "  ")
	if err != nil {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	if err := renameio.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("state file %s: %w", s.path, err)
	}
	s.dirty = false
	return nil
}
