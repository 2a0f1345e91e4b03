package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchSettle is how long the config file's directory must be quiet
// before the file is read: an editor's save (write, rename, chmod) or a
// Kubernetes ConfigMap update (a symlink swapped) is several events.
const watchSettle = 200 * time.Millisecond

// watchRecheck is how often the watcher looks whether the daemon runs
// another file now (`policy apply` names one).
const watchRecheck = time.Second

// watchConfig reloads the config, the way SIGHUP does, whenever the
// content of the file the daemon runs changes. It watches the file's
// directory, not the file: editors replace files by renaming, and a
// ConfigMap volume swaps a symlink; what counts is the content read
// through the path. A config that is wrong is refused and logged (once
// per change), and the old one stays.
func (d *Daemon) watchConfig(ctx context.Context) (stop func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		d.log.Printf("config file changes are not watched: %v (SIGHUP reloads it)", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		d.watchLoop(ctx, w)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (d *Daemon) currentFile() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg.File
}

func fileSum(file string) []byte {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	s := sha256.Sum256(b)
	return s[:]
}

func (d *Daemon) watchLoop(ctx context.Context, w *fsnotify.Watcher) {
	var file, dir string
	var sum []byte
	follow := func() {
		f := d.currentFile()
		if f == file {
			return
		}
		nd := filepath.Dir(f)
		if nd != dir {
			if dir != "" {
				w.Remove(dir)
			}
			if err := w.Add(nd); err != nil {
				d.log.Printf("config file changes in %s are not watched: %v (SIGHUP reloads it)", nd, err)
				nd = ""
			}
			dir = nd
		}
		file, sum = f, fileSum(f)
		d.watched.Store(&f)
	}
	follow()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	recheck := time.NewTicker(watchRecheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			d.log.Printf("config watch: %v", err)
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			// Any change in the directory: look at the file once it
			// settles (its own name, a rename onto it, a symlink swap).
			settle.Reset(watchSettle)
		case <-recheck.C:
			follow()
		case <-settle.C:
			follow()
			now := fileSum(file)
			if now == nil || bytes.Equal(now, sum) {
				continue // gone (being replaced) or the same content
			}
			sum = now
			d.reloadConfig("config file changed")
		}
	}
}
