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

// kubeletDir lays out dir as the kubelet mounts a ConfigMap volume: the
// data in a timestamped directory, ..data a symbolic link to it, and each
// key a symbolic link through ..data. swap replaces the data as the
// kubelet's atomic writer does: a new timestamped directory, a new link
// renamed over ..data, the old directory removed.
type kubeletDir struct {
	t   *testing.T
	dir string
	gen int
	old string
}

func newKubeletDir(t *testing.T, files map[string]string) *kubeletDir {
	k := &kubeletDir{t: t, dir: t.TempDir()}
	k.swap(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(k.dir, name)); err != nil {
			t.Skip("no symbolic links here:", err)
		}
	}
	return k
}

func (k *kubeletDir) swap(files map[string]string) {
	k.gen++
	ts := fmt.Sprintf("..2026_11_23_21_00_%02d.%09d", k.gen, k.gen)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		k.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(k.dir, ts, name), []byte(content), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		k.t.Skip("no symbolic links here:", err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
	if k.old != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, k.old)); err != nil {
			k.t.Fatal(err)
		}
	}
	k.old = ts
}

// A ConfigMap mounted as a directory changes by a swap of ..data: the
// files' names, sizes and links stay, only what ..data points at moves.
// Watching the file through its link (the gateway's --config) and the
// directory (serve's --config) both see it, and neither sees a change when
// the kubelet swaps in the same content.
func TestKubeletConfigMapSwap(t *testing.T) {
	k := newKubeletDir(t, map[string]string{"gateway.yaml": "rate: 1\n"})
	for _, path := range []string{filepath.Join(k.dir, "gateway.yaml"), k.dir} {
		w := New(path)
		k.swap(map[string]string{"gateway.yaml": "rate: 1\n"})
		if w.Changed() {
			t.Errorf("%s: the same content swapped in is a change", path)
		}
		k.swap(map[string]string{"gateway.yaml": "rate: 2\n"}) // same size
		if !w.Changed() {
			t.Errorf("%s: the ..data swap not seen", path)
		}
		w.Loaded()
		if w.Changed() {
			t.Errorf("%s: changed after Loaded", path)
		}
		k.swap(map[string]string{"gateway.yaml": "rate: 1\n"})
	}
}

// A file read while being written is not reloaded: a change is reloaded
// when two polls in a row read it. Reloaded half-written, an empty file
// (truncated, not yet filled) served no rules for a moment: an end-to-end
// test saw a limited path answered 200.
func TestPollWaitsForTheFileToSettle(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.yaml")
	os.WriteFile(file, []byte("rules: [a, b]\n"), 0o644)
	w := New(file)
	var reloads []string
	reload := func() {
		b, _ := os.ReadFile(file)
		reloads = append(reloads, string(b))
		w.Loaded()
	}
	w.poll(reload) // unchanged
	os.WriteFile(file, nil, 0o644)
	w.poll(reload) // truncated: seen once
	os.WriteFile(file, []byte("rules: [a, b, c]\n"), 0o644)
	w.poll(reload) // filled: seen once
	if len(reloads) != 0 {
		t.Fatalf("reloaded %q before the file settled", reloads)
	}
	w.poll(reload) // the same twice: settled
	w.poll(reload) // loaded: nothing to do
	if len(reloads) != 1 || reloads[0] != "rules: [a, b, c]\n" {
		t.Fatalf("reloads %q, want the filled file once", reloads)
	}
	os.WriteFile(file, []byte("rules: [a, b]\n"), 0o644)
	w.poll(reload)
	os.WriteFile(file, []byte("rules: [a, b, c]\n"), 0o644) // back to the loaded content
	w.poll(reload)
	w.poll(reload)
	if len(reloads) != 1 {
		t.Fatalf("reloads %q: a change undone before it settled was reloaded", reloads)
	}
}
