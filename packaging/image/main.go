// Command image packs root file system directories, one per platform, into a
// single-layer OCI image with go-containerregistry and writes it as an OCI
// image-layout tarball, the format `ctr images import`, `nerdctl load`,
// `podman load` and `skopeo copy oci-archive:...` read. No container engine
// and no registry are needed.
//
//	go run . -o image.tar -name ghcr.io/org/app:1.0 -name localhost/app:dev \
//	    -rootfs linux/amd64=dir-amd64 -rootfs linux/arm64=dir-arm64 \
//	    -env PATH=/ -label org.opencontainers.image.version=1.0 \
//	    -cmd run -- /app
//
// Everything after "--" is the entrypoint; -cmd (repeatable) gives the
// default arguments. Each -name becomes an entry of index.json pointing at
// the same image index, which lists one manifest per platform.
//
// The output is reproducible: tar entries sorted and owned by root, every
// mtime and created time $SOURCE_DATE_EPOCH (default the epoch), modes 0755
// (directories and executables) or 0644, gzip without a timestamp.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RootFS is one platform's root file system directory.
type RootFS struct {
	Platform v1.Platform
	Dir      string
}

// Spec is what goes into the image.
type Spec struct {
	Names      []string // full references with a tag, e.g. ghcr.io/org/app:1.0
	RootFS     []RootFS
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	Labels     map[string]string
	User       string
	WorkingDir string
	Created    time.Time // the created time and every file's mtime
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	out := flag.String("o", "", "output tarball (OCI image layout)")
	var names, rootfs, env, labels, cmd listFlag
	flag.Var(&names, "name", "full image reference with a tag, e.g. ghcr.io/org/app:1.0 (repeatable)")
	flag.Var(&rootfs, "rootfs", "OS/ARCH[/VARIANT]=DIR: the root file system of a platform (repeatable)")
	flag.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE image label, also set as annotation (repeatable)")
	flag.Var(&cmd, "cmd", "default argument (the image's Cmd; repeatable, in order)")
	user := flag.String("user", "", "user (and group) the image runs as, e.g. 0:0")
	workdir := flag.String("workdir", "/", "working directory")
	flag.Parse()
	spec := Spec{Names: names, Entrypoint: flag.Args(), Cmd: cmd, Env: env, User: *user, WorkingDir: *workdir, Labels: map[string]string{}}
	err := func() error {
		if *out == "" || len(names) == 0 || len(rootfs) == 0 || len(spec.Entrypoint) == 0 {
			return errors.New("usage: image -o OUT.tar -name REF [-name REF...] -rootfs OS/ARCH=DIR [-rootfs ...] [-env K=V] [-label K=V] [-user U] [-cmd ARG]... -- ENTRYPOINT [ARG]")
		}
		var err error
		if spec.Created, err = sourceDateEpoch(); err != nil {
			return err
		}
		for _, r := range rootfs {
			p, dir, ok := strings.Cut(r, "=")
			if !ok || dir == "" {
				return fmt.Errorf("bad -rootfs %q, want OS/ARCH=DIR", r)
			}
			plat, err := parsePlatform(p)
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
		// Written next to OUT and renamed, so that OUT is never half written.
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
		f, err := os.CreateTemp(filepath.Dir(*out), filepath.Base(*out)+".*.tmp")
		if err != nil {
			return fmt.Errorf("creating the output: %w", err)
		}
		defer os.Remove(f.Name())
		index, err := Build(spec, f)
		if err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", f.Name(), err)
		}
		// CreateTemp makes it 0600; an image tarball is not secret.
		if err := os.Chmod(f.Name(), 0o644); err != nil {
			return fmt.Errorf("chmod %s: %w", f.Name(), err)
		}
		if err := os.Rename(f.Name(), *out); err != nil {
			return fmt.Errorf("renaming the output: %w", err)
		}
		for _, n := range names {
			fmt.Printf("%s %s index=%s\n", *out, n, index)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(2)
	}
}

// sourceDateEpoch is $SOURCE_DATE_EPOCH (the reproducible-builds convention),
// or the epoch: a build time would change the image digest on every build.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
	}
	return time.Unix(s, 0).UTC(), nil
}

// parsePlatform is v1.ParsePlatform, which takes a bare "linux", requiring
// an architecture.
func parsePlatform(s string) (v1.Platform, error) {
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("platform %q: %w", s, err)
	}
	if p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("bad platform %q, want os/arch[/variant]", s)
	}
	return *p, nil
}

