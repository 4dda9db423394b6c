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
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var epoch = time.Unix(0, 0).UTC()

// readTar returns the regular files of a tarball, its headers by name and
// the names in order.
func readTar(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header, []string) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, headers, names
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
		names = append(names, h.Name)
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

func digest(t *testing.T, b []byte) v1.Hash {
	t.Helper()
	h, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// blob reads a blob and checks it against its descriptor.
func blob(t *testing.T, files map[string][]byte, d v1.Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+d.Digest.Hex]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	if digest(t, b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s, size %d (want %d)", d.Digest, digest(t, b), len(b), d.Size)
	}
	return b
}

func build(t *testing.T, spec Spec) ([]byte, v1.Hash) {
	t.Helper()
	var buf bytes.Buffer
	index, err := Build(spec, &buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), index
}

func TestBuildMultiPlatformImage(t *testing.T) {
	spec := Spec{
		Names: []string{"ghcr.io/org/app:1.2.3", "localhost/app:dev"},
		RootFS: []RootFS{
			{v1.Platform{OS: "linux", Architecture: "amd64"}, rootfs(t, "amd64 binary")},
			{v1.Platform{OS: "linux", Architecture: "arm64"}, rootfs(t, "arm64 binary")},
		},
		Entrypoint: []string{"/app"},
		Cmd:        []string{"run", "--config", "/etc/app/config.toml"},
		Env:        []string{"PATH=/"},
		Labels:     map[string]string{"org.opencontainers.image.version": "1.2.3"},
		User:       "0:0",
		WorkingDir: "/",
		Created:    epoch,
	}
	out, indexDigest := build(t, spec)
	if again, _ := build(t, spec); !bytes.Equal(out, again) {
		t.Error("two builds of the same input differ")
	}

	files, headers, names := readTar(t, out)
	if !slices.IsSorted(names) {
		t.Errorf("tarball entries not sorted: %v", names)
	}
	for n, h := range headers {
		mode := int64(0o644)
		if h.Typeflag == tar.TypeDir {
			mode = 0o755
		}
		if h.Mode != mode || !h.ModTime.Equal(epoch) || h.Uid != 0 {
			t.Errorf("tarball entry %s: mode %o mtime %v uid %d", n, h.Mode, h.ModTime, h.Uid)
		}
	}
	var layoutVersion struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(files["oci-layout"], &layoutVersion); err != nil || layoutVersion.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout %q: %v", files["oci-layout"], err)
	}
	var layout v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &layout); err != nil {
		t.Fatal(err)
	}
	if len(layout.Manifests) != 2 {
		t.Fatalf("index.json has %d entries, want one per name", len(layout.Manifests))
	}
	for i, tag := range []string{"1.2.3", "dev"} {
		d := layout.Manifests[i]
		if d.MediaType != types.OCIImageIndex || d.Digest != indexDigest || d.Annotations["io.containerd.image.name"] != spec.Names[i] ||
			d.Annotations["org.opencontainers.image.ref.name"] != tag {
			t.Errorf("index.json entry %d: %+v", i, d)
		}
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(blob(t, files, layout.Manifests[0]), &index); err != nil {
		t.Fatal(err)
	}
	if index.MediaType != types.OCIImageIndex || index.Annotations["org.opencontainers.image.version"] != "1.2.3" || len(index.Manifests) != 2 {
		t.Fatalf("image index %+v, want an OCI index of 2 manifests with the labels as annotations", index)
	}
	for i, md := range index.Manifests {
		want := spec.RootFS[i].Platform
		if md.MediaType != types.OCIManifestSchema1 || md.Platform == nil || !md.Platform.Equals(want) {
			t.Errorf("manifest %d: %s platform %v, want an OCI manifest for %v", i, md.MediaType, md.Platform, want)
		}
		var m v1.Manifest
		if err := json.Unmarshal(blob(t, files, md), &m); err != nil {
			t.Fatal(err)
		}
		if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || m.Annotations["org.opencontainers.image.version"] != "1.2.3" {
			t.Errorf("manifest of %s: %+v", want, m)
		}
		var cfg v1.ConfigFile
		if err := json.Unmarshal(blob(t, files, m.Config), &cfg); err != nil {
			t.Fatal(err)
		}
		c := cfg.Config
		if cfg.Architecture != want.Architecture || cfg.OS != want.OS || !cfg.Created.Equal(epoch) || !slices.Equal(c.Entrypoint, spec.Entrypoint) ||
			!slices.Equal(c.Cmd, spec.Cmd) || !slices.Equal(c.Env, spec.Env) || c.User != "0:0" || c.WorkingDir != "/" ||
			c.Labels["org.opencontainers.image.version"] != "1.2.3" || len(cfg.History) != 1 || !cfg.History[0].Created.Equal(epoch) {
			t.Errorf("config of %s: %+v", want, cfg)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
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
		if !zr.ModTime.IsZero() {
			t.Errorf("gzip header time %v: not reproducible", zr.ModTime)
		}
		if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != digest(t, layer) {
			t.Errorf("diff_ids %v, want the uncompressed layer's digest %s", cfg.RootFS.DiffIDs, digest(t, layer))
		}
		content, headers, names := readTar(t, layer)
		if !slices.IsSorted(names) {
			t.Errorf("%s: layer entries not sorted: %v", want, names)
		}
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

// The created time is the only time in the image: another one changes the
// digest, and the mtimes follow it.
func TestBuildCreatedTime(t *testing.T) {
	spec := Spec{
		Names:      []string{"ghcr.io/org/app:1"},
		RootFS:     []RootFS{{v1.Platform{OS: "linux", Architecture: "amd64"}, rootfs(t, "x")}},
		Entrypoint: []string{"/app"},
		Created:    epoch,
	}
	_, atEpoch := build(t, spec)
	spec.Created = time.Unix(1700000000, 0).UTC()
	out, later := build(t, spec)
	if atEpoch == later {
		t.Error("the created time does not change the image")
	}
	_, headers, _ := readTar(t, out)
	if h := headers["index.json"]; !h.ModTime.Equal(spec.Created) {
		t.Errorf("index.json mtime %v, want %v", h.ModTime, spec.Created)
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	dir := rootfs(t, "x")
	amd64 := RootFS{v1.Platform{OS: "linux", Architecture: "amd64"}, dir}
	for name, spec := range map[string]Spec{
		"no tag":         {Names: []string{"ghcr.io/org/app"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"no registry":    {Names: []string{"app:1"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"bad tag":        {Names: []string{"ghcr.io/org/app:v1+dirty"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"upper case":     {Names: []string{"ghcr.io/Org/app:1"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}},
		"platform twice": {Names: []string{"ghcr.io/org/app:1"}, RootFS: []RootFS{amd64, amd64}, Entrypoint: []string{"/app"}},
	} {
		if _, err := Build(spec, io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := os.Symlink("app", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Spec{Names: []string{"localhost/app:1"}, RootFS: []RootFS{amd64}, Entrypoint: []string{"/app"}}, io.Discard); err == nil {
		t.Error("a symlink was packed")
	}
	if _, err := parsePlatform("linux"); err == nil {
		t.Error("platform without an architecture accepted")
	}
	if p, err := parsePlatform("linux/arm/v7"); err != nil || p.Variant != "v7" {
		t.Errorf("linux/arm/v7: %v %v", p, err)
	}
}
