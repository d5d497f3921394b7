package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestChangedFileAndDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(file, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, path := range []string{file, dir} {
		w := New(path)
		if w.Changed() {
			t.Errorf("%s: changed at once", path)
		}
		os.WriteFile(file, []byte(fmt.Sprintf("a: %d\n", i+2)), 0o644)
		if !w.Changed() {
			t.Errorf("%s: a new content not seen", path)
		}
		w.Loaded()
		if w.Changed() {
			t.Errorf("%s: changed after Loaded", path)
		}
	}
	// A directory: a file added, or swapped in by a renamed symbolic link
	// (as Kubernetes updates a ConfigMap), is a change.
	w := New(dir)
	os.WriteFile(filepath.Join(dir, "b.yml"), []byte("b: 1\n"), 0o644)
	if !w.Changed() {
		t.Error("a file added to the directory not seen")
	}
	data := filepath.Join(dir, "data2")
	os.Mkdir(data, 0o755)
	os.WriteFile(filepath.Join(data, "c.yaml"), []byte("c: 1\n"), 0o644)
	link := filepath.Join(dir, "c.yaml")
	if err := os.Symlink(filepath.Join(data, "c.yaml"), link+".tmp"); err != nil {
		t.Skip("no symbolic links here")
	}
	w.Loaded()
	os.Rename(link+".tmp", link)
	if !w.Changed() {
		t.Error("a file linked into the directory not seen")
	}
}

func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(file, []byte("a: 1\n"), 0o644)
	w := New(file)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan struct{}, 1)
	go w.Run(ctx, time.Millisecond, func() {
		w.Loaded()
		select {
		case reloaded <- struct{}{}:
		default:
		}
	})
	os.WriteFile(file, []byte("a: 2\n"), 0o644)
	select {
	case <-reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("a change was never reloaded")
	}
}
