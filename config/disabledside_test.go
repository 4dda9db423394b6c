package config

import "testing"

// TestCgroupKeysOfADisabledSideDoNotStopThePlugin: with cgroups.enabled
// = false the plugin never reads cgroups.mountpoint or cgroups.root
// (housekeeping.OptionsFromConfig), so a value the cgroup side could not
// use does not make it unable to run; 578f2bc refused them, and they started before.
func TestCgroupKeysOfADisabledSideDoNotStopThePlugin(t *testing.T) {
	for _, text := range []string{
		"[cgroups]\nenabled = false\nmountpoint = \"/sys/fs/cgroup/\"\n",
		"[cgroups]\nenabled = false\nroot = \"kubepods.slice\"\n",
	} {
		if _, err := Parse([]byte(text), "c.toml"); err != nil {
			t.Errorf("%q: %v", text, err)
		}
	}
}
