// Command mkimage packs root file system directories, one per platform, into
// a single-layer OCI image and writes it as an OCI image-layout tarball, the
// format `ctr images import`, `nerdctl load`, `podman load` and
// `skopeo copy oci-archive:...` read. No container engine and no registry are
// needed.
//
//	mkimage -o image.tar -name ghcr.io/org/app:1.0 -name localhost/app:dev \
//	    -rootfs linux/amd64=dir-amd64 -rootfs linux/arm64=dir-arm64 \
//	    -env PATH=/ -label org.opencontainers.image.version=1.0 \
//	    -cmd run -- /app
//
// Everything after "--" is the entrypoint; -cmd (repeatable) gives the
// default arguments. Each -name becomes an entry of index.json pointing at
// the same image index, which lists one manifest per platform.
//
// The output is deterministic: entries sorted, owner root, fixed mtimes
// (the epoch), modes normalized to 0755 (directories and executables) or
// 0644, gzip without a timestamp. The image digest only changes when the
// packed files or the flags change.
//
// It extends the e2e lab's test/e2e/lab/cmd/mkimage (several names and
// platforms, directories, gzip layers, Cmd, Env, User and labels).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image spec.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

var epoch = time.Unix(0, 0).UTC()

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Platform is an OCI platform: os/architecture[/variant].
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform parses os/arch[/variant].
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("bad platform %q, want os/arch[/variant]", s)
	}
	p := Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// RootFS is one platform's root file system directory.
type RootFS struct {
	Platform Platform
	Dir      string
}

// Spec is what goes into the image.
type Spec struct {
	Names      []string // full references, e.g. ghcr.io/org/app:1.0
	RootFS     []RootFS
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	Labels     map[string]string
	User       string
	WorkingDir string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

func main() {
	out := flag.String("o", "", "output tarball (OCI image layout)")
	var names, rootfs, env, labels, cmd listFlag
	flag.Var(&names, "name", "full image reference, e.g. ghcr.io/org/app:1.0 (repeatable)")
	flag.Var(&rootfs, "rootfs", "OS/ARCH[/VARIANT]=DIR: the root file system of a platform (repeatable)")
	flag.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE image label (repeatable)")
	flag.Var(&cmd, "cmd", "default argument (the image's Cmd; repeatable, in order)")
	user := flag.String("user", "", "user (and group) the image runs as, e.g. 0:0")
	workdir := flag.String("workdir", "/", "working directory")
	flag.Parse()
	spec := Spec{Names: names, Entrypoint: flag.Args(), Cmd: cmd, Env: env, User: *user, WorkingDir: *workdir, Labels: map[string]string{}}
	err := func() error {
		if *out == "" || len(names) == 0 || len(rootfs) == 0 || len(spec.Entrypoint) == 0 {
			return errors.New("usage: mkimage -o OUT.tar -name REF [-name REF...] -rootfs OS/ARCH=DIR [-rootfs ...] [-env K=V] [-label K=V] [-user U] [-cmd ARG]... -- ENTRYPOINT [ARG]")
		}
		for _, r := range rootfs {
			p, dir, ok := strings.Cut(r, "=")
			if !ok || dir == "" {
				return fmt.Errorf("bad -rootfs %q, want OS/ARCH=DIR", r)
			}
			plat, err := ParsePlatform(p)
			if err != nil {
				return err
			}
			spec.RootFS = append(spec.RootFS, RootFS{plat, dir})
		}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return fmt.Errorf("bad -label %q, want KEY=VALUE", l)
			}
			spec.Labels[k] = v
		}
		for _, e := range env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				return fmt.Errorf("bad -env %q, want KEY=VALUE", e)
			}
		}
		tarball, index, err := Build(spec)
		if err != nil {
			return err
		}
		if err := writeAtomic(*out, tarball); err != nil {
			return err
		}
		for _, n := range names {
			fmt.Printf("%s %s index=%s\n", *out, n, index)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(2)
	}
}

