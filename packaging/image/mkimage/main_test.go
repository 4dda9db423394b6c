package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readTar returns the regular files of a tarball, and its headers by name.
func readTar(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

func rootfs(t *testing.T, binary string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc/app"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app"), []byte(binary), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc/app/config.toml"), []byte("x = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// blob reads a blob and checks it against its descriptor.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	if digest(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s, size %d (want %d)", d.Digest, digest(b), len(b), d.Size)
	}
	return b
}

func TestBuildMultiPlatformImage(t *testing.T) {
	spec := Spec{
		Names: []string{"ghcr.io/org/app:1.2.3", "localhost/app:dev"},
		RootFS: []RootFS{
			{Platform{OS: "linux", Architecture: "amd64"}, rootfs(t, "amd64 binary")},
			{Platform{OS: "linux", Architecture: "arm64"}, rootfs(t, "arm64 binary")},
		},
		Entrypoint: []string{"/app"},
		Cmd:        []string{"run", "--config", "/etc/app/config.toml"},
		Env:        []string{"PATH=/"},
		Labels:     map[string]string{"org.opencontainers.image.version": "1.2.3"},
		User:       "0:0",
		WorkingDir: "/",
	}
	out, indexDigest, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Error("two builds of the same input differ")
	}

	files, _ := readTar(t, out)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", files["oci-layout"])
	}
	var layout struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &layout); err != nil {
		t.Fatal(err)
	}
	if len(layout.Manifests) != 2 {
		t.Fatalf("index.json has %d entries, want one per name", len(layout.Manifests))
	}
	for i, name := range spec.Names {
		d := layout.Manifests[i]
		if d.MediaType != mediaTypeIndex || d.Digest != indexDigest || d.Annotations["io.containerd.image.name"] != name ||
			d.Annotations["org.opencontainers.image.ref.name"] != tagOf(name) {
			t.Errorf("index.json entry %d: %+v", i, d)
		}
	}
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(blob(t, files, layout.Manifests[0]), &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 {
		t.Fatalf("image index lists %d manifests, want 2", len(index.Manifests))
	}
	for i, md := range index.Manifests {
		want := spec.RootFS[i].Platform
		if md.Platform == nil || *md.Platform != want {
			t.Errorf("manifest %d: platform %v, want %v", i, md.Platform, want)
		}
		var m struct {
			Config descriptor
			Layers []descriptor
		}
		if err := json.Unmarshal(blob(t, files, md), &m); err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Architecture, OS string
			Config           struct {
				Entrypoint, Cmd, Env []string
				User, WorkingDir     string
				Labels               map[string]string
			}
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			}
		}
		if err := json.Unmarshal(blob(t, files, m.Config), &cfg); err != nil {
			t.Fatal(err)
		}
		c := cfg.Config
		if cfg.Architecture != want.Architecture || cfg.OS != want.OS || !slices.Equal(c.Entrypoint, spec.Entrypoint) ||
			!slices.Equal(c.Cmd, spec.Cmd) || !slices.Equal(c.Env, spec.Env) || c.User != "0:0" || c.WorkingDir != "/" ||
			c.Labels["org.opencontainers.image.version"] != "1.2.3" {
			t.Errorf("config of %s: %+v", want, cfg)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != mediaTypeLayer {
			t.Fatalf("layers %+v", m.Layers)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(layer) {
			t.Errorf("diff_ids %v, want the uncompressed layer's digest %s", cfg.RootFS.DiffIDs, digest(layer))
		}
		content, headers := readTar(t, layer)
		if string(content["app"]) != want.Architecture+" binary" {
			t.Errorf("%s: /app is %q", want, content["app"])
		}
		for name, mode := range map[string]int64{"app": 0o755, "etc/app/config.toml": 0o644, "etc/app/": 0o755, "tmp/": 0o1777, "proc/": 0o755} {
			h, ok := headers[name]
			switch {
			case !ok:
				t.Errorf("%s: no %s in the layer", want, name)
			case h.Mode != mode || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch):
				t.Errorf("%s: %s mode %o uid %d gid %d mtime %v", want, name, h.Mode, h.Uid, h.Gid, h.ModTime)
			}
		}
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	dir := rootfs(t, "x")
	amd64 := RootFS{Platform{OS: "linux", Architecture: "amd64"}, dir}
	for name, spec := range map[string]Spec{
		"no tag":         {Names: []string{"ghcr.io/org/app"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"bad tag":        {Names: []string{"ghcr.io/org/app:v1+dirty"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"upper case":     {Names: []string{"ghcr.io/Org/app:1"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"platform twice": {Names: []string{"ghcr.io/org/app:1"}, RootFS: []RootFS{amd64, amd64}, Entrypoint: []string{"/app"}},
	} {
		if _, _, err := Build(spec); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := os.Symlink("app", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Build(Spec{Names: []string{"a/b:1"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}}); err == nil {
		t.Error("a symlink was packed")
	}
	if _, err := ParsePlatform("linux"); err == nil {
		t.Error("platform without an architecture accepted")
	}
	if p, err := ParsePlatform("linux/arm/v7"); err != nil || p.Variant != "v7" {
		t.Errorf("linux/arm/v7: %v %v", p, err)
	}
}
