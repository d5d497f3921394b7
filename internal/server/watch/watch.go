// Package watch tells the long-running commands (ratekeeper proxy and
// serve) when their configuration changed: it polls a file, or every
// *.yaml and *.yml file of a directory, and compares a hash of what it
// read. Polling the content, not the modification time, is what sees a
// Kubernetes ConfigMap change, which swaps a symbolic link under the files.
package watch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Watcher remembers the content last loaded from a path. It is safe for
// concurrent use.
type Watcher struct {
	path string
	mu   sync.Mutex
	sum  [sha256.Size]byte

	// next is a changed content seen by the last poll, reloaded when the
	// next poll sees it again; a file being written reads differently.
	next    [sha256.Size]byte
	pending bool
}

// New returns a Watcher of path that takes its content now as loaded.
func New(path string) *Watcher {
	w := &Watcher{path: path}
	w.Loaded()
	return w
}

// Loaded records the content of path now as the one loaded: a reload,
// good or bad, is not tried again until the content changes again.
func (w *Watcher) Loaded() {
	sum, err := Sum(w.path)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.sum = sum
	w.mu.Unlock()
}

// Changed reports whether the content of path differs from the one
// loaded. A path that cannot be read (being replaced, perhaps) has not
// changed: the next poll sees it.
func (w *Watcher) Changed() bool {
	sum, err := Sum(w.path)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return sum != w.sum
}

// Run polls every interval until ctx is done. It calls reload when the
// content changed and two polls in a row read the same. So a file being
// written (truncated, then filled) is not loaded half-written.
// reload calls Loaded (the commands' Reload does). A negative interval
// polls never.
func (w *Watcher) Run(ctx context.Context, every time.Duration, reload func()) {
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.poll(reload)
	}
}

// poll calls reload when the content differs from the one loaded and is
// the one the previous poll read.
func (w *Watcher) poll(reload func()) {
	sum, err := Sum(w.path)
	if err != nil {
		return
	}
	w.mu.Lock()
	changed := sum != w.sum
	settled := changed && w.pending && sum == w.next
	w.next, w.pending = sum, changed
	w.mu.Unlock()
	if settled {
		reload()
	}
}

// Sum hashes the content at path: the file, or the directory's *.yaml and
// *.yml files with their names.
func Sum(path string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	fi, err := os.Stat(path)
	if err != nil {
		return out, err
	}
	h := sha256.New()
	files := []string{path}
	if fi.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "*.y*ml")); err != nil {
			return out, err
		}
		sort.Strings(files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	copy(out[:], h.Sum(nil))
	return out, nil
}
