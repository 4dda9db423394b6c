// Command mkimage packs one or more local files into a single-layer OCI image
// and writes it as an OCI image-layout tarball that `ctr images import`
// understands. No registry and no Docker are needed.
//
//	mkimage -o pause.tar -name localhost/pause:lab -add /path/sleeper:/pause -- /pause -name pause
//
// Everything after "--" is the image entrypoint. The output is deterministic
// (fixed mtimes, sorted entries), so the image digest only changes when the
// packed files change.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"
)

type addList []string

func (a *addList) String() string     { return strings.Join(*a, ",") }
func (a *addList) Set(v string) error { *a = append(*a, v); return nil }

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

var epoch = time.Unix(0, 0).UTC()

func main() {
	out := flag.String("o", "", "output tarball (OCI image layout)")
	name := flag.String("name", "", "full image reference, e.g. localhost/pause:lab")
	var adds addList
	flag.Var(&adds, "add", "SRC:DST file to add to the layer (repeatable)")
	flag.Parse()
	entrypoint := flag.Args()
	if *out == "" || *name == "" || len(adds) == 0 || len(entrypoint) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -o OUT.tar -name REF -add SRC:DST [-add ...] -- ENTRYPOINT...")
		os.Exit(2)
	}
	if err := run(*out, *name, adds, entrypoint); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, name string, adds []string, entrypoint []string) error {
	layer, err := buildLayer(adds)
	if err != nil {
		return err
	}
	layerDigest := digest(layer)

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/"},
			"WorkingDir": "/",
			"Labels":     map[string]string{"nri-lab": "true"},
		},
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": []string{layerDigest},
		},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "nrihk-lab mkimage"}},
	})
	if err != nil {
		return err
	}

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor{
			MediaType: "application/vnd.oci.image.config.v1+json",
			Digest:    digest(config),
			Size:      int64(len(config)),
		},
		"layers": []descriptor{{
			MediaType: "application/vnd.oci.image.layer.v1.tar",
			Digest:    layerDigest,
			Size:      int64(len(layer)),
		}},
	})
	if err != nil {
		return err
	}

	tag := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		tag = name[i+1:]
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []descriptor{{
			MediaType: "application/vnd.oci.image.manifest.v1+json",
			Digest:    digest(manifest),
			Size:      int64(len(manifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tag,
			},
			Platform: map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
		}},
	})
	if err != nil {
		return err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, f.data, 0o644); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("%s %s manifest=%s\n", out, name, digest(manifest))
	return nil
}

func buildLayer(adds []string) ([]byte, error) {
	type entry struct{ src, dst string }
	var entries []entry
	for _, a := range adds {
		src, dst, ok := strings.Cut(a, ":")
		if !ok || src == "" || dst == "" {
			return nil, fmt.Errorf("bad -add %q, want SRC:DST", a)
		}
		entries = append(entries, entry{src, strings.TrimPrefix(path.Clean("/"+dst), "/")})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dst < entries[j].dst })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Directories every container expects; runc creates mount points itself.
	for _, d := range []string{"dev/", "etc/", "proc/", "sys/", "tmp/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		data, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return nil, err
		}
		if err := writeFile(tw, e.dst, data, int64(st.Mode().Perm())); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

func blobPath(b []byte) string { return fmt.Sprintf("blobs/sha256/%x", sha256.Sum256(b)) }
