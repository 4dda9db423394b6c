#!/usr/bin/env bash
# Builds the nri-housekeeper container image without a container engine: a
# static binary (CGO_ENABLED=0, -trimpath) and the image's default config,
# packed by packaging/image/main.go (go-containerregistry, in a module of its
# own) into a reproducible OCI image-layout tarball.
#
#   packaging/image/build.sh [OUT.tar]      (default bin/nri-housekeeper-image.tar)
#
# Load it with `ctr -n k8s.io images import OUT.tar`, `nerdctl load`, `podman load`,
# or push it with `skopeo copy oci-archive:OUT.tar:TAG docker://REGISTRY/...`.
#
# Environment (all optional):
#   VERSION      version compiled in and the default tag (git describe)
#   IMAGE_REPO   ghcr.io/nri-housekeeper/nri-housekeeper
#   IMAGE_TAG    the tag under IMAGE_REPO (VERSION, made a valid tag)
#   IMAGE_LOCAL  a second name, e.g. for a local lab (localhost/nri-housekeeper:dev);
#                empty for none
#   PLATFORMS    space-separated os/arch[/variant] (linux/<go env GOARCH>), e.g.
#                "linux/amd64 linux/arm64": one multi-platform image
#   GO           the go command (go)
#   SOURCE_DATE_EPOCH  created time and mtimes in the image (the epoch)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
GO=${GO:-go}
OUT=${1:-bin/nri-housekeeper-image.tar}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/nri-housekeeper/nri-housekeeper}
# A tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
tag=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9_.-' '-' | sed 's/^[.-]*//' | cut -c1-128)
IMAGE_TAG=${IMAGE_TAG:-${tag:-dev}}
IMAGE_LOCAL=${IMAGE_LOCAL-localhost/nri-housekeeper:dev}
PLATFORMS=${PLATFORMS:-linux/$($GO env GOARCH)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Its own module: go-containerregistry is not a dependency of the plugin.
(cd packaging/image && $GO build -o "$work/image" .)
args=()
for platform in $PLATFORMS; do
	IFS=/ read -r os arch variant <<<"$platform"
	goarm=
	if [[ $arch == arm && -n $variant ]]; then goarm=${variant#v}; fi
	root=$work/rootfs-${platform//\//-}
	mkdir -p "$root/etc/nri-housekeeper"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOARM=$goarm $GO build -trimpath \
		-ldflags "-s -w -X main.version=$VERSION" -o "$root/nri-housekeeper" ./cmd/nri-housekeeper
	cp packaging/image/config.toml "$root/etc/nri-housekeeper/config.toml"
	args+=(-rootfs "$platform=$root")
done
names=(-name "$IMAGE_REPO:$IMAGE_TAG")
[[ -z $IMAGE_LOCAL ]] || names+=(-name "$IMAGE_LOCAL")

"$work/image" -o "$OUT" "${names[@]}" "${args[@]}" \
	-env PATH=/ \
	-label org.opencontainers.image.title=nri-housekeeper \
	-label "org.opencontainers.image.description=containerd NRI plugin that reclaims leaked Kubernetes pod state" \
	-label org.opencontainers.image.source=https://github.com/nri-housekeeper/nri-housekeeper \
	-label "org.opencontainers.image.version=$VERSION" \
	-label "org.opencontainers.image.revision=$REVISION" \
	-cmd run -cmd --config -cmd /etc/nri-housekeeper/config.toml \
	-- /nri-housekeeper