// Build returns the OCI-layout tarball of spec and the digest of its image
// index.
func Build(spec Spec) ([]byte, string, error) {
	blobs := map[string][]byte{}
	add := func(b []byte) string {
		d := digest(b)
		blobs[d] = b
		return d
	}
	var manifests []descriptor
	seen := map[string]bool{}
	for _, r := range spec.RootFS {
		if seen[r.Platform.String()] {
			return nil, "", fmt.Errorf("platform %s given twice", r.Platform)
		}
		seen[r.Platform.String()] = true
		layer, err := buildLayer(r.Dir)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", r.Platform, err)
		}
		gz, err := compress(layer)
		if err != nil {
			return nil, "", err
		}
		env := spec.Env
		if env == nil {
			env = []string{"PATH=/"}
		}
		cfg := map[string]any{
			"Entrypoint": spec.Entrypoint,
			"Env":        env,
			"WorkingDir": spec.WorkingDir,
		}
		if len(spec.Cmd) > 0 {
			cfg["Cmd"] = spec.Cmd
		}
		if spec.User != "" {
			cfg["User"] = spec.User
		}
		if len(spec.Labels) > 0 {
			cfg["Labels"] = spec.Labels
		}
		image := map[string]any{
			"architecture": r.Platform.Architecture,
			"os":           r.Platform.OS,
			"created":      epoch.Format(time.RFC3339),
			"config":       cfg,
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest(layer)}},
			"history":      []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "packaging/image/mkimage"}},
		}
		if r.Platform.Variant != "" {
			image["variant"] = r.Platform.Variant
		}
		config, err := json.Marshal(image)
		if err != nil {
			return nil, "", err
		}
		manifest, err := json.Marshal(withAnnotations(map[string]any{
			"schemaVersion": 2,
			"mediaType":     mediaTypeManifest,
			"config":        descriptor{MediaType: mediaTypeConfig, Digest: add(config), Size: int64(len(config))},
			"layers":        []descriptor{{MediaType: mediaTypeLayer, Digest: add(gz), Size: int64(len(gz))}},
		}, spec.Labels))
		if err != nil {
			return nil, "", err
		}
		p := r.Platform
		manifests = append(manifests, descriptor{MediaType: mediaTypeManifest, Digest: add(manifest), Size: int64(len(manifest)), Platform: &p})
	}
	imageIndex, err := json.Marshal(withAnnotations(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     manifests,
	}, spec.Labels))
	if err != nil {
		return nil, "", err
	}
	indexDigest := add(imageIndex)

	var refs []descriptor
	for _, name := range spec.Names {
		if err := checkRef(name); err != nil {
			return nil, "", err
		}
		refs = append(refs, descriptor{
			MediaType: mediaTypeIndex, Digest: indexDigest, Size: int64(len(imageIndex)),
			Annotations: map[string]string{
				"io.containerd.image.name":          name,
				"org.opencontainers.image.ref.name": tagOf(name),
			},
		})
	}
	layout, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaTypeIndex, "manifests": refs})
	if err != nil {
		return nil, "", err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, "", err
		}
	}
	if err := writeFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return nil, "", err
	}
	if err := writeFile(tw, "index.json", layout, 0o644); err != nil {
		return nil, "", err
	}
	var ds []string
	for d := range blobs {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	for _, d := range ds {
		if err := writeFile(tw, "blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), blobs[d], 0o644); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), indexDigest, nil
}

// buildLayer tars the tree under dir: directories and regular files only,
// plus the directories every container expects.
func buildLayer(dir string) ([]byte, error) {
	type entry struct {
		name string
		path string // "" for a directory
		mode int64
	}
	entries := map[string]entry{}
	for _, d := range []string{"dev", "etc", "proc", "sys", "tmp"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		entries[d+"/"] = entry{name: d + "/", mode: mode}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			if _, ok := entries[rel+"/"]; !ok {
				entries[rel+"/"] = entry{name: rel + "/", mode: 0o755}
			}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			entries[rel] = entry{name: rel, path: p, mode: mode}
		default:
			return fmt.Errorf("%s: only directories and regular files can be packed", p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		if e.path == "" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(e.path)
		if err != nil {
			return nil, err
		}
		if err := writeFile(tw, e.name, data, e.mode); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withAnnotations sets m's annotations (the OCI image labels) unless there are none.
func withAnnotations(m map[string]any, a map[string]string) map[string]any {
	if len(a) > 0 {
		m["annotations"] = a
	}
	return m
}

func compress(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// checkRef accepts NAME:TAG references with a registry host or localhost.
func checkRef(ref string) error {
	repo, tag := ref, tagOf(ref)
	if tag == ref {
		return fmt.Errorf("image name %q has no tag", ref)
	}
	repo = strings.TrimSuffix(ref, ":"+tag)
	if repo == "" || strings.ContainsAny(repo, " @") || strings.ToLower(repo) != repo {
		return fmt.Errorf("bad image name %q", ref)
	}
	if len(tag) > 128 || strings.IndexFunc(tag, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-')
	}) >= 0 || tag[0] == '.' || tag[0] == '-' {
		return fmt.Errorf("bad tag %q in %q", tag, ref)
	}
	return nil
}

// tagOf is the tag of ref, or ref itself if it has none.
func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return ref
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func digest(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