// Build writes the OCI-layout tarball of spec to w and returns the digest of
// its image index.
func Build(spec Spec, w io.Writer) (v1.Hash, error) {
	// Strict: a name without registry or tag would otherwise be completed
	// (index.docker.io, latest) into a name nobody asked for.
	for _, n := range spec.Names {
		if _, err := name.NewTag(n, name.StrictValidation); err != nil {
			return v1.Hash{}, fmt.Errorf("image name: %w", err)
		}
	}
	var manifests []mutate.IndexAddendum
	for i, r := range spec.RootFS {
		for _, prev := range spec.RootFS[:i] {
			if prev.Platform.Equals(r.Platform) {
				return v1.Hash{}, fmt.Errorf("platform %s given twice", r.Platform)
			}
		}
		img, err := platformImage(spec, r)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", r.Platform, err)
		}
		manifests = append(manifests, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &r.Platform}})
	}
	index := mutate.Annotations(mutate.AppendManifests(empty.Index, manifests...), spec.Labels).(v1.ImageIndex)

	// index.json: one entry per name, all the same image index. containerd's
	// importer names the image after io.containerd.image.name; other tools
	// (skopeo, podman) look up org.opencontainers.image.ref.name, the tag.
	var refs []mutate.IndexAddendum
	for _, n := range spec.Names {
		tag, _ := name.NewTag(n, name.StrictValidation)
		refs = append(refs, mutate.IndexAddendum{Add: index, Descriptor: v1.Descriptor{Annotations: map[string]string{
			"io.containerd.image.name":          n,
			"org.opencontainers.image.ref.name": tag.TagStr(),
		}}})
	}
	dir, err := os.MkdirTemp("", "nri-housekeeper-image-")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layout directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, mutate.AppendManifests(empty.Index, refs...)); err != nil {
		return v1.Hash{}, fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := writeTree(w, dir, spec.Created, nil, false); err != nil {
		return v1.Hash{}, fmt.Errorf("packing the OCI layout: %w", err)
	}
	return index.Digest()
}

// platformImage is the single-layer image of one platform's root file system.
func platformImage(spec Spec, r RootFS) (v1.Image, error) {
	var buf bytes.Buffer
	// The directories every container expects, even if empty.
	dirs := map[string]int64{"dev": 0o755, "etc": 0o755, "proc": 0o755, "sys": 0o755, "tmp": 0o1777}
	if err := writeTree(&buf, r.Dir, spec.Created, dirs, true); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	},
		tarball.WithMediaType(types.OCILayer), // the default is Docker's
		tarball.WithCompressionLevel(gzip.BestCompression),
		tarball.WithCompressedCaching) // else it gzips once for the digest and again for the blob
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	created := v1.Time{Time: spec.Created}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: r.Platform.Architecture,
		OS:           r.Platform.OS,
		OSVersion:    r.Platform.OSVersion,
		Variant:      r.Platform.Variant,
		Created:      created,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: spec.Entrypoint,
			Cmd:        spec.Cmd,
			Env:        spec.Env,
			Labels:     spec.Labels,
			User:       spec.User,
			WorkingDir: spec.WorkingDir,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: created, CreatedBy: "packaging/image/build.sh"},
	})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	// empty.Image is a Docker image; make the manifest and config OCI ones.
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Annotations(img, spec.Labels).(v1.Image), nil
}

// writeTree writes the directories and regular files under root, plus the
// directories in extra with their modes, to w as a reproducible tar: entries
// sorted by name, owned by root, every mtime t, directories 0755, files 0644
// or, with keepExec, 0755 if any execute bit is set. Anything else (a
// symlink, a device) is refused: the image needs none.
func writeTree(w io.Writer, root string, t time.Time, extra map[string]int64, keepExec bool) error {
	headers := map[string]*tar.Header{}
	for d, mode := range extra {
		headers[d+"/"] = &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}
	}
	files := map[string]string{} // name in the tar -> path
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		n := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			if headers[n+"/"] == nil {
				headers[n+"/"] = &tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: 0o755}
			}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if keepExec && info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			headers[n] = &tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: info.Size()}
			files[n] = p
		default:
			return fmt.Errorf("%s: only directories and regular files can be packed", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, n := range slices.Sorted(maps.Keys(headers)) {
		h := headers[n]
		h.ModTime = t
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyFile(tw, files[n]); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
