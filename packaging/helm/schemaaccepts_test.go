package helm_test

import "testing"

// TestValuesTheSchemaAcceptsRenderAConfigThePluginAccepts: values that
// pass values.schema.json and `helm template` must render a config.toml the
// plugin starts with. cgroupMountpoint with a trailing slash (schema "^/")
// is copied unchanged into cgroups.mountpoint, which config check rejects
// since 578f2bc, so the chart cleans it.
func TestValuesTheSchemaAcceptsRenderAConfigThePluginAccepts(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"cgroupMountpoint with a trailing slash": {"cgroupMountpoint": "/sys/fs/cgroup/"},
		// A quoted boolean (helm --set-string): the plugin refused
		// remove_orphaned = "false" (TestBooleansGivenAsStrings).
		"a boolean config key as a string": {"config": map[string]any{"pod_dirs": map[string]any{"remove_orphaned": "false"}, "dry_run": "true"}},
		// The plugin wants runtime.endpoint clean: a socket dir with
		// "//" or a trailing "//" rendered one it refuses (exit 2).
		"socket dirs written with extra slashes": {
			"containerd": map[string]any{"socketDir": "/run//containerd//"},
			"nri":        map[string]any{"socketDir": "/var/run/nri//"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			out := mustRender(t, vals) // schema and templates accept it
			parseConfig(t, decode(t, out))
		})
	}
}
