package helm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"helm.sh/helm/v3/pkg/strvals"

	"github.com/nri-housekeeper/nri-housekeeper/config"
)

// TestBooleansGivenAsStrings: helm --set-string, or a quoted value in a
// values file, makes a boolean the string "true" or "false". The chart must
// take it for that boolean both where it decides (the kubelet pods dir is
// mounted read-write only for remove_orphaned true; systemd's dir and the
// CNI dirs follow cgroups.enabled and network.enabled) and in config.toml,
// which the plugin reads strictly: the string "false" is truthy in a
// template, and remove_orphaned = "false" stops the plugin ("expected a
// boolean", exit 2: a crash loop), with the pods dir mounted read-write.
func TestBooleansGivenAsStrings(t *testing.T) {
	type boolCase struct {
		set          string // KEY=VALUE, as helm --set-string
		podsReadOnly bool   // <kubelet.rootDir>/pods
		check        func(config.Config) bool
	}
	cases := []boolCase{
		{"config.pod_dirs.remove_orphaned=false", true, func(c config.Config) bool { return !c.PodDirs.RemoveOrphaned }},
		{"config.pod_dirs.remove_orphaned=true", false, func(c config.Config) bool { return c.PodDirs.RemoveOrphaned }},
		{"config.dry_run=false", true, func(c config.Config) bool { return !c.DryRun }},
		{"config.dry_run=true", true, func(c config.Config) bool { return c.DryRun }},
		{"config.cgroups.enabled=false", true, func(c config.Config) bool { return !c.Cgroups.Enabled }},
		{"config.cgroups.enabled=true", true, func(c config.Config) bool { return c.Cgroups.Enabled }},
		{"config.network.enabled=false", true, func(c config.Config) bool { return !c.Network.Enabled }},
		{"config.network.enabled=true", true, func(c config.Config) bool { return c.Network.Enabled }},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			key, value, _ := strings.Cut(strings.TrimPrefix(tc.set, "config."), "=")
			vals := map[string]any{}
			if err := strvals.ParseIntoString(tc.set, vals); err != nil {
				t.Fatal(err)
			}
			rel, err := install(t, vals)
			if err != nil {
				t.Fatalf("--set-string %s: %v", tc.set, err)
			}
			o := decode(t, rel.Manifest)
			if m := hostMounts(t, o.ds)["/var/lib/kubelet/pods"].mount; m.ReadOnly != tc.podsReadOnly {
				t.Errorf("--set-string %s: /var/lib/kubelet/pods readOnly %v, want %v", tc.set, m.ReadOnly, tc.podsReadOnly)
			}
			text := o.cm.Data["config.toml"]
			if got := tomlKey(t, text, key); got != (value == "true") {
				t.Errorf("--set-string %s: config.toml has %s = %#v, want the boolean %s\n--- config.toml:\n%s", tc.set, key, got, value, text)
			}
			checkDaemonSet(t, o) // the plugin parses the config, and the mounts agree with it
			if cfg := parseConfig(t, o); !tc.check(cfg) {
				t.Errorf("--set-string %s: the plugin reads %+v", tc.set, cfg)
			}
			// Exactly what the boolean itself (helm --set) renders: the
			// objects, config.toml and the notes.
			typed := map[string]any{}
			if err := strvals.ParseInto(tc.set, typed); err != nil {
				t.Fatal(err)
			}
			want, err := install(t, typed)
			if err != nil {
				t.Fatalf("--set %s: %v", tc.set, err)
			}
			if rel.Manifest != want.Manifest || rel.Info.Notes != want.Info.Notes {
				t.Errorf("--set-string %s renders otherwise than --set %s:\n%s%s", tc.set, tc.set,
					firstDiff(want.Manifest, rel.Manifest), firstDiff(want.Info.Notes, rel.Info.Notes))
			}
		})
	}

	// Every boolean key of the plugin (the example config documents every
	// key) is in the table, both ways.
	t.Run("every boolean key", func(t *testing.T) {
		var example map[string]any
		if err := toml.Unmarshal([]byte(config.Example()), &example); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k, v := range example {
			if _, ok := v.(bool); ok {
				keys = append(keys, k)
			}
			if sec, ok := v.(map[string]any); ok {
				for sk, sv := range sec {
					if _, ok := sv.(bool); ok {
						keys = append(keys, k+"."+sk)
					}
				}
			}
		}
		if len(keys) == 0 {
			t.Fatal("no boolean key in the example config")
		}
		for _, k := range keys {
			for _, v := range []string{"true", "false"} {
				set := fmt.Sprintf("config.%s=%s", k, v)
				if !slices.ContainsFunc(cases, func(c boolCase) bool { return c.set == set }) {
					t.Errorf("no case for --set-string %s", set)
				}
			}
		}
	})

	// Anything else for a boolean key is refused when rendering, rather
	// than by the plugin in a crash loop (or taken for true).
	for _, set := range []string{
		"config.pod_dirs.remove_orphaned=yes",
		"config.pod_dirs.remove_orphaned=False",
		"config.dry_run=TRUE",
		"config.cgroups.enabled=off",
		"config.network.enabled=no",
		"config.network.enabled=",
	} {
		t.Run("refused: "+set, func(t *testing.T) {
			vals := map[string]any{}
			if err := strvals.ParseIntoString(set, vals); err != nil {
				t.Fatal(err)
			}
			if out, err := render(t, vals); err == nil {
				t.Errorf("--set-string %s rendered:\n%s", set, out)
			} else if key, _, _ := strings.Cut(set, "="); !strings.Contains(err.Error(), key+": expected a boolean (true or false)") {
				t.Errorf("--set-string %s: %v, want the key named", set, err)
			} else {
				t.Log(err)
			}
		})
	}
}

// tomlKey is the value of a "key" or "section.key" in a TOML text.
func tomlKey(t *testing.T, text, key string) any {
	t.Helper()
	var m map[string]any
	if err := toml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("config.toml: %v\n%s", err, text)
	}
	section, name, ok := strings.Cut(key, ".")
	if !ok {
		return m[key]
	}
	sec, _ := m[section].(map[string]any)
	return sec[name]
}
