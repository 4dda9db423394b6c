// The image builder, in its own module so that go-containerregistry stays out
// of the plugin's dependencies. Run by packaging/image/build.sh; test with
// cd packaging/image && go test ./...
module github.com/nri-housekeeper/nri-housekeeper/packaging/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
